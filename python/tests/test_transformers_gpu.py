"""flashrs as a transformers attention implementation, on a GPU: a random-weight Llama (4 layers,
hidden 2048, 16 heads on 4 KV heads, bf16, built from a config: nothing is downloaded) with the
"rs_attention" implementation (flashrs.transformers) against the same weights with "sdpa", both measured against an fp32 copy:
causal prefill, a left-padded batch, and 32 greedy generate() steps. flashrs passes when its
error to fp32 stays within twice sdpa's (bf16 noise) and its argmax agrees with fp32's on at
least 99% of the positions. The same for a random-weight Gemma 2 (sliding-window layers of 128
keys between full ones, an attention logit softcap of 1.0), against "eager" (which applies the
softcap; sdpa does not), and for a random-weight GPT-OSS (sliding and full layers, attention
sinks of a few units per head, grouped-query heads of dim 64), against "eager" (which joins the
sinks). Skipped without torch, transformers or a CUDA device; the mask-function
checks need torch and transformers only."""

import copy
import os
import unittest

try:
    import torch

    HAVE_CUDA = torch.cuda.is_available()
    from transformers import Gemma2Config, Gemma2ForCausalLM, LlamaConfig, LlamaForCausalLM
    from transformers import GptOssConfig, GptOssForCausalLM
    from transformers import masking_utils

    HAVE_TRANSFORMERS = True
except ImportError:  # the CPU CI
    HAVE_CUDA = HAVE_TRANSFORMERS = False

import flashrs

if HAVE_CUDA:
    import flashrs.transformers


def config():
    return LlamaConfig(
        vocab_size=8192,
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=4,
        num_attention_heads=16,
        num_key_value_heads=4,
        max_position_embeddings=4096,
        attention_dropout=0.0,
    )


def gemma2_config():
    """Gemma 2 as transformers builds it (sliding and full layers alternating, softcapped logits),
    small, with a window short enough that prefill and decode both cross it."""
    return Gemma2Config(
        vocab_size=8192,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=128,
        query_pre_attn_scalar=128,
        sliding_window=128,
        attn_logit_softcapping=1.0,
        max_position_embeddings=4096,
        attention_dropout=0.0,
    )


def gpt_oss_config():
    """GPT-OSS as transformers builds it (sliding and full layers alternating, a sink per query
    head, mixture-of-experts MLPs), small, with a window that prefill and decode both cross."""
    return GptOssConfig(
        vocab_size=8192,
        hidden_size=1024,
        intermediate_size=1024,
        num_hidden_layers=4,
        num_attention_heads=16,
        num_key_value_heads=4,
        head_dim=64,
        num_local_experts=4,
        num_experts_per_tok=2,
        sliding_window=128,
        max_position_embeddings=4096,
        attention_dropout=0.0,
    )


@unittest.skipUnless(HAVE_CUDA, "needs torch, transformers and a CUDA device")
class Llama(unittest.TestCase):
    model_class, make_config, baseline = (LlamaForCausalLM, config, "sdpa") if HAVE_TRANSFORMERS else (None,) * 3

    @classmethod
    def setUpClass(cls):
        seed = int(os.environ.get("FLASHRS_SEED", "1234"))
        torch.manual_seed(seed)
        cls.name = flashrs.transformers.register()
        cls.model = cls.model_class(cls.make_config()).to("cuda", torch.bfloat16).eval()
        cls.prepare(cls.model)
        cls.reference = copy.deepcopy(cls.model).float()
        cls.reference.set_attn_implementation(cls.baseline)
        cls.gen = torch.Generator(device="cuda").manual_seed(seed)

    @classmethod
    def prepare(cls, model):
        """Weights the random initialisation leaves without effect, made to matter."""

    def logits(self, implementation, ids, mask=None):
        self.model.set_attn_implementation(implementation)
        with torch.no_grad():
            return self.model(input_ids=ids, attention_mask=mask).logits.float()

    def reference_logits(self, ids, mask=None):
        with torch.no_grad():
            return self.reference(input_ids=ids, attention_mask=mask).logits

    def assert_close(self, got, sdpa, want, what):
        """flashrs' error to fp32 within twice sdpa's (plus a floor); its argmax agreeing with
        fp32's wherever fp32's top two logits are further apart than bf16's noise (sdpa's largest
        error), on at least 99% of those positions, and overall no worse than sdpa's (random
        weights leave many near-ties, which any bf16 implementation flips)."""
        err = (got - want).abs().max().item()
        sdpa_err = (sdpa - want).abs().max().item()
        top2 = want.topk(2, dim=-1).values
        decisive = (top2[..., 0] - top2[..., 1]) > 2 * sdpa_err
        same = got.argmax(-1) == want.argmax(-1)
        sdpa_same = sdpa.argmax(-1) == want.argmax(-1)
        agree, sdpa_agree = same.float().mean().item(), sdpa_same.float().mean().item()
        decided = same[decisive].float().mean().item() if bool(decisive.any()) else 1.0
        print(
            f"{what}: max |diff| to fp32 flashrs {err:.4g} sdpa {sdpa_err:.4g}; argmax agreement "
            f"flashrs {agree:.4f} sdpa {sdpa_agree:.4f}; where decisive ({int(decisive.sum())} of "
            f"{decisive.numel()}) flashrs {decided:.4f}"
        )
        self.assertFalse(got.isnan().any().item(), what)
        self.assertLessEqual(err, 2 * sdpa_err + 1e-3, what)
        self.assertGreaterEqual(decided, 0.99, what)
        self.assertGreaterEqual(agree, sdpa_agree - 0.02, what)

    def test_causal_prefill(self):
        ids = torch.randint(0, 8192, (2, 512), device="cuda", generator=self.gen)
        want = self.reference_logits(ids)
        self.assert_close(self.logits(self.name, ids), self.logits(self.baseline, ids), want, "prefill")

    def test_padded_batch(self):
        lengths = [256, 200, 77]
        ids = torch.randint(0, 8192, (3, 256), device="cuda", generator=self.gen)
        mask = torch.zeros(3, 256, dtype=torch.long, device="cuda")
        for row, n in enumerate(lengths):
            mask[row, 256 - n :] = 1  # left padding, as generate() takes it
        real = mask.bool()
        want = self.reference_logits(ids, mask)[real]
        got = self.logits(self.name, ids, mask)[real]
        sdpa = self.logits(self.baseline, ids, mask)[real]
        self.assert_close(got, sdpa, want, "padded batch")

    def test_generate_32_steps(self):
        for padded in (False, True):
            with self.subTest(padded=padded):
                ids = torch.randint(0, 8192, (2, 100), device="cuda", generator=self.gen)
                mask = torch.ones_like(ids)
                if padded:
                    mask[1, :37] = 0
                self.model.set_attn_implementation(self.name)
                with torch.no_grad():
                    run = self.model.generate(
                        input_ids=ids, attention_mask=mask, max_new_tokens=32, min_new_tokens=32,
                        do_sample=False, output_logits=True, return_dict_in_generate=True, pad_token_id=0,
                    )
                steps = torch.stack(run.logits, 1).float()  # [B, 32, V]: each decode step's logits
                sequence = run.sequences
                full_mask = torch.cat([mask, torch.ones(2, 32, dtype=mask.dtype, device="cuda")], 1)
                # The fp32 model and sdpa read the whole generated sequence at once; the logits
                # that chose token t are those at position t - 1.
                picked = slice(ids.shape[1] - 1, ids.shape[1] + 31)
                want = self.reference_logits(sequence, full_mask)[:, picked]
                sdpa = self.logits(self.baseline, sequence, full_mask)[:, picked]
                self.assert_close(steps, sdpa, want, f"generate, padded={padded}")


class Gemma2(Llama):
    """The same checks on Gemma 2: sliding-window layers (window_size (127, 127), causal) and the
    attention logit softcap through flashrs.transformers, against eager attention."""

    model_class, make_config, baseline = (Gemma2ForCausalLM, gemma2_config, "eager") if HAVE_TRANSFORMERS else (None,) * 3


class GptOss(Llama):
    """The same checks on GPT-OSS: its attention sinks (``s_aux``) and sliding layers through
    flashrs.transformers, against eager attention."""

    model_class, make_config, baseline = (GptOssForCausalLM, gpt_oss_config, "eager") if HAVE_TRANSFORMERS else (None,) * 3

    @classmethod
    def prepare(cls, model):
        # Initialised near 0, a sink weighs about one key: spread them over a few units, so that
        # some heads give their sink most of a short row's weight and others little.
        with torch.no_grad():
            for layer in model.model.layers:
                layer.self_attn.sinks.normal_(0.0, 3.0)


@unittest.skipUnless(HAVE_TRANSFORMERS, "needs torch and transformers")
class MaskFunctions(unittest.TestCase):
    """Which of transformers' mask functions the mask function lets through: a causal sliding
    window is read off the function itself, so a chunked or bidirectional one is refused."""

    def test_windows_are_told_apart(self):
        from flashrs.transformers import _is_causal_window, padding_mask

        window = masking_utils.sliding_window_causal_mask_function
        self.assertTrue(_is_causal_window(window(128), 128))
        self.assertTrue(_is_causal_window(window(1), 1))
        self.assertFalse(_is_causal_window(window(128), 127))
        self.assertFalse(_is_causal_window(window(128), 129))
        self.assertFalse(_is_causal_window(masking_utils.causal_mask_function, 128))
        chunked = masking_utils.chunked_causal_mask_function(128, torch.zeros(1, dtype=torch.long))
        self.assertFalse(_is_causal_window(chunked, 128))
        bidirectional = getattr(masking_utils, "sliding_window_bidirectional_mask_function", None)
        if bidirectional is not None:
            self.assertFalse(_is_causal_window(bidirectional(128), 128))
        # As transformers 5 calls the mask function for a sliding layer.
        mask = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]], dtype=torch.bool)
        got = padding_mask(batch_size=2, kv_length=4, kv_offset=0, mask_function=window(2), attention_mask=mask, local_size=2)
        self.assertTrue(torch.equal(got, mask))
        for mask_function, size in [(chunked, 128), (window(3), 2)]:
            with self.assertRaisesRegex(ValueError, "cannot express the mask function"):
                padding_mask(batch_size=2, kv_length=4, mask_function=mask_function, attention_mask=mask, local_size=size)


if __name__ == "__main__":
    unittest.main()
