"""flashrs at head dims the kernels are not compiled for (96, 192, and other multiples of 8 up to
256), which run on Hopper on the next compiled head dim's ``flash_ws`` tiles, on a GPU: forward,
log-sum-exp and the gradients of q, k and v against a float64 reference, within twice the error
of the same reference in the inputs' dtype plus a floor (FlashAttention's criterion); with masks,
a softcap, grouped-query heads and both layouts. Then varlen, a CUDA-graph capture,
torch.compile of a training step, opcheck, and the paged call's refusal. Skipped without torch,
a CUDA device, or on a GPU older than Hopper (where these head dims are refused). Also v with a
head dim of its own below q's and k's (DeepSeek's MLA prefill: 192 and 128), forward and
gradients."""

import unittest

from gpu_support import HAVE_CUDA, AttentionCase, captured, torch

import flashrs

if HAVE_CUDA:
    from test_window_softcap_gpu import grads, reference

HOPPER = HAVE_CUDA and torch.cuda.get_device_capability()[0] >= 9

# (B, H, H_kv, S_q, S_k, D, causal, window_size, softcap, layout)
CASES = [
    (2, 8, 2, 300, 457, 96, True, (-1, -1), 0.0, None),
    (1, 8, 8, 512, 512, 96, False, (100, 50), 0.0, "bshd"),
    (1, 8, 2, 257, 190, 192, True, (-1, -1), 1.5, None),  # S_q > S_k: rows that see no key
    (2, 8, 2, 1, 3000, 192, False, (-1, -1), 0.0, "bshd"),  # decode
    (1, 4, 4, 200, 200, 40, True, (31, 0), 0.0, "bshd"),
    (1, 4, 2, 130, 260, 136, False, (-1, -1), 0.0, None),
]


@unittest.skipUnless(HOPPER, "padded head dims run on Hopper (sm_90)")
class PaddedHeadDims(AttentionCase):
    def call(self, q, k, v, case, **kw):
        causal, window, softcap, layout = case[6:]
        return flashrs.attention(q, k, v, causal=causal, layout=layout, window_size=window, softcap=softcap, **kw)

    def test_forward_and_lse(self):
        for dtype in (torch.float16, torch.bfloat16):
            for case in CASES:
                causal, window, softcap, layout = case[6:]
                what = f"{case} {dtype}, FLASHRS_SEED={self.seed}"
                with self.subTest(case=case, dtype=dtype):
                    q, k, v = self.inputs(case, dtype)
                    out, lse = self.call(q, k, v, case, return_lse=True)
                    self.assertEqual(out.shape, q.shape)
                    exact, exact_lse = reference(q, k, v, causal, window, softcap, layout=layout)
                    same, _ = reference(q, k, v, causal, window, softcap, layout=layout, dtype=dtype)
                    self.assert_within("out", out, same, exact, what)
                    seen = exact_lse.isfinite()
                    self.assertTrue(torch.equal(lse.isfinite(), seen), f"-inf rows: {what}")
                    if seen.any():
                        lse_err = (lse.double()[seen] - exact_lse[seen]).abs().max().item()
                        self.assertLess(lse_err, 1e-3, what)

    def test_gradients(self):
        for case in CASES:
            causal, window, softcap, layout = case[6:]
            dtype = torch.bfloat16
            what = f"{case} {dtype}, FLASHRS_SEED={self.seed}"
            with self.subTest(case=case):
                q, k, v = self.inputs(case, dtype, requires_grad=True)
                d_out = torch.randn(q.shape, generator=self.gen, device=self.device).to(dtype)
                ours = grads(lambda *t: self.call(*t, case), (q, k, v), d_out)
                exact = grads(lambda *t: reference(*t, causal, window, softcap, layout=layout)[0], (q, k, v), d_out)
                same = grads(
                    lambda *t: reference(*t, causal, window, softcap, layout=layout, dtype=dtype)[0], (q, k, v), d_out
                )
                largest = max(g.abs().max().item() for g in exact)
                for name, o, s, e in zip(("dq", "dk", "dv"), ours, same, exact):
                    self.assertEqual(o.shape, e.shape, name)
                    self.assert_within(name, o, s, e, what, largest)

    def test_varlen(self):
        heads, heads_kv, d = 8, 2, 96
        lens_q, lens_k = [17, 0, 300, 1], [40, 5, 300, 1]
        cu = lambda lens: torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32, device=self.device)
        make = lambda rows, h: torch.randn(rows, h, d, generator=self.gen, device=self.device).to(torch.bfloat16)
        q, k, v = make(sum(lens_q), heads), make(sum(lens_k), heads_kv), make(sum(lens_k), heads_kv)
        out = flashrs.varlen_attention(q, k, v, cu(lens_q), cu(lens_k), causal=True)
        starts_q, starts_k = cu(lens_q).tolist(), cu(lens_k).tolist()
        for b in range(len(lens_q)):
            rows = slice(starts_q[b], starts_q[b + 1])
            if lens_q[b] == 0:
                continue
            keys = slice(starts_k[b], starts_k[b + 1])
            one = lambda t, r: t[r].unsqueeze(0)
            exact, _ = reference(one(q, rows), one(k, keys), one(v, keys), True, (-1, -1), 0.0, layout="bshd")
            same, _ = reference(
                one(q, rows), one(k, keys), one(v, keys), True, (-1, -1), 0.0, layout="bshd", dtype=torch.bfloat16
            )
            self.assert_within("varlen out", out[rows].unsqueeze(0), same, exact, f"sequence {b}, FLASHRS_SEED={self.seed}")

    def test_graph_compile_and_opcheck(self):
        case = CASES[0]
        q, k, v = self.inputs(case, torch.bfloat16)
        eager = self.call(q, k, v, case)
        graph, (out,) = captured(lambda: (self.call(q, k, v, case),))
        graph.replay()
        self.assertTrue(torch.equal(out, eager), "graph replay")
        for t in (q, k, v):
            t.copy_(torch.randn(t.shape, generator=self.gen, device=self.device).to(t.dtype))
        graph.replay()
        self.assertTrue(torch.equal(out, self.call(q, k, v, case)), "replay after new contents")

        qg, kg, vg = self.inputs(case, torch.bfloat16, requires_grad=True)

        def step(q, k, v):
            return self.call(q, k, v, case).float().square().sum()

        compiled = torch.compile(step, fullgraph=True)
        loss = compiled(qg, kg, vg)
        loss.backward()
        got = [t.grad.clone() for t in (qg, kg, vg)]
        for t in (qg, kg, vg):
            t.grad = None
        step(qg, kg, vg).backward()
        for name, a, b in zip(("dq", "dk", "dv"), got, (qg.grad, kg.grad, vg.grad)):
            self.assertTrue(torch.allclose(a.float(), b.float(), rtol=1e-2, atol=1e-2), name)
        torch.library.opcheck(
            torch.ops.flashrs.attention.default,
            (qg, kg, vg, True, None, True, "bhsd", False, -1, -1, 0.0, None),
            test_utils=("test_schema", "test_autograd_registration", "test_faketensor"),
        )

    def test_v_head_dim_of_its_own(self):
        # (B, H, H_kv, S_q, S_k, D, D_v, causal, layout)
        for b, h, h_kv, s_q, s_k, d, dv, causal, layout in [
            (1, 8, 8, 300, 300, 192, 128, True, "bshd"),
            (2, 4, 2, 130, 260, 128, 64, False, None),
            (1, 4, 4, 1, 500, 192, 128, False, None),
        ]:
            what = f"{(b, h, h_kv, s_q, s_k, d, dv, causal, layout)}, FLASHRS_SEED={self.seed}"

            def make(heads, s, width):
                dims = (b, s, heads, width) if layout == "bshd" else (b, heads, s, width)
                t = torch.randn(dims, generator=self.gen, device=self.device).to(torch.bfloat16)
                return t.requires_grad_()

            q, k, v = make(h, s_q, d), make(h_kv, s_k, d), make(h_kv, s_k, dv)
            with self.subTest(case=what):
                out, lse = flashrs.attention(q, k, v, causal=causal, layout=layout, return_lse=True)
                self.assertEqual(out.shape[-1], dv)
                exact, exact_lse = reference(q, k, v, causal, (-1, -1), 0.0, layout=layout)
                same, _ = reference(q, k, v, causal, (-1, -1), 0.0, layout=layout, dtype=torch.bfloat16)
                self.assert_within("out", out, same, exact, what)
                self.assertLess((lse.double() - exact_lse).abs().max().item(), 1e-3, what)
                d_out = torch.randn(out.shape, generator=self.gen, device=self.device).to(torch.bfloat16)
                ours = grads(lambda *t: flashrs.attention(*t, causal=causal, layout=layout), (q, k, v), d_out)
                exact = grads(lambda *t: reference(*t, causal, (-1, -1), 0.0, layout=layout)[0], (q, k, v), d_out)
                same = grads(
                    lambda *t: reference(*t, causal, (-1, -1), 0.0, layout=layout, dtype=torch.bfloat16)[0],
                    (q, k, v), d_out,
                )
                largest = max(g.abs().max().item() for g in exact)
                for name, o, s, e in zip(("dq", "dk", "dv"), ours, same, exact):
                    self.assertEqual(o.shape, e.shape, name)
                    self.assert_within(name, o, s, e, what, largest)

    def test_paged_refuses_them(self):
        q = torch.randn(2, 1, 8, 96, device=self.device, dtype=torch.bfloat16)
        cache = torch.randn(4, 16, 2, 96, device=self.device, dtype=torch.bfloat16)
        table = torch.tensor([[0, 1], [2, 3]], dtype=torch.int32, device=self.device)
        lens = torch.tensor([20, 30], dtype=torch.int32, device=self.device)
        with self.assertRaises(ValueError) as caught:
            flashrs.paged_attention(q, cache, cache, table, lens)
        self.assertIn("unsupported head dim 96", str(caught.exception))


if __name__ == "__main__":
    unittest.main()
