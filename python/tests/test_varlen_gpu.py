"""flashrs.varlen_attention, flashrs.paged_attention and calls with nothing to compute, on a GPU:
packed batches and paged caches against float64 attention per sequence, CUDA-graph capture and replay (bit-identical to eager, right
again after the inputs' contents change), torch.compile(fullgraph=True), opcheck, and the
empty and key-less dense calls as SDPA answers them. Skipped without torch or a CUDA device."""

import unittest

from gpu_support import HAVE_CUDA, GpuCase, captured, torch

import flashrs

# (lengths_q, lengths_k, H, H_kv, D, causal, dtype): decode-like, prefill-like with a sequence
# without keys, grouped heads, head dim 64 and 128.
CASES = [
    ([1, 1, 1, 1], [700, 33, 1500, 260], 32, 8, 128, False, "bfloat16"),
    ([300, 17, 128, 1], [300, 0, 200, 64], 16, 16, 128, True, "float16"),
    ([64, 250, 90], [64, 250, 90], 8, 2, 64, True, "bfloat16"),
    ([5, 400], [1000, 400], 4, 1, 64, False, "float16"),
]


def prefix(lengths):
    sums = [0]
    for n in lengths:
        sums.append(sums[-1] + n)
    return sums


def reference(q, k, v, cu_q, cu_k, causal):
    """float64 attention per sequence (bottom-right causal; zeros for a query that sees no key)."""
    out = torch.zeros(q.shape, dtype=torch.float64, device=q.device)
    lse = torch.full((q.shape[1], q.shape[0]), float("-inf"), dtype=torch.float64, device=q.device)
    group = q.shape[1] // k.shape[1]
    for b in range(len(cu_q) - 1):
        qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        s_q, s_k = qs.stop - qs.start, ks.stop - ks.start
        if s_q == 0 or s_k == 0:
            continue
        qb = q[qs].double().transpose(0, 1)
        kb = k[ks].double().transpose(0, 1).repeat_interleave(group, 0)
        vb = v[ks].double().transpose(0, 1).repeat_interleave(group, 0)
        scores = qb @ kb.transpose(1, 2) / q.shape[-1] ** 0.5
        if causal:
            i = torch.arange(s_q, device=q.device)[:, None]
            j = torch.arange(s_k, device=q.device)[None, :]
            scores = scores.masked_fill(j > i + s_k - s_q, float("-inf"))
        row_lse = torch.logsumexp(scores, -1)
        p = torch.exp(scores - row_lse[..., None]).nan_to_num(0.0)
        out[qs] = (p @ vb).transpose(0, 1)
        lse[:, qs] = row_lse
    return out, lse


class Varlen(GpuCase):
    def packed(self, rows, heads, d, dtype):
        t = torch.rand((rows, heads, d), generator=self.gen, device=self.device) * 4 - 2
        return t.to(getattr(torch, dtype))

    def inputs(self, case):
        lens_q, lens_k, h, h_kv, d, causal, dtype = case
        q = self.packed(sum(lens_q), h, d, dtype)
        k = self.packed(sum(lens_k), h_kv, d, dtype)
        v = self.packed(sum(lens_k), h_kv, d, dtype)
        return q, k, v, prefix(lens_q), prefix(lens_k), causal

    def test_matches_float64_per_sequence(self):
        for case in CASES:
            with self.subTest(case=case, seed=self.seed):
                q, k, v, cu_q, cu_k, causal = self.inputs(case)
                out, lse = flashrs.varlen_attention(q, k, v, cu_q, cu_k, causal=causal, return_lse=True)
                want, want_lse = reference(q, k, v, cu_q, cu_k, causal)
                self.assertFalse(out.isnan().any().item())
                err = (out.double() - want).abs().max().item()
                self.assertLessEqual(err, 6e-2, f"max abs error {err}")
                seen = want_lse.isfinite()
                self.assertTrue(torch.equal(lse.isfinite(), seen), "rows without keys need -inf")
                lse_err = (lse.double()[seen] - want_lse[seen]).abs().max().item()
                self.assertLessEqual(lse_err, 1e-2, f"lse error {lse_err}")
                # CPU tensors and CUDA tensors as prefix sums give the same bits.
                again = flashrs.varlen_attention(
                    q, k, v, torch.tensor(cu_q, dtype=torch.int32), torch.tensor(cu_k, device=self.device),
                    causal=causal,
                )
                self.assertTrue(torch.equal(again, out))

    def test_graph_replay_is_eager_and_follows_new_contents(self):
        for case in CASES:
            with self.subTest(case=case, seed=self.seed):
                q, k, v, cu_q, cu_k, causal = self.inputs(case)
                call = lambda: flashrs.varlen_attention(q, k, v, cu_q, cu_k, causal=causal, return_lse=True)
                eager, eager_lse = call()
                graph, (out, lse) = captured(call)
                graph.replay()
                torch.cuda.synchronize()
                self.assertTrue(torch.equal(out, eager) and torch.equal(lse, eager_lse), "replay differs")
                for t, new in zip((q, k, v), self.inputs(case)):
                    t.copy_(new)
                for _ in range(5):
                    graph.replay()
                fresh, fresh_lse = call()
                torch.cuda.synchronize()
                self.assertTrue(torch.equal(out, fresh) and torch.equal(lse, fresh_lse), "replay on new contents")

    def test_prefix_sums_on_the_gpu_are_refused_under_capture(self):
        q, k, v, cu_q, cu_k, causal = self.inputs(CASES[2])
        flashrs.varlen_attention(q, k, v, cu_q, cu_k)
        on_gpu = torch.tensor(cu_q, dtype=torch.int32, device=self.device)
        graph = torch.cuda.CUDAGraph()
        with self.assertRaisesRegex(ValueError, "captured"):
            with torch.cuda.graph(graph):
                flashrs.varlen_attention(q, k, v, on_gpu, cu_k)

    def test_compile_fullgraph_and_opcheck(self):
        q, k, v, cu_q, cu_k, causal = self.inputs(CASES[2])
        sums = [torch.tensor(s, dtype=torch.int32) for s in (cu_q, cu_k)]

        def f(q, k, v, cu_q, cu_k):
            return flashrs.varlen_attention(q * 0.5, k, v, cu_q, cu_k, causal=True) * 2

        compiled = torch.compile(f, fullgraph=True)
        self.assertTrue(torch.equal(compiled(q, k, v, *sums), f(q, k, v, *sums)))
        for return_lse in (False, True):
            torch.library.opcheck(
                torch.ops.flashrs.varlen_attention.default, (q, k, v, *sums, True, None, return_lse)
            )

    def test_gradients_are_refused_until_there_is_a_backward(self):
        q, k, v, cu_q, cu_k, _ = self.inputs(CASES[2])
        with self.assertRaisesRegex(ValueError, "no backward"):
            flashrs.varlen_attention(q.requires_grad_(), k, v, cu_q, cu_k)
        with torch.no_grad():
            flashrs.varlen_attention(q, k, v, cu_q, cu_k)

    def test_empty_batches_and_empty_dense_calls(self):
        q, k, v, _, _, _ = self.inputs(([0], [5], 4, 2, 64, False, "float16"))
        out, lse = flashrs.varlen_attention(q, k, v, [0, 0], [0, 5], return_lse=True)
        self.assertEqual((tuple(out.shape), tuple(lse.shape)), ((0, 4, 64), (4, 0)))
        half = dict(device=self.device, dtype=torch.float16)
        for layout, q_dims, kv_dims in [
            ("bhsd", (2, 4, 0, 64), (2, 2, 9, 64)),
            ("bshd", (2, 0, 4, 64), (2, 9, 2, 64)),
            ("bhsd", (0, 4, 5, 64), (0, 2, 9, 64)),
        ]:
            with self.subTest(layout=layout, q=q_dims):
                q, k = torch.randn(q_dims, **half), torch.randn(kv_dims, **half)
                out, lse = flashrs.attention(q, k, k, layout=layout, return_lse=True)
                self.assertEqual((out.shape, out.numel(), lse.numel()), (q.shape, 0, 0))
        # No key: zeros and -inf, every other check made all the same.
        q, k = torch.randn(2, 4, 7, 64, **half), torch.randn(2, 2, 0, 64, **half)
        out, lse = flashrs.attention(q, k, k, return_lse=True)
        self.assertTrue(torch.equal(out, torch.zeros_like(q)))
        self.assertTrue(bool((lse == float("-inf")).all()) and tuple(lse.shape) == (2, 4, 7))
        with self.assertRaisesRegex(ValueError, "divide"):
            flashrs.attention(q, torch.randn(2, 3, 0, 64, **half), torch.randn(2, 3, 0, 64, **half))


# (seqlens_k, S_q, H, H_kv, D, block_size, causal, dtype): decode steps and a few new tokens.
PAGED_CASES = [
    ([700, 33, 1500, 0], 1, 32, 8, 128, 64, False, "bfloat16"),
    ([300, 17, 128], 4, 16, 2, 64, 16, True, "float16"),
    ([4096, 2000], 1, 8, 1, 128, 256, False, "float16"),
]


class Paged(GpuCase):
    def inputs(self, case):
        """q [B, S_q, H, D], the caches with pages dealt at random (spare pages in between), the
        block table and lengths."""
        lens, s_q, h, h_kv, d, block_size, causal, dtype = case
        pages = [max(1, -(-n // block_size)) for n in lens]
        num_blocks = sum(pages) + 3
        order = list(range(num_blocks))
        self.rng.shuffle(order)
        max_blocks = max(pages)
        table = [[order.pop() for _ in range(p)] + [0] * (max_blocks - p) for p in pages]
        rand = lambda *dims: (torch.rand(dims, generator=self.gen, device=self.device) * 4 - 2).to(getattr(torch, dtype))
        q = rand(len(lens), s_q, h, d)
        k, v = rand(num_blocks, block_size, h_kv, d), rand(num_blocks, block_size, h_kv, d)
        return q, k, v, torch.tensor(table, dtype=torch.int32), torch.tensor(lens, dtype=torch.int32), causal

    def reference(self, q, k, v, table, lens, causal):
        """float64 attention per sequence on its keys gathered through the table."""
        out = torch.zeros(q.shape, dtype=torch.float64, device=q.device)
        block_size, group = k.shape[1], q.shape[2] // k.shape[2]
        for b, n in enumerate(lens.tolist()):
            if n == 0:
                continue
            slots = [table[b, j // block_size].item() * block_size + j % block_size for j in range(n)]
            index = torch.tensor(slots, device=q.device)
            kb = k.reshape(-1, *k.shape[2:]).index_select(0, index).double().transpose(0, 1).repeat_interleave(group, 0)
            vb = v.reshape(-1, *v.shape[2:]).index_select(0, index).double().transpose(0, 1).repeat_interleave(group, 0)
            qb = q[b].double().transpose(0, 1)
            scores = qb @ kb.transpose(1, 2) / q.shape[-1] ** 0.5
            if causal:
                i = torch.arange(q.shape[1], device=q.device)[:, None]
                j = torch.arange(n, device=q.device)[None, :]
                scores = scores.masked_fill(j > i + n - q.shape[1], float("-inf"))
            p = torch.softmax(scores, -1).nan_to_num(0.0)
            out[b] = (p @ vb).transpose(0, 1)
        return out

    def test_matches_float64_and_replays_under_a_graph(self):
        for case in PAGED_CASES:
            with self.subTest(case=case, seed=self.seed):
                q, k, v, table, lens, causal = self.inputs(case)
                call = lambda: flashrs.paged_attention(q, k, v, table, lens, causal=causal, return_lse=True)
                eager, eager_lse = call()
                err = (eager.double() - self.reference(q, k, v, table, lens, causal)).abs().max().item()
                self.assertFalse(eager.isnan().any().item())
                self.assertLessEqual(err, 6e-2, f"max abs error {err}")
                graph, (out, lse) = captured(call)
                graph.replay()
                torch.cuda.synchronize()
                self.assertTrue(torch.equal(out, eager) and torch.equal(lse, eager_lse), "replay differs")
                for t, new in zip((q, k, v), self.inputs(case)):
                    t.copy_(new)
                graph.replay()
                fresh = call()[0]
                torch.cuda.synchronize()
                self.assertTrue(torch.equal(out, fresh), "replay on new contents")

    def test_compile_fullgraph_and_opcheck(self):
        q, k, v, table, lens, causal = self.inputs(PAGED_CASES[1])

        def f(q, k, v, table, lens):
            return flashrs.paged_attention(q * 0.5, k, v, table, lens, causal=True) * 2

        self.assertTrue(torch.equal(torch.compile(f, fullgraph=True)(q, k, v, table, lens), f(q, k, v, table, lens)))
        torch.library.opcheck(torch.ops.flashrs.paged_attention.default, (q, k, v, table, lens, True, None, True, "bshd"))

    def test_bad_tables_are_value_errors(self):
        q, k, v, table, lens, _ = self.inputs(PAGED_CASES[1])
        bad = table.clone()
        bad[0, 0] = k.shape[0]  # a page outside the cache
        for what, args in [
            ("outside the cache", (q, k, v, bad, lens)),
            ("outside 0..=", (q, k, v, table, lens + 10_000)),
            ("sequence", (q, k, v, table, lens[:2])),
        ]:
            with self.subTest(what=what):
                with self.assertRaisesRegex(ValueError, what):
                    flashrs.paged_attention(*args)


if __name__ == "__main__":
    unittest.main()
