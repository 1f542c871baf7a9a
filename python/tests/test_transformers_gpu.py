"""flashrs as a transformers attention implementation, on a GPU: a random-weight Llama (4 layers,
hidden 2048, 16 heads on 4 KV heads, bf16, built from a config: nothing is downloaded) with the
"rs_attention" implementation (flashrs.transformers) against the same weights with "sdpa", both measured against an fp32 copy:
causal prefill, a left-padded batch, and 32 greedy generate() steps. flashrs passes when its
error to fp32 stays within twice sdpa's (bf16 noise) and its argmax agrees with fp32's on at
least 99% of the positions. Skipped without torch, transformers or a CUDA device."""

import copy
import os
import unittest

try:
    import torch

    HAVE_CUDA = torch.cuda.is_available()
    from transformers import LlamaConfig, LlamaForCausalLM
except ImportError:  # the CPU CI
    HAVE_CUDA = False

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


@unittest.skipUnless(HAVE_CUDA, "needs torch, transformers and a CUDA device")
class Llama(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        seed = int(os.environ.get("FLASHRS_SEED", "1234"))
        torch.manual_seed(seed)
        cls.name = flashrs.transformers.register()
        cls.model = LlamaForCausalLM(config()).to("cuda", torch.bfloat16).eval()
        cls.reference = copy.deepcopy(cls.model).float()
        cls.reference.set_attn_implementation("sdpa")
        cls.gen = torch.Generator(device="cuda").manual_seed(seed)

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
        self.assert_close(self.logits(self.name, ids), self.logits("sdpa", ids), want, "prefill")

    def test_padded_batch(self):
        lengths = [256, 200, 77]
        ids = torch.randint(0, 8192, (3, 256), device="cuda", generator=self.gen)
        mask = torch.zeros(3, 256, dtype=torch.long, device="cuda")
        for row, n in enumerate(lengths):
            mask[row, 256 - n :] = 1  # left padding, as generate() takes it
        real = mask.bool()
        want = self.reference_logits(ids, mask)[real]
        got = self.logits(self.name, ids, mask)[real]
        sdpa = self.logits("sdpa", ids, mask)[real]
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
                sdpa = self.logits("sdpa", sequence, full_mask)[:, picked]
                self.assert_close(steps, sdpa, want, f"generate, padded={padded}")


if __name__ == "__main__":
    unittest.main()
