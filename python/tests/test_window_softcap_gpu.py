"""flashrs' sliding window (``window_size``) and logit softcap (``softcap``), on a GPU: forward,
log-sum-exp and gradients against a float64 reference that applies them explicitly (the keys
each query sees masked by index, bottom-right aligned; each scaled score ``x`` capped as
``softcap * tanh(x / softcap)``), fp16 and bf16, head dims 64 and 128, causal and not,
S_q != S_k both ways, grouped-query heads, rows that see no key. FlashAttention's criterion: the
error to float64 at most twice that of the same reference computed in the inputs' dtype (torch's
math path, as test_backward_gpu.py's), plus a floor. Then the varlen and paged calls with them,
torch.compile(fullgraph=True) of a training step, opcheck of the ops with the new arguments, a
CUDA-graph capture, and deterministic gradients. Skipped without torch or a CUDA device."""

import unittest

from gpu_support import HAVE_CUDA, AttentionCase, captured, torch

import flashrs

# (B, H, H_kv, S_q, S_k, D, causal, window_size, softcap, layout)
CASES = [
    (2, 8, 2, 300, 457, 64, True, (64, 0), 0.0, None),  # a causal window (Mistral's)
    (1, 8, 8, 512, 512, 128, False, (100, 50), 2.0, "bshd"),  # both sides and a softcap that bites
    (1, 8, 2, 257, 190, 128, True, (-1, -1), 1.5, None),  # softcap alone, S_q > S_k: rows without keys
    (2, 4, 1, 200, 333, 64, False, (32, -1), 10.0, None),  # a left side only (MQA)
    (1, 4, 2, 333, 200, 128, False, (-1, 17), 0.0, "bshd"),  # a right side only: the first 116 rows see no key
    (1, 4, 4, 300, 100, 64, True, (8, 0), 5.0, None),  # a narrow causal window, S_q > S_k
    (1, 4, 2, 128, 160, 64, False, (0, 0), 0.0, None),  # the diagonal key alone
    (2, 8, 2, 1, 1000, 128, False, (255, 0), 3.0, None),  # decode (split keys) with both
]


def visible(s_q, s_k, causal, window_size, device):
    """[S_q, S_k] bool: key j seen from query i, whose diagonal is d = i + S_k - S_q, when
    d - left <= j <= d + right (-1: no bound) and, causal, j <= d."""
    left, right = window_size
    i = torch.arange(s_q, device=device)[:, None]
    j = torch.arange(s_k, device=device)[None, :]
    d = i + s_k - s_q
    seen = torch.ones(s_q, s_k, dtype=torch.bool, device=device)
    if causal:
        seen &= j <= d
    if left >= 0:
        seen &= j >= d - left
    if right >= 0:
        seen &= j <= d + right
    return seen


def reference(q, k, v, causal, window_size, softcap, scale=None, layout=None, dtype=None):
    """Output (in the caller's dim order) and log-sum-exp (``[B, H, S_q]``) of attention with the
    window and softcap applied explicitly, computed in ``dtype`` (float64, or the inputs' own for
    the math path's error); differentiable. A row that sees no key is zeros with a -inf
    log-sum-exp."""
    if layout == "bshd":
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    q, k, v = (t.to(dtype or torch.float64) for t in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = (t.repeat_interleave(group, dim=1) for t in (k, v))
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = (q @ k.transpose(-1, -2)) * scale
    if softcap:
        scores = softcap * torch.tanh(scores / softcap)
    seen = visible(q.shape[2], k.shape[2], causal, window_size, q.device)
    any_key = seen.any(dim=-1)[:, None]
    # Rows without keys: zeros of their own (no -inf row, whose softmax and gradient are NaN).
    scores = torch.where(any_key, scores.masked_fill(~seen, float("-inf")), torch.zeros_like(scores))
    p = torch.softmax(scores, dim=-1) * any_key
    out = p @ v
    lse = torch.where(any_key[:, 0], scores.logsumexp(dim=-1), torch.full_like(scores[..., 0], float("-inf")))
    if layout == "bshd":
        out = out.transpose(1, 2)
    return out, lse


def grads(f, inputs, d_out):
    for t in inputs:
        t.grad = None
    f(*inputs).backward(d_out)
    return [t.grad.clone() for t in inputs]


class WindowAndSoftcap(AttentionCase):
    def test_forward_and_lse(self):
        for dtype in (torch.float16, torch.bfloat16):
            for case in CASES:
                causal, window, softcap, layout = case[6:]
                what = f"{case} {dtype}, FLASHRS_SEED={self.seed}"
                with self.subTest(case=case, dtype=dtype):
                    q, k, v = self.inputs(case, dtype)
                    out, lse = flashrs.attention(
                        q, k, v, causal=causal, layout=layout, window_size=window, softcap=softcap, return_lse=True
                    )
                    exact, exact_lse = reference(q, k, v, causal, window, softcap, layout=layout)
                    same, _ = reference(q, k, v, causal, window, softcap, layout=layout, dtype=dtype)
                    self.assert_within("out", out, same, exact, what)
                    seen = exact_lse.isfinite()
                    self.assertTrue(torch.equal(lse.isfinite(), seen), f"-inf rows: {what}")
                    if seen.any():
                        lse_err = (lse.double()[seen] - exact_lse[seen]).abs().max().item()
                        self.assertLessEqual(lse_err, 5e-3, f"lse error {lse_err}: {what}")
                    if not seen.all():
                        rows = out.transpose(1, 2) if layout == "bshd" else out
                        self.assertEqual(rows[~seen].abs().max().item(), 0.0, f"rows without keys: {what}")

    def test_the_window_and_softcap_change_the_result(self):
        # Neither is silently dropped: each changes the output of a call it affects.
        case = CASES[1]
        q, k, v = self.inputs(case, torch.float16)
        plain = flashrs.attention(q, k, v, layout="bshd")
        for kw in ({"window_size": (100, 50)}, {"softcap": 2.0}):
            with self.subTest(**kw):
                self.assertGreater((flashrs.attention(q, k, v, layout="bshd", **kw) - plain).abs().max().item(), 1e-2)
        # The defaults are no window and no softcap, bit for bit; a window that cuts nothing is
        # the same attention.
        same = flashrs.attention(q, k, v, layout="bshd", window_size=(-1, -1), softcap=0.0)
        self.assertTrue(torch.equal(same, plain))
        wide = flashrs.attention(q, k, v, layout="bshd", window_size=(512, 512))
        self.assertLessEqual((wide - plain).abs().max().item(), 1e-3)

    def test_gradients_within_twice_the_math_paths_error(self):
        for dtype in (torch.float16, torch.bfloat16):
            for case in CASES:
                causal, window, softcap, layout = case[6:]
                what = f"{case} {dtype}, FLASHRS_SEED={self.seed}"
                with self.subTest(case=case, dtype=dtype):
                    q, k, v = self.inputs(case, dtype, requires_grad=True)
                    d_out = torch.randn(q.shape, generator=self.gen, device=self.device).to(dtype)
                    ours = grads(
                        lambda *t: flashrs.attention(*t, causal=causal, layout=layout, window_size=window, softcap=softcap),
                        (q, k, v), d_out,
                    )
                    same = grads(lambda *t: reference(*t, causal, window, softcap, layout=layout, dtype=dtype)[0],
                                 (q, k, v), d_out)
                    wide = [t.detach().double().requires_grad_() for t in (q, k, v)]
                    exact = grads(lambda *t: reference(*t, causal, window, softcap, layout=layout)[0], wide, d_out.double())
                    largest = max(e.abs().max().item() for e in exact)
                    for name, a, m, e in zip(("dq", "dk", "dv"), ours, same, exact):
                        self.assert_within(name, a, m, e, what, largest)

    def test_deterministic_gradients_are_bit_identical(self):
        case = (1, 8, 2, 700, 900, 128, True, (128, 0), 5.0, "bshd")
        q, k, v = self.inputs(case, torch.bfloat16, requires_grad=True)
        d_out = torch.randn(q.shape, generator=self.gen, device=self.device).to(q.dtype)
        f = lambda *t: flashrs.attention(*t, causal=True, layout="bshd", window_size=(128, 0), softcap=5.0, deterministic=True)
        first = grads(f, (q, k, v), d_out)
        for _ in range(10):
            for name, a, b in zip(("dq", "dk", "dv"), first, grads(f, (q, k, v), d_out)):
                self.assertTrue(torch.equal(a, b), f"{name} differs between deterministic runs")

    def test_compiled_training_step_matches_eager(self):
        case = (2, 8, 2, 256, 384, 128, True, (64, 0), 4.0, "bshd")
        q, k, v = self.inputs(case, torch.bfloat16, requires_grad=True)

        def step(q, k, v):
            out = flashrs.attention(q * 0.5, k, v, causal=True, layout="bshd", window_size=(64, 0), softcap=4.0)
            return (out.float() ** 2).sum()

        one = torch.tensor(1.0, device=self.device)
        eager = grads(step, (q, k, v), one)
        compiled = grads(torch.compile(step, fullgraph=True), (q, k, v), one)
        for name, a, b in zip(("dq", "dk", "dv"), eager, compiled):
            err = (a.float() - b.float()).abs().max().item()
            self.assertLessEqual(err, 1e-2 * a.float().abs().max().item(), f"{name}: {err}")
        # A compiled forward is the eager one bit for bit (elementwise work exact in bf16).
        f = lambda q, k, v: flashrs.attention(q, k, v, layout="bshd", window_size=(30, 7), softcap=2.5) * 2
        with torch.no_grad():
            self.assertTrue(torch.equal(torch.compile(f, fullgraph=True)(q, k, v), f(q, k, v)))

    def test_opcheck(self):
        q, k, v = self.inputs((1, 4, 2, 128, 200, 64, True, None, None, None), torch.float16, requires_grad=True)
        for options in [(True, None, True, "bhsd", False, 32, 0, 5.0), (False, 0.3, False, "bhsd", True, 16, 40, 0.0)]:
            with self.subTest(options=options):
                torch.library.opcheck(torch.ops.flashrs.attention.default, (q.detach(), k.detach(), v.detach(), *options))
        torch.library.opcheck(
            torch.ops.flashrs.attention.default, (q, k, v, True, None, True, "bhsd", False, 32, 0, 5.0),
            test_utils=("test_schema", "test_autograd_registration", "test_faketensor"),
        )
        out, lse = flashrs.attention(q, k, v, causal=True, return_lse=True, window_size=(32, 0), softcap=5.0)
        d_out = torch.randn(out.shape, generator=self.gen, device=self.device).to(out.dtype)
        args = (d_out, q.detach(), k.detach(), v.detach(), out.detach(), lse.detach(), True, None, "bhsd", False, 32, 0, 5.0)
        torch.library.opcheck(torch.ops.flashrs.attention_backward.default, args)
        # The ops' schemas name the new arguments, with FlashAttention's defaults.
        schema = str(torch.ops.flashrs.attention.default._schema)
        # torch may show the ints as SymInt.
        self.assertRegex(schema, r"(Sym)?[Ii]nt window_left=-1, (Sym)?[Ii]nt window_right=-1, float softcap=0")

    def test_the_ops_refuse_bad_values(self):
        q, k, v = self.inputs((1, 4, 2, 64, 64, 64, False, None, None, None), torch.float16)
        for tail, words in [((-2, 0, 0.0), "window_size"), ((-1, -1, -1.0), "softcap"), ((-1, -1, float("nan")), "softcap")]:
            with self.subTest(tail=tail), self.assertRaisesRegex(ValueError, words):
                torch.ops.flashrs.attention(q, k, v, False, None, False, "bhsd", False, *tail)
        with self.assertRaisesRegex(ValueError, "window_size"):
            flashrs.attention(q, k, v, window_size=(-3, 0))

    def test_graph_replay_is_eager(self):
        q, k, v = self.inputs((2, 8, 2, 512, 640, 128, True, None, None, None), torch.bfloat16)
        call = lambda: flashrs.attention(q, k, v, causal=True, window_size=(100, 0), softcap=3.0, return_lse=True)
        eager, eager_lse = call()
        graph, (out, lse) = captured(call)
        graph.replay()
        torch.cuda.synchronize()
        self.assertTrue(torch.equal(out, eager) and torch.equal(lse, eager_lse), "replay differs from eager")

    def test_varlen(self):
        lens_q, lens_k = [1, 300, 17, 128], [700, 300, 0, 200]
        sums = lambda lens: [sum(lens[:i]) for i in range(len(lens) + 1)]
        cu_q, cu_k = sums(lens_q), sums(lens_k)
        for dtype, causal, window, softcap in [
            (torch.float16, True, (64, 0), 0.0),
            (torch.bfloat16, False, (50, 20), 3.0),
            (torch.float16, False, (-1, -1), 2.0),
        ]:
            with self.subTest(dtype=dtype, causal=causal, window=window, softcap=softcap):
                make = lambda rows, heads: torch.randn(rows, heads, 128, generator=self.gen, device=self.device).to(dtype)
                q, k, v = make(cu_q[-1], 8), make(cu_k[-1], 2), make(cu_k[-1], 2)
                out, lse = flashrs.varlen_attention(
                    q, k, v, cu_q, cu_k, causal=causal, window_size=window, softcap=softcap, return_lse=True
                )
                for b in range(len(lens_q)):
                    if lens_q[b] == 0 or lens_k[b] == 0:
                        continue
                    qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
                    # One sequence as a dense [1, S, H, D] call.
                    args = [t[s][None] for t, s in ((q, qs), (k, ks), (v, ks))]
                    exact, exact_lse = reference(*args, causal, window, softcap, layout="bshd")
                    same, _ = reference(*args, causal, window, softcap, layout="bshd", dtype=dtype)
                    self.assert_within(f"out of sequence {b}", out[qs][None], same, exact, f"varlen {dtype}")
                    seen = exact_lse[0].isfinite()
                    self.assertTrue(torch.equal(lse[:, qs].isfinite(), seen))
                    if seen.any():
                        self.assertLessEqual((lse[:, qs].double()[seen] - exact_lse[0][seen]).abs().max().item(), 5e-3)

    def test_paged(self):
        lens, s_q, block = [700, 33, 1500], 4, 64
        pages = [-(-n // block) for n in lens]
        table = torch.tensor([list(range(sum(pages[:b]), sum(pages[: b + 1]))) + [0] * (max(pages) - pages[b])
                              for b in range(len(lens))], dtype=torch.int32)
        for dtype, causal, window, softcap in [(torch.bfloat16, True, (100, 0), 0.0), (torch.float16, False, (40, 2), 2.5)]:
            with self.subTest(dtype=dtype, causal=causal, window=window, softcap=softcap):
                make = lambda *dims: torch.randn(dims, generator=self.gen, device=self.device).to(dtype)
                q, k, v = make(len(lens), s_q, 8, 128), make(sum(pages), block, 2, 128), make(sum(pages), block, 2, 128)
                out = flashrs.paged_attention(
                    q, k, v, table, torch.tensor(lens, dtype=torch.int32), causal=causal, window_size=window,
                    softcap=softcap,
                )
                for b, n in enumerate(lens):
                    rows = table[b, : pages[b]].tolist()
                    kb, vb = (t[rows].reshape(-1, 2, 128)[:n][None] for t in (k, v))
                    exact, _ = reference(q[b : b + 1], kb, vb, causal, window, softcap, layout="bshd")
                    same, _ = reference(q[b : b + 1], kb, vb, causal, window, softcap, layout="bshd", dtype=dtype)
                    self.assert_within(f"out of sequence {b}", out[b : b + 1], same, exact, f"paged {dtype}")


if __name__ == "__main__":
    unittest.main()
