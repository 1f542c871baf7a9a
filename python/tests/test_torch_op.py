"""flashrs.attention as a torch op, on a GPU: CUDA-graph capture and replay (bit-identical to
eager, and right again after the inputs' contents change), torch.compile(fullgraph=True),
torch.library.opcheck and the caller's current CUDA
context left as it was. Skipped without torch or a CUDA device (scripts/python_gpu.sh runs it)."""

import ctypes
import unittest

from gpu_support import HAVE_CUDA, GpuCase, captured, torch

if HAVE_CUDA:
    import torch.nn.functional as F

import flashrs

# (B, H, H_kv, S_q, S_k, D, causal, layout, dtype): a small dense call, grouped-query decode (the
# key-split kernel with its workspace), a causal persistent one (its item table), bshd order.
GRAPH_CASES = [
    (1, 8, 8, 512, 512, 64, False, "bshd", "float16"),
    (1, 8, 8, 512, 512, 64, False, None, "bfloat16"),
    (1, 32, 8, 1, 8192, 128, False, None, "bfloat16"),
    (4, 32, 8, 1, 4096, 128, False, "bshd", "float16"),
    (2, 16, 16, 2048, 2048, 128, True, None, "bfloat16"),
    (2, 32, 8, 1024, 1024, 128, True, "bshd", "float16"),
]


def make(shape, layout, dtype, gen, device):
    """Random inputs in [-2, 2) with dims [B, H, S, D], or [B, S, H, D] with layout="bshd"."""
    b, h, s, d = shape
    dims = (b, s, h, d) if layout == "bshd" else shape
    return (torch.rand(dims, generator=gen, device=device) * 4 - 2).to(getattr(torch, dtype))


def reference(q, k, v, causal, layout):
    """float64 SDPA on [B, H, S, D] views (bottom-right causal mask, built here)."""
    if layout == "bshd":
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    q, k, v = (t.double() for t in (q, k, v))
    mask = None
    if causal:
        i = torch.arange(q.shape[2], device=q.device)[:, None]
        j = torch.arange(k.shape[2], device=q.device)[None, :]
        mask = j <= i + (k.shape[2] - q.shape[2])
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    return out.transpose(1, 2) if layout == "bshd" else out


class TorchOp(GpuCase):
    def inputs(self, case):
        b, h, h_kv, s_q, s_k, d, causal, layout, dtype = case
        q = make((b, h, s_q, d), layout, dtype, self.gen, self.device)
        k = make((b, h_kv, s_k, d), layout, dtype, self.gen, self.device)
        v = make((b, h_kv, s_k, d), layout, dtype, self.gen, self.device)
        return q, k, v

    def test_graph_replay_is_eager_and_follows_new_contents(self):
        for case in GRAPH_CASES:
            causal, layout = case[6], case[7]
            with self.subTest(case=case, seed=self.seed):
                q, k, v = self.inputs(case)
                call = lambda: flashrs.attention(q, k, v, causal=causal, layout=layout, return_lse=True)
                eager, eager_lse = call()
                graph, (out, lse) = captured(call)
                graph.replay()
                torch.cuda.synchronize()
                self.assertTrue(torch.equal(out, eager), "replay differs from eager")
                self.assertTrue(torch.equal(lse, eager_lse), "replayed lse differs from eager")
                # New contents in the same buffers: the replay computes on them.
                for t, new in zip((q, k, v), self.inputs(case)):
                    t.copy_(new)
                graph.replay()
                fresh, fresh_lse = call()
                torch.cuda.synchronize()
                self.assertTrue(torch.equal(out, fresh), "replay on new contents differs from eager")
                self.assertTrue(torch.equal(lse, fresh_lse))
                err = (out.double() - reference(q, k, v, causal, layout)).abs().max().item()
                self.assertLessEqual(err, 6e-2, f"replay on new contents: max abs error {err}")
                # Many replays back to back stay right (nothing a replay reads is freed or reused).
                for _ in range(20):
                    graph.replay()
                torch.cuda.synchronize()
                self.assertTrue(torch.equal(out, fresh))

    def test_several_split_decode_calls_per_graph_and_graphs_in_any_order(self):
        # Decode calls split their keys into a workspace that the calls captured on one stream of
        # one capture share; two graphs, replayed alternately, each keep their own.
        a = self.inputs((1, 32, 8, 1, 8192, 128, False, None, "bfloat16"))
        b = self.inputs((4, 32, 8, 1, 4096, 128, False, "bshd", "bfloat16"))
        call_a = lambda: flashrs.attention(*a)
        call_b = lambda: flashrs.attention(*b, layout="bshd")
        want_a, want_b = call_a(), call_b()
        three, (a1, b1, a2) = captured(lambda: (call_a(), call_b(), call_a()))
        alone, (a3,) = captured(lambda: (call_a(),))
        for graph in (alone, three, alone, three, three):
            graph.replay()
        torch.cuda.synchronize()
        for got, want in ((a1, want_a), (b1, want_b), (a2, want_a), (a3, want_a)):
            self.assertTrue(torch.equal(got, want), "a replay differs from eager")

    def test_compile_fullgraph_matches_eager(self):
        q, k, v = self.inputs((2, 8, 2, 256, 384, 128, True, "bshd", "bfloat16"))

        # Elementwise work around the op only, exact in bf16 (powers of two), so the compiled
        # function must match eager bit for bit (a reduction's order could differ under inductor).
        def f(q, k, v):
            return flashrs.attention(q * 0.5, k, v, causal=True, layout="bshd") * 2

        compiled = torch.compile(f, fullgraph=True)
        self.assertTrue(torch.equal(compiled(q, k, v), f(q, k, v)))
        with_lse = lambda q, k, v: flashrs.attention(q, k, v, return_lse=True, layout="bshd")
        out, lse = torch.compile(with_lse, fullgraph=True)(q, k, v)
        want, want_lse = with_lse(q, k, v)
        self.assertTrue(torch.equal(out, want) and torch.equal(lse, want_lse))

    def test_opcheck(self):
        q, k, v = self.inputs((1, 4, 2, 128, 200, 64, False, None, "float16"))
        for causal, scale, return_lse, layout in [(False, None, True, "bhsd"), (True, 0.3, False, "bhsd")]:
            with self.subTest(causal=causal, return_lse=return_lse):
                torch.library.opcheck(torch.ops.flashrs.attention.default, (q, k, v, causal, scale, return_lse, layout, False))
        qs, ks, vs = self.inputs((1, 4, 2, 128, 200, 64, False, "bshd", "float16"))
        torch.library.opcheck(torch.ops.flashrs.attention.default, (qs, ks, vs, False, None, True, "bshd", False))

    def test_the_current_context_is_left_as_it_was(self):
        cuda = ctypes.CDLL("libcuda.so.1")

        def current():
            ctx = ctypes.c_void_p()
            self.assertEqual(cuda.cuCtxGetCurrent(ctypes.byref(ctx)), 0)
            return ctx.value

        q, k, v = self.inputs((1, 2, 2, 64, 64, 64, False, None, "float16"))
        want = flashrs.attention(q, k, v)
        out = torch.empty_like(q)
        stream = torch.cuda.current_stream().cuda_stream
        before = current()
        self.assertIsNotNone(before, "torch's context is current")
        # With no context current, the native call (outputs made beforehand, so that torch binds
        # nothing meanwhile) must leave none current: it binds the GPU's own while it runs.
        saved = flashrs._empty_like, flashrs._current_stream
        flashrs._empty_like, flashrs._current_stream = (lambda _: out), (lambda _: stream)
        self.assertEqual(cuda.cuCtxSetCurrent(None), 0)
        try:
            flashrs._attention(q, k, v, False, None, False, None)
            self.assertIsNone(current(), "the call left its context current")
        finally:
            cuda.cuCtxSetCurrent(ctypes.c_void_p(before))
            flashrs._empty_like, flashrs._current_stream = saved
        torch.cuda.synchronize()
        self.assertEqual(current(), before)
        self.assertTrue(torch.equal(out, want))

if __name__ == "__main__":
    unittest.main()
