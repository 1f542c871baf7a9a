"""flashrs.distributed on one GPU: ring attention and Ulysses attention of simulated worlds (every
rank's schedule run in this process, local copies in place of NCCL) against whole-sequence
attention in float64, forward and the gradients of q, k and v, by the backward tests' criterion
(the error at most twice that of torch's math path in the same dtype, or of flashrs on the whole
sequence, whichever is larger, plus a floor of two roundings of the largest value). Causal (the
zigzag order) and not, grouped-query heads, both dim orders, fp16 and bf16, head dims 64 and 128,
worlds of 2 and 4. Also: the exchanges each pass makes, the float32 merge's empty rows, the
zigzag helpers, deterministic bits, and ``ring_attention`` itself over a one-rank NCCL group.
Skipped without torch or a CUDA device; from the checkout's root, with flashrs installed:

    python3 -m unittest discover -v -s python/tests -t python/tests -p test_ring_gpu.py

FLASHRS_SEED replays a run."""

import os
import pathlib
import unittest
from collections import Counter

from gpu_support import GpuCase, torch

import flashrs

try:
    import flashrs.distributed as fd
except ImportError:  # an installed wheel older than the module: take it from this checkout
    flashrs.__path__.append(str(pathlib.Path(__file__).resolve().parent.parent / "flashrs"))
    import flashrs.distributed as fd
plan = fd.plan

# NVLink multicast stays off (the one-rank NCCL group below).
os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"
os.environ["NVSHMEM_DISABLE_NVLS"] = "1"

# (B, H, H_kv, S, D, causal, layout, world): S a multiple of 2 * world; chunks of 96 and 48
# positions (not multiples of the kernels' tiles) among them.
RING_CASES = [
    (1, 8, 2, 1024, 64, True, "bshd", 2),
    (2, 8, 2, 1024, 128, True, "bshd", 4),
    (1, 4, 4, 768, 128, True, "bhsd", 4),
    (2, 4, 2, 384, 64, True, "bhsd", 4),
    (2, 8, 8, 512, 64, False, "bshd", 2),
    (1, 8, 2, 1024, 128, False, "bhsd", 4),
]

# (B, H, H_kv, S, D, causal, layout, world): both head counts divide by the world.
ULYSSES_CASES = [
    (1, 8, 2, 512, 64, True, "bshd", 2),
    (2, 8, 4, 512, 128, False, "bhsd", 4),
    (1, 8, 8, 384, 128, True, "bshd", 4),
]

EPS = {}
if torch is not None:
    EPS = {torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}


def to_bhsd(t, layout):
    return t.transpose(1, 2) if layout == "bshd" else t


def sdpa(q, k, v, causal, layout):
    """SDPA's math path (any dtype), with the causal mask built here (S_q = S_k)."""
    q, k, v = (to_bhsd(t, layout) for t in (q, k, v))
    mask = None
    if causal:
        i = torch.arange(q.shape[2], device=q.device)[:, None]
        j = torch.arange(k.shape[2], device=q.device)[None, :]
        mask = j <= i + (k.shape[2] - q.shape[2])
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    return to_bhsd(out, layout)


def forward_and_grads(f, inputs, d_out):
    for t in inputs:
        t.grad = None
    out = f(*inputs)
    out.backward(d_out)
    return [out.detach()] + [t.grad.clone() for t in inputs]


class Simulated(GpuCase):
    def inputs(self, case, dtype):
        b, h, h_kv, s, d, causal, layout, world = case
        dims = lambda heads: (b, s, heads, d) if layout == "bshd" else (b, heads, s, d)
        rand = lambda heads: torch.randn(dims(heads), generator=self.gen, device=self.device).to(dtype).requires_grad_()
        q, k, v = rand(h), rand(h_kv), rand(h_kv)
        d_out = torch.randn(q.shape, generator=self.gen, device=self.device).to(dtype)
        return q, k, v, d_out

    def compare(self, name, case, dtype, got, math, whole, exact):
        """got within twice the larger error of the math path and of flashrs on the whole
        sequence, plus two roundings of the largest exact value."""
        exact = torch.nan_to_num(exact)
        self.assertEqual(got.shape, exact.shape, name)
        self.assertEqual(got.dtype, dtype, name)
        self.assertFalse(got.isnan().any().item(), f"{name} has NaN")
        err = (got.double() - exact).abs().max().item()
        math_err = (torch.nan_to_num(math.double()) - exact).abs().max().item()
        whole_err = (whole.double() - exact).abs().max().item()
        floor = 2 * EPS[dtype] * exact.abs().max().item()
        print(f"{case} {dtype}: {name} max err {err:.3e} (math path {math_err:.3e}, whole {whole_err:.3e})")
        self.assertLessEqual(err, 2 * max(math_err, whole_err) + floor,
                             f"{case} {dtype} seed {self.seed}: {name} {err} vs math {math_err}, whole {whole_err}")

    def check(self, case, dtype, f):
        """f(q, k, v) against the whole sequence: output, dq, dk, dv."""
        causal, layout = case[5], case[6]
        q, k, v, d_out = self.inputs(case, dtype)
        ours = forward_and_grads(f, (q, k, v), d_out)
        whole = forward_and_grads(lambda *t: flashrs.attention(*t, causal=causal, layout=layout), (q, k, v), d_out)
        math = forward_and_grads(lambda *t: sdpa(*t, causal, layout), (q, k, v), d_out)
        wide = [t.detach().double().requires_grad_() for t in (q, k, v)]
        exact = forward_and_grads(lambda *t: sdpa(*t, causal, layout), wide, d_out.double())
        for i, name in enumerate(("out", "dq", "dk", "dv")):
            self.compare(name, case, dtype, ours[i], math[i], whole[i], exact[i])
        return q, k, v, d_out

    def test_ring_equals_whole_sequence_attention(self):
        for case in RING_CASES:
            for dtype in (torch.float16, torch.bfloat16):
                causal, layout, world = case[5], case[6], case[7]
                with self.subTest(case=case, dtype=dtype, seed=self.seed):
                    q, k, v, _ = self.check(
                        case, dtype,
                        lambda *t: fd.ring_attention_simulated(*t, world=world, causal=causal, layout=layout),
                    )
                    with torch.no_grad():
                        _, lse = fd.ring_attention_simulated(
                            q, k, v, world=world, causal=causal, layout=layout, return_lse=True
                        )
                        _, whole_lse = flashrs.attention(q, k, v, causal=causal, layout=layout, return_lse=True)
                    self.assertEqual(lse.dtype, torch.float32)
                    self.assertLessEqual((lse - whole_lse).abs().max().item(), 1e-3)

    def test_ulysses_equals_whole_sequence_attention(self):
        for case in ULYSSES_CASES:
            for dtype in (torch.float16, torch.bfloat16):
                causal, layout, world = case[5], case[6], case[7]
                with self.subTest(case=case, dtype=dtype, seed=self.seed):
                    self.check(
                        case, dtype,
                        lambda *t: fd.ulysses_attention_simulated(*t, world=world, causal=causal, layout=layout),
                    )

    def test_both_passes_go_through_the_exchanges(self):
        """Per rank, the forward exchanges keys and values R - 1 times; the backward R - 1 times
        again and the float32 gradient accumulators R times (the last one home)."""
        sent = []
        original = fd._LocalRing.send_recv

        def counting(ring, tensors):
            sent.append((ring.rank, tuple(t.dtype for t in tensors)))
            return original(ring, tensors)

        for world in (1, 2, 4):
            case = (1, 4, 2, 64 * world, 64, True, "bshd", world)
            q, k, v, d_out = self.inputs(case, torch.bfloat16)
            fd._LocalRing.send_recv = counting
            try:
                del sent[:]
                out = fd.ring_attention_simulated(q, k, v, world=world, causal=True)
                forward = list(sent)
                del sent[:]
                out.backward(d_out)
                backward = list(sent)
            finally:
                fd._LocalRing.send_recv = original
            kv, acc = (torch.bfloat16,) * 2, (torch.float32,) * 2
            self.assertEqual(Counter(forward), Counter([(r, kv) for r in range(world)] * (world - 1)), world)
            expected = [(r, kv) for r in range(world)] * (world - 1) + [(r, acc) for r in range(world)] * world
            self.assertEqual(Counter(backward), Counter(expected), world)

    def test_deterministic_ring_gradients_are_bit_identical(self):
        case = (1, 8, 2, 1024, 128, True, "bshd", 4)
        q, k, v, d_out = self.inputs(case, torch.bfloat16)
        f = lambda *t: fd.ring_attention_simulated(*t, world=4, causal=True, deterministic=True)
        first = forward_and_grads(f, (q, k, v), d_out)
        for repeat in range(3):
            again = forward_and_grads(f, (q, k, v), d_out)
            for name, a, b in zip(("out", "dq", "dk", "dv"), first, again):
                self.assertTrue(torch.equal(a, b), f"{name} differs on run {repeat + 2}")

    def test_merge_in_float32_and_rows_that_see_nothing(self):
        b, h, s, d = 2, 4, 100, 64
        parts = [torch.randn(b, s, h, d, generator=self.gen, device=self.device).to(torch.bfloat16) for _ in range(2)]
        lses = [torch.randn(b, h, s, generator=self.gen, device=self.device) * 3 for _ in range(2)]
        lses[0][:, :, :10] = float("-inf")
        lses[1][:, :, 5:15] = float("-inf")  # rows 5..9: -inf on both sides
        acc = torch.zeros(b, s, h, d, device=self.device)
        acc_lse = torch.full((b, h, s), float("-inf"), device=self.device)
        for part, lse in zip(parts, lses):
            fd._merge_into(acc, acc_lse, part, lse, "bshd")
        self.assertTrue(bool((acc[:, 5:10] == 0).all()) and bool((acc_lse[:, :, 5:10] == float("-inf")).all()))
        self.assertFalse(acc.isnan().any().item())
        expected_lse = torch.logaddexp(lses[0].double(), lses[1].double())
        w = [torch.exp(l.double() - expected_lse).nan_to_num(0.0).transpose(1, 2).unsqueeze(-1) for l in lses]
        expected = (w[0] * parts[0].double() + w[1] * parts[1].double()).nan_to_num(0.0)
        seen = torch.ones(s, dtype=torch.bool, device=self.device)
        seen[5:10] = False
        self.assertLessEqual((acc - expected)[:, seen].abs().max().item(), 1e-5)
        self.assertLessEqual((acc_lse.double() - expected_lse)[:, :, seen].abs().max().item(), 1e-5)
        # The same as flashrs.merge_states (whose outputs round to bf16).
        out, lse = flashrs.merge_states(parts[0], lses[0], parts[1], lses[1], layout="bshd")
        self.assertLessEqual((out.float() - acc).abs().max().item(), 2.0**-8 * acc.abs().max().item())

    def test_zigzag_helpers(self):
        for world in (1, 2, 3, 4):
            seq = 2 * world * 5
            x = torch.arange(seq, device=self.device).view(1, seq, 1, 1).expand(2, seq, 3, 4).contiguous()
            for rank in range(world):
                local = fd.zigzag_split(x, rank, world, 1)
                self.assertEqual(local[0, :, 0, 0].tolist(), plan.zigzag_positions(rank, world, seq))
            parts = [fd.zigzag_split(x, rank, world, 1) for rank in range(world)]
            self.assertTrue(torch.equal(fd.zigzag_gather(parts, 1), x))
            permuted = fd.zigzag_permute(x, world, 1)
            self.assertTrue(torch.equal(permuted, torch.cat(parts, dim=1)))
            self.assertTrue(torch.equal(fd.zigzag_unpermute(permuted, world, 1), x))
        with self.assertRaisesRegex(ValueError, "multiple of 8"):
            fd.zigzag_split(x[:, :10], 0, 4, 1)

    def test_refusals(self):
        q = torch.zeros(1, 6, 4, 64, device=self.device, dtype=torch.bfloat16)
        with self.assertRaisesRegex(ValueError, "layout"):
            fd.ring_attention_simulated(q, q, q, world=2, layout="sbhd")
        with self.assertRaisesRegex(ValueError, "multiple of 4"):
            fd.ring_attention_simulated(q, q, q, world=2, causal=True)
        with self.assertRaisesRegex(ValueError, "heads"):
            fd.ulysses_attention_simulated(q, q[:, :, :2], q[:, :, :2], world=4)

    def test_ring_attention_over_a_one_rank_nccl_group(self):
        """``ring_attention`` itself (the NCCL ring, its autograd) in a group of this process
        alone: one step, the causal whole, no exchange of keys; the gradient accumulators come
        home without leaving."""
        import torch.distributed as dist

        if dist.is_initialized():
            self.skipTest("a process group is already initialised")
        try:
            dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
        except Exception as exc:  # no NCCL in this build
            self.skipTest(f"no one-rank NCCL group: {exc}")
        try:
            for case in [(1, 8, 2, 512, 128, True, "bshd", 1), (2, 4, 4, 256, 64, False, "bhsd", 1)]:
                causal, layout = case[5], case[6]
                with self.subTest(case=case):
                    self.check(case, torch.bfloat16, lambda *t: fd.ring_attention(*t, causal=causal, layout=layout))
                    self.check(case, torch.float16, lambda *t: fd.ulysses_attention(*t, causal=causal, layout=layout))
        finally:
            dist.destroy_process_group()


if __name__ == "__main__":
    unittest.main()
