"""flashrs.attention against torch's scaled_dot_product_attention in float64, on a GPU: random
shapes, fp16 and bf16, grouped-query, causal (bottom-right aligned, so the mask is built here),
both dim orders and both memory layouts, the log-sum-exp against a float64 logsumexp, and the
stream semantics. Skipped without torch or a CUDA device (scripts/python_gpu.sh runs it there).
Set FLASHRS_SEED to replay a failure; FLASHRS_CASES sets how many random problems (default 60)."""

import os
import random
import unittest

try:
    import torch
    import torch.nn.functional as F

    HAVE_CUDA = torch.cuda.is_available()
except ImportError:  # the CPU CI
    HAVE_CUDA = False

import flashrs

# The library's own tolerances (lab/src/reference.rs) for inputs in [-2, 2).
TOLERANCE = {"float16": (1e-2, 5e-3), "bfloat16": (6e-2, 3e-2)}


def visible(s_q, s_k, causal, device):
    """[S_q, S_k] bool, True where query i sees key j: j <= i + S_k - S_q when causal."""
    if not causal:
        return torch.ones(s_q, s_k, dtype=torch.bool, device=device)
    i = torch.arange(s_q, device=device)[:, None]
    j = torch.arange(s_k, device=device)[None, :]
    return j <= i + (s_k - s_q)


def reference(q, k, v, causal, scale):
    """Output and log-sum-exp in float64 from [B, H, S, D] tensors; rows with no visible key
    are zeros and -inf, as flashrs defines them (SDPA gives NaN there)."""
    q, k, v = (t.double() for t in (q, k, v))
    mask = visible(q.shape[2], k.shape[2], causal, q.device)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=True)
    seen = mask.any(dim=1)
    out = torch.where(seen[None, None, :, None], out, torch.zeros_like(out))
    group = q.shape[1] // k.shape[1]
    scores = scale * q @ k.repeat_interleave(group, dim=1).transpose(-1, -2)
    lse = scores.masked_fill(~mask, float("-inf")).logsumexp(dim=-1)
    return out, lse


def to_order(t, order):
    """A [B, H, S, D] tensor as the caller hands it: ``bhsd`` contiguous, ``bshd`` contiguous in
    [B, S, H, D] order (layout="bshd"), ``bshd-view``: [B, S, H, D] memory seen as [B, H, S, D],
    or ``slice``: the first S positions of a [B, H, S + 24, D] buffer (a KV cache's view)."""
    if order == "bhsd":
        return t.contiguous()
    if order == "bshd":
        return t.transpose(1, 2).contiguous()
    if order == "slice":
        b, h, s, d = t.shape
        buffer = torch.full((b, h, s + 24, d), float("nan"), dtype=t.dtype, device=t.device)
        buffer[:, :, :s] = t
        return buffer[:, :, :s]
    return t.transpose(1, 2).contiguous().transpose(1, 2)


def from_order(t, order):
    return t.transpose(1, 2) if order == "bshd" else t


def random_problem(rng, sm90):
    head_dims = [64, 128] + ([256] if sm90 else [])
    h_kv = rng.choice([1, 2, 4])
    return dict(
        b=rng.choice([1, 2, 3]),
        h_kv=h_kv,
        h=h_kv * rng.choice([1, 2, 4]),
        s_q=rng.choice([1, rng.randint(1, 64), rng.randint(1, 700)]),
        s_k=rng.choice([1, rng.randint(1, 64), rng.randint(1, 1200)]),
        d=rng.choice(head_dims),
        mixed=[rng.choice(["bhsd", "bshd-view", "slice"]) for _ in range(3)],
        dtype=rng.choice(["float16", "bfloat16"]),
        order=rng.choice(["bhsd", "bshd", "bshd-view", "mixed"]),
        causal=rng.random() < 0.5,
        scale=rng.choice([None, 0.3]),
    )


@unittest.skipUnless(HAVE_CUDA, "needs torch with a CUDA device")
class AgainstTorch(unittest.TestCase):
    def setUp(self):
        self.seed = int(os.environ.get("FLASHRS_SEED", random.randrange(1 << 30)))
        self.device = torch.device("cuda", torch.cuda.current_device())
        self.sm90 = torch.cuda.get_device_capability() == (9, 0)

    def run_problem(self, p, gen, return_lse=True):
        dtype = getattr(torch, p["dtype"])
        shape_q = (p["b"], p["h"], p["s_q"], p["d"])
        shape_kv = (p["b"], p["h_kv"], p["s_k"], p["d"])
        make = lambda shape: (torch.rand(shape, generator=gen, device=self.device) * 4 - 2).to(dtype)
        q, k, v = make(shape_q), make(shape_kv), make(shape_kv)
        scale = p["scale"] if p["scale"] is not None else p["d"] ** -0.5
        want, want_lse = reference(q, k, v, p["causal"], scale)
        order = p["order"]
        layout = "bshd" if order == "bshd" else None
        # "mixed": each tensor its own memory order, a KV cache's slice among them.
        orders = p.get("orders") or ([order] * 3 if order != "mixed" else p["mixed"])
        args = [to_order(t, o) for t, o in zip((q, k, v), orders)]
        out, lse, kernel = flashrs._attention(*args, p["causal"], p["scale"], return_lse, layout)
        what = f"{p} ({kernel}), FLASHRS_SEED={self.seed}"
        self.assertEqual(out.dtype, dtype, what)
        self.assertEqual(tuple(out.shape), tuple(args[0].shape), what)
        if orders[0] == "slice":
            self.assertTrue(out.is_contiguous(), f"{what}: out of a strided q is contiguous")
        else:
            self.assertEqual(out.stride(), args[0].stride(), f"{what}: out takes q's memory layout")
        got = from_order(out, order).double()
        self.assertTrue(torch.isfinite(got).all(), what)
        max_abs, rel_l2 = TOLERANCE[p["dtype"]]
        err = (got - want).abs().max().item()
        rel = ((got - want).norm() / want.norm().clamp_min(1e-30)).item()
        self.assertLessEqual(err, max_abs, f"max abs error {err}: {what}")
        self.assertLessEqual(rel, rel_l2, f"relative L2 error {rel}: {what}")
        if return_lse:
            self.assertEqual(tuple(lse.shape), shape_q[:3], what)
            self.assertEqual(lse.dtype, torch.float32, what)
            seen = torch.isfinite(want_lse)
            self.assertTrue(torch.equal(torch.isfinite(lse), seen), f"-inf rows: {what}")
            lse_err = (lse.double()[seen] - want_lse[seen]).abs().max().item() if seen.any() else 0
            self.assertLessEqual(lse_err, 1e-3, f"lse error {lse_err}: {what}")
        return kernel

    def test_random_problems(self):
        rng = random.Random(self.seed)
        gen = torch.Generator(device=self.device).manual_seed(self.seed)
        kernels = set()
        for _ in range(int(os.environ.get("FLASHRS_CASES", 60))):
            kernels.add(self.run_problem(random_problem(rng, self.sm90), gen, rng.random() < 0.7))
        print(f"\nrandom problems, FLASHRS_SEED={self.seed}: kernels {sorted(kernels)}")

    def test_fused_projection_views_and_mixed_orders(self):
        # q, k and v of one fused [B, S, 3, H, D] projection (qkv.unbind(2), layout="bshd"), read
        # in place on Hopper and copied elsewhere, and the mixed orders a model hands over.
        gen = torch.Generator(device=self.device).manual_seed(self.seed)
        for d, causal, dtype in [(64, False, torch.float16), (128, True, torch.bfloat16)]:
            b, s, h = 2, 333, 4
            qkv = (torch.rand(b, s, 3, h, d, generator=gen, device=self.device) * 4 - 2).to(dtype)
            q, k, v = qkv.unbind(2)
            out = flashrs.attention(q, k, v, causal=causal, layout="bshd")
            want, _ = reference(*(t.transpose(1, 2) for t in (q, k, v)), causal, d**-0.5)
            err = (out.transpose(1, 2).double() - want).abs().max().item()
            self.assertLessEqual(err, TOLERANCE[str(dtype)[6:]][0], f"fused qkv d={d}, FLASHRS_SEED={self.seed}")
        base = dict(b=2, h=8, h_kv=2, s_q=200, s_k=300, d=128, dtype="float16", order="mixed", causal=True, scale=None)
        for mixed in (["bshd-view", "bhsd", "slice"], ["slice", "slice", "bshd-view"], ["bhsd", "bshd-view", "bshd-view"]):
            self.run_problem(dict(base, mixed=mixed), gen)
        # Decode against a KV cache slice, grouped.
        self.run_problem(dict(base, s_q=1, s_k=4000, mixed=["bhsd", "slice", "slice"], causal=False), gen)

    def test_each_feature_on_its_own(self):
        gen = torch.Generator(device=self.device).manual_seed(self.seed)
        base = dict(b=2, h=8, h_kv=8, s_q=256, s_k=256, d=128, dtype="float16", order="bhsd", causal=False, scale=None)
        for change in [
            {},
            {"dtype": "bfloat16"},
            {"h_kv": 2},
            {"h_kv": 1, "dtype": "bfloat16"},
            {"causal": True},
            {"causal": True, "s_q": 100, "s_k": 300},
            {"causal": True, "s_q": 300, "s_k": 100},  # the first 200 rows see no key
            {"order": "bshd"},
            {"order": "bshd-view", "h_kv": 2, "causal": True},
            {"d": 64, "scale": 0.05},
            {"s_q": 1, "s_k": 4096, "h_kv": 2},  # decode: split over keys, combined
            {"s_q": 1, "s_k": 4096, "h_kv": 1, "order": "bshd", "dtype": "bfloat16"},
        ]:
            with self.subTest(**change):
                self.run_problem({**base, **change}, gen)

    def test_runs_on_the_current_stream(self):
        # Work queued on a side stream before the call must be seen by it (no synchronisation in
        # between), and the output must be ready for work queued after it on that stream.
        gen = torch.Generator(device=self.device).manual_seed(self.seed)
        q, k, v = (torch.rand((1, 8, 2048, 128), generator=gen, device=self.device).half() for _ in range(3))
        want = F.scaled_dot_product_attention(q.float(), k.float() * 0.5, v.float())
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(50_000_000)  # keeps the stream busy so an unordered launch would race
            k2 = k * 0.5
            out = flashrs.attention(q, k2, v)
            result = out.float() * 1.0
        side.synchronize()
        self.assertLessEqual((result - want).abs().max().item(), 1e-2)

    def test_strides_no_kernel_reads_are_copied(self):
        # A D stride other than 1, a broadcast (stride 0) head, a slice: copied or read in place,
        # the result is the same.
        gen = torch.Generator(device=self.device).manual_seed(self.seed)
        make = lambda *shape: (torch.rand(shape, generator=gen, device=self.device) * 4 - 2).half()
        q, k, v = make(1, 2, 16, 64), make(1, 2, 16, 64), make(1, 2, 16, 64)
        d_major = q.transpose(2, 3).contiguous().transpose(2, 3)
        broadcast = k[:, :1].expand(1, 2, 16, 64)
        sliced = make(1, 2, 40, 64)[:, :, :16]
        for args in [(d_major, k, v), (q, broadcast, broadcast), (q, sliced, sliced)]:
            want, _ = reference(*args, False, 64**-0.5)
            got = flashrs.attention(*args).double()
            self.assertLessEqual((got - want).abs().max().item(), TOLERANCE["float16"][0], f"seed {self.seed}")

    def test_bad_input_is_a_value_error(self):
        q = torch.zeros((1, 2, 16, 64), device=self.device, dtype=torch.float16)
        for args, words in [
            ((q.cpu(), q, q), "q is on cpu"),
            ((q.float(), q.float(), q.float()), "dtype torch.float32"),
            ((q, q.bfloat16(), q), "one dtype"),
            ((q[..., :32].contiguous(),) * 3, "unsupported head dim 32"),
            ((q.transpose(2, 3), q, q), "head dim"),
            ((q, q[:, :, :8].contiguous(), q), "keys and values"),
            ((q, torch.zeros((1, 3, 16, 64), device=self.device, dtype=torch.float16), q), "keys and values"),
        ]:
            with self.subTest(words), self.assertRaises(ValueError) as caught:
                flashrs.attention(*args)
            self.assertIn(words, str(caught.exception))
            self.assertEqual(len(str(caught.exception).splitlines()), 1)
        with self.assertRaises(ValueError):
            flashrs.attention(q, q, q, scale=0.0)
        odd = torch.zeros(1 * 2 * 16 * 64 + 1, device=self.device, dtype=torch.float16)[1:].view(1, 2, 16, 64)
        with self.assertRaises(ValueError) as caught:
            flashrs.attention(odd, q, q)
        self.assertIn("not aligned", str(caught.exception))


if __name__ == "__main__":
    unittest.main()
