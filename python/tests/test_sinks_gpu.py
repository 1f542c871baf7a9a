"""flashrs' attention sinks (``sinks=``, GPT-OSS's: one logit per query head in each row's
softmax denominator, with no value), on a GPU: forward, log-sum-exp and the gradients of q, k,
v and the sinks against a float64 reference that joins each sink to the finished softmax
(``out * e^lse / (e^lse + e^sink)``, ``lse = ln(e^lse + e^sink)``), within twice the error of
the same reference in the inputs' dtype plus a floor (FlashAttention's criterion); with windows,
softcaps, grouped-query heads, both layouts, rows that see no key, a head without a sink
(``-inf``). Then the varlen and paged calls, a CUDA-graph capture, torch.compile of a training
step, opcheck of the op with its sinks, and the refusals. Skipped without torch or a CUDA
device."""

import unittest

from gpu_support import HAVE_CUDA, AttentionCase, captured, torch

import flashrs

if HAVE_CUDA:
    from test_window_softcap_gpu import grads, reference

# (B, H, H_kv, S_q, S_k, D, causal, window_size, softcap, layout)
CASES = [
    (2, 8, 2, 300, 457, 64, True, (-1, -1), 0.0, None),
    (1, 8, 8, 512, 512, 128, False, (100, 50), 0.0, "bshd"),
    (1, 8, 2, 257, 190, 128, True, (-1, -1), 1.5, None),  # S_q > S_k: rows that see no key
    (2, 8, 2, 1, 3000, 128, False, (-1, -1), 0.0, "bshd"),  # decode, keys split over slices
    (1, 4, 4, 200, 200, 64, True, (31, 0), 0.0, "bshd"),  # a causal window (GPT-OSS's sliding layers)
]


def joined(out, lse, sinks, layout):
    """The reference's ``(out, lse)`` with each head's sink in its rows' denominators;
    differentiable, with no NaN in any branch (a row that saw no key, ``lse = -inf``, keeps zeros
    and takes the sink; a sink of ``-inf`` changes nothing)."""
    sink = sinks.to(lse.dtype).view(1, -1, 1).expand_as(lse)
    empty, none = torch.isinf(lse), torch.isinf(sink)
    lse_s = torch.where(empty, torch.zeros_like(lse), lse)
    sink_s = torch.where(none, torch.full_like(sink, -1e4), sink)
    both = torch.logaddexp(lse_s, sink_s)
    merged = torch.where(empty, sink, torch.where(none, lse, both))
    factor = torch.where(empty, torch.zeros_like(lse), torch.exp(lse_s - both))
    factor = factor.transpose(1, 2) if layout == "bshd" else factor
    return out * factor.unsqueeze(-1).to(out.dtype), merged


def sink_reference(q, k, v, sinks, case, dtype=None):
    causal, window, softcap, layout = case[6:]
    out, lse = reference(q, k, v, causal, window, softcap, layout=layout, dtype=dtype)
    return joined(out, lse, sinks if dtype is None else sinks.to(dtype), layout)


class Sinks(AttentionCase):
    def inputs(self, case, dtype, requires_grad=False):
        """The case's q, k and v, and a sink per query head (drawn before them)."""
        # About a row's log-sum-exp (ln S_k plus a little), so that each sink takes a real share;
        # head 1 has none.
        sinks = torch.rand(case[1], generator=self.gen, device=self.device) * 8 - 1
        sinks[1] = float("-inf")
        return (*super().inputs(case, dtype, requires_grad), sinks.requires_grad_(requires_grad))

    def call(self, q, k, v, sinks, case, **kw):
        causal, window, softcap, layout = case[6:]
        return flashrs.attention(
            q, k, v, causal=causal, layout=layout, window_size=window, softcap=softcap, sinks=sinks, **kw
        )

    def test_forward_and_lse(self):
        for dtype in (torch.float16, torch.bfloat16):
            for case in CASES:
                what = f"{case} {dtype}, FLASHRS_SEED={self.seed}"
                with self.subTest(case=case, dtype=dtype):
                    q, k, v, sinks = self.inputs(case, dtype)
                    out, lse = self.call(q, k, v, sinks, case, return_lse=True)
                    exact, exact_lse = sink_reference(q, k, v, sinks, case)
                    same, _ = sink_reference(q, k, v, sinks, case, dtype=dtype)
                    self.assert_within("out", out, same, exact, what)
                    finite = exact_lse.isfinite()
                    self.assertTrue(torch.equal(lse.isfinite(), finite), f"-inf rows: {what}")
                    err = (lse.double()[finite] - exact_lse[finite]).abs().max().item()
                    self.assertLessEqual(err, 5e-3, f"lse error {err}: {what}")
                    # The sinks change the result (not silently dropped).
                    plain = self.call(q, k, v, None, case)
                    self.assertGreater((out.float() - plain.float()).abs().max().item(), 1e-3, what)

    def test_gradients_within_twice_the_math_paths_error(self):
        for dtype in (torch.float16, torch.bfloat16):
            for case in CASES:
                what = f"{case} {dtype}, FLASHRS_SEED={self.seed}"
                with self.subTest(case=case, dtype=dtype):
                    q, k, v, sinks = self.inputs(case, dtype, requires_grad=True)
                    d_out = torch.randn(q.shape, generator=self.gen, device=self.device).to(dtype)
                    ours = grads(lambda *t: self.call(*t, case), (q, k, v, sinks), d_out)
                    same = grads(lambda *t: sink_reference(*t, case, dtype=dtype)[0], (q, k, v, sinks), d_out)
                    wide = [t.detach().double().requires_grad_() for t in (q, k, v, sinks)]
                    exact = grads(lambda *t: sink_reference(*t, case)[0], wide, d_out.double())
                    largest = max(e.abs().max().item() for e in exact[:3])
                    for name, a, m, e in zip(("dq", "dk", "dv"), ours, same, exact):
                        self.assert_within(name, a, m, e, what, largest)
                    # The sinks' gradient is a sum over every row of the head: against float64,
                    # relative to its largest entry.
                    d_sinks, exact_sinks = ours[3], exact[3]
                    self.assertEqual(d_sinks[1].item(), 0.0, f"a head without a sink: {what}")
                    err = (d_sinks.double() - exact_sinks).abs().max().item()
                    self.assertLessEqual(err, 2e-2 * exact_sinks.abs().max().item() + 1e-4, f"d_sinks {err}: {what}")

    def test_sinks_of_a_model_dtype_train(self):
        # GPT-OSS keeps its sinks in the model's dtype: their gradient comes back in it.
        case = CASES[0]
        q, k, v, sinks = self.inputs(case, torch.bfloat16)
        sinks = sinks.detach().clamp(min=-5).to(torch.bfloat16).requires_grad_()
        (self.call(q, k, v, sinks, case).float() ** 2).sum().backward()
        self.assertEqual(sinks.grad.dtype, torch.bfloat16)
        self.assertTrue(sinks.grad.isfinite().all().item())

    def test_varlen_and_paged(self):
        lens_q, lens_k = [1, 300, 17, 128], [700, 300, 0, 200]
        sums = lambda lens: [sum(lens[:i]) for i in range(len(lens) + 1)]
        cu_q, cu_k = sums(lens_q), sums(lens_k)
        sinks = torch.rand(8, generator=self.gen, device=self.device) * 8 - 1
        make = lambda *dims: torch.randn(dims, generator=self.gen, device=self.device).to(torch.float16)
        for causal in (False, True):
            q, k, v = make(cu_q[-1], 8, 128), make(cu_k[-1], 2, 128), make(cu_k[-1], 2, 128)
            out, lse = flashrs.varlen_attention(q, k, v, cu_q, cu_k, causal=causal, sinks=sinks, return_lse=True)
            for b in range(len(lens_q)):
                qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
                if lens_q[b] == 0:
                    continue
                case = (1, 8, 2, lens_q[b], lens_k[b], 128, causal, (-1, -1), 0.0, "bshd")
                args = [t[s][None] for t, s in ((q, qs), (k, ks), (v, ks))]
                if lens_k[b] == 0:
                    # No key at all: zeros, and each head's log-sum-exp is its sink.
                    self.assertEqual(out[qs].abs().max().item(), 0.0)
                    self.assertTrue(torch.allclose(lse[:, qs], sinks[:, None].expand(8, lens_q[b])))
                    continue
                exact, exact_lse = sink_reference(*args, sinks, case)
                same, _ = sink_reference(*args, sinks, case, dtype=torch.float16)
                self.assert_within(f"varlen sequence {b}", out[qs][None], same, exact, f"varlen causal={causal}")
                self.assertLessEqual((lse[:, qs].double() - exact_lse[0]).abs().max().item(), 5e-3)
        lens, s_q, block = [700, 33, 1500], 4, 64
        pages = [-(-n // block) for n in lens]
        table = torch.tensor([list(range(sum(pages[:b]), sum(pages[: b + 1]))) + [0] * (max(pages) - pages[b])
                              for b in range(len(lens))], dtype=torch.int32)
        q, kc, vc = make(len(lens), s_q, 8, 128), make(sum(pages), block, 2, 128), make(sum(pages), block, 2, 128)
        out = flashrs.paged_attention(q, kc, vc, table, torch.tensor(lens, dtype=torch.int32), causal=True, sinks=sinks)
        for b, n in enumerate(lens):
            rows = table[b, : pages[b]].tolist()
            kb, vb = (t[rows].reshape(-1, 2, 128)[:n][None] for t in (kc, vc))
            case = (1, 8, 2, s_q, n, 128, True, (-1, -1), 0.0, "bshd")
            exact, _ = sink_reference(q[b : b + 1], kb, vb, sinks, case)
            same, _ = sink_reference(q[b : b + 1], kb, vb, sinks, case, dtype=torch.float16)
            self.assert_within(f"paged sequence {b}", out[b : b + 1], same, exact, "paged")

    def test_graph_replay_is_eager(self):
        case = (2, 8, 2, 512, 640, 128, True, (100, 0), 0.0, None)
        q, k, v, sinks = self.inputs(case, torch.bfloat16)
        call = lambda: self.call(q, k, v, sinks, case, return_lse=True)
        eager, eager_lse = call()
        graph, (out, lse) = captured(call)
        graph.replay()
        torch.cuda.synchronize()
        self.assertTrue(torch.equal(out, eager) and torch.equal(lse, eager_lse), "replay differs from eager")
        # A replay reads the sinks' current values.
        sinks.add_(1.0)
        graph.replay()
        torch.cuda.synchronize()
        self.assertTrue(torch.equal(out, call()[0]), "replay after new sinks differs from eager")

    def test_compiled_training_step_matches_eager(self):
        case = (2, 8, 2, 256, 384, 128, True, (64, 0), 0.0, "bshd")
        q, k, v, sinks = self.inputs(case, torch.bfloat16, requires_grad=True)
        sinks = sinks.detach().clamp(min=-5).requires_grad_()

        def step(q, k, v, sinks):
            out = self.call(q * 0.5, k, v, sinks, case)
            return (out.float() ** 2).sum()

        one = torch.tensor(1.0, device=self.device)
        eager = grads(step, (q, k, v, sinks), one)
        compiled = grads(torch.compile(step, fullgraph=True), (q, k, v, sinks), one)
        for name, a, b in zip(("dq", "dk", "dv", "d_sinks"), eager, compiled):
            err = (a.float() - b.float()).abs().max().item()
            self.assertLessEqual(err, 1e-2 * a.float().abs().max().item() + 1e-6, f"{name}: {err}")

    def test_opcheck(self):
        case = (1, 4, 2, 128, 200, 64, True, (-1, -1), 0.0, None)
        q, k, v, sinks = self.inputs(case, torch.float16, requires_grad=True)
        sinks = sinks.detach().clamp(min=-5).requires_grad_()
        args = (q, k, v, True, None, True, "bhsd", False, -1, -1, 0.0, sinks)
        torch.library.opcheck(
            torch.ops.flashrs.attention.default, args,
            test_utils=("test_schema", "test_autograd_registration", "test_faketensor"),
        )
        schema = str(torch.ops.flashrs.attention.default._schema)
        self.assertIn("Tensor? sinks=None", schema)

    def test_bad_sinks_are_refused(self):
        case = CASES[0]
        q, k, v, sinks = self.inputs(case, torch.float16)
        for bad, words in [
            (sinks[:4], r"\[H\] = \[8\]"),
            (sinks.view(2, 4), "1-dim"),
            (torch.zeros(8, dtype=torch.int32, device=self.device), "floating"),
            (sinks.cpu(), "one device"),
            ([0.0] * 8, "torch.Tensor"),
        ]:
            with self.subTest(words=words), self.assertRaisesRegex(ValueError, words):
                self.call(q, k, v, bad, case)
        # An unaligned view is copied, not refused.
        wide = torch.zeros(9, device=self.device)
        wide[1:] = sinks
        self.assertTrue(torch.equal(self.call(q, k, v, wide[1:], case), self.call(q, k, v, sinks, case)))


if __name__ == "__main__":
    unittest.main()
