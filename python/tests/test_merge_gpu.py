"""flashrs.merge_states on a GPU: attention over two chunks of the keys, merged, equals attention
over all of them (against float64, and the log-sum-exp against the whole call's); in place; rows
that saw no key on either side; CUDA-graph replay; torch.compile and opcheck. Skipped without
torch or a CUDA device."""

import unittest

from gpu_support import HAVE_CUDA, GpuCase, captured, torch

import flashrs

# (B, H, H_kv, S_q, S_k, D, layout, dtype, where the keys are cut)
CASES = [
    (2, 8, 2, 300, 1000, 128, "bhsd", "bfloat16", 333),
    (1, 32, 8, 1, 8192, 128, "bshd", "float16", 4096),
    (3, 4, 4, 77, 130, 64, "bshd", "bfloat16", 1),
]


class Merge(GpuCase):
    def chunks(self, case):
        b, h, h_kv, s_q, s_k, d, layout, dtype, cut = case
        dims = lambda heads, s: (b, s, heads, d) if layout == "bshd" else (b, heads, s, d)
        rand = lambda *dims: (torch.rand(dims, generator=self.gen, device=self.device) * 4 - 2).to(getattr(torch, dtype))
        q, k, v = rand(*dims(h, s_q)), rand(*dims(h_kv, s_k)), rand(*dims(h_kv, s_k))
        axis = 1 if layout == "bshd" else 2
        first, second = (t.narrow(axis, 0, cut) for t in (k, v)), (t.narrow(axis, cut, s_k - cut) for t in (k, v))
        return q, k, v, tuple(first), tuple(second), layout

    def test_chunks_merged_equal_the_whole(self):
        for case in CASES:
            with self.subTest(case=case, seed=self.seed):
                q, k, v, (k1, v1), (k2, v2), layout = self.chunks(case)
                oa, la = flashrs.attention(q, k1, v1, return_lse=True, layout=layout)
                ob, lb = flashrs.attention(q, k2, v2, return_lse=True, layout=layout)
                out, lse = flashrs.merge_states(oa, la, ob, lb, layout=layout)
                whole, whole_lse = flashrs.attention(q, k, v, return_lse=True, layout=layout)
                ref = self.reference(q, k, v, layout)
                err = (out.double() - ref).abs().max().item()
                whole_err = (whole.double() - ref).abs().max().item()
                self.assertLessEqual(err, 2 * whole_err + 1e-2, f"merged {err}, whole call {whole_err}")
                self.assertLessEqual((lse - whole_lse).abs().max().item(), 1e-3)
                # In place, into the first pair.
                flashrs._flashrs.merge_states(
                    *(flashrs._describe(n, t) for n, t in (("out_a", oa), ("lse_a", la), ("out_b", ob), ("lse_b", lb), ("out", oa), ("lse", la))),
                    layout, torch.cuda.current_stream().cuda_stream,
                )
                self.assertTrue(torch.equal(oa, out) and torch.equal(la, lse), "in place differs")

    def reference(self, q, k, v, layout):
        if layout == "bshd":
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        out = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), enable_gqa=True)
        return out.transpose(1, 2) if layout == "bshd" else out

    def test_rows_without_keys_and_graphs_compile_opcheck(self):
        q, k, v, (k1, v1), (k2, v2), layout = self.chunks(CASES[0])
        oa, la = flashrs.attention(q, k1, v1, return_lse=True, layout=layout)
        ob, lb = flashrs.attention(q, k2, v2, return_lse=True, layout=layout)
        la[:, :, 0], lb[:, :, 0] = float("-inf"), float("-inf")
        la[:, :, 1] = float("-inf")  # only the second side saw keys
        out, lse = flashrs.merge_states(oa, la, ob, lb)
        self.assertTrue(bool((out[:, :, 0] == 0).all()) and bool((lse[:, :, 0] == float("-inf")).all()))
        self.assertTrue(torch.equal(out[:, :, 1], ob[:, :, 1]) and torch.equal(lse[:, :, 1], lb[:, :, 1]))
        eager = flashrs.merge_states(oa, la, ob, lb)
        graph, (g_out, g_lse) = captured(lambda: flashrs.merge_states(oa, la, ob, lb))
        graph.replay()
        torch.cuda.synchronize()
        self.assertTrue(torch.equal(g_out, eager[0]) and torch.equal(g_lse, eager[1]))
        compiled = torch.compile(lambda *t: flashrs.merge_states(*t), fullgraph=True)
        got = compiled(oa, la, ob, lb)
        self.assertTrue(torch.equal(got[0], eager[0]) and torch.equal(got[1], eager[1]))
        torch.library.opcheck(torch.ops.flashrs.merge_states.default, (oa, la, ob, lb, "bhsd"))

    def test_mismatches_are_value_errors(self):
        q, k, v, (k1, v1), (k2, v2), layout = self.chunks(CASES[0])
        oa, la = flashrs.attention(q, k1, v1, return_lse=True, layout=layout)
        with self.assertRaisesRegex(ValueError, "lse"):
            flashrs.merge_states(oa, la[:, :, :-1], oa, la)
        with self.assertRaisesRegex(ValueError, "one shape"):
            flashrs.merge_states(oa, la, oa[:, :, :-1], la[:, :, :-1])


if __name__ == "__main__":
    unittest.main()
