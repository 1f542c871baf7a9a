"""What the GPU tests share: whether torch with a CUDA device is here, a base class that seeds
each test (``FLASHRS_SEED`` repeats a run), one that adds random q, k, v of a case and
FlashAttention's error criterion, and CUDA-graph capture of a call warmed up eagerly (which loads
its kernels, as capture could not) and on a side stream (as torch asks)."""

import os
import random
import unittest

try:
    import torch

    HAVE_CUDA = torch.cuda.is_available()
except ImportError:  # the CPU CI
    torch = None
    HAVE_CUDA = False


@unittest.skipUnless(HAVE_CUDA, "needs torch with a CUDA device")
class GpuCase(unittest.TestCase):
    """A test on the current CUDA device with a seeded generator there (``self.gen``) and on the
    host (``self.rng``); the seed is in ``self.seed`` for the failure messages."""

    def setUp(self):
        self.seed = int(os.environ.get("FLASHRS_SEED", random.randrange(1 << 30)))
        self.device = torch.device("cuda", torch.cuda.current_device())
        self.gen = torch.Generator(device=self.device).manual_seed(self.seed)
        self.rng = random.Random(self.seed)



class AttentionCase(GpuCase):
    """A ``GpuCase`` over cases ``(B, H, H_kv, S_q, S_k, D, causal, window_size, softcap,
    layout)``, with their random inputs and FlashAttention's error criterion."""

    def inputs(self, case, dtype, requires_grad=False):
        """q, k and v of the case: standard normal from ``self.gen``, drawn in float32 and cast to
        ``dtype``, in the case's dim order."""
        b, h, h_kv, s_q, s_k, d, _, _, _, layout = case

        def make(heads, s):
            dims = (b, s, heads, d) if layout == "bshd" else (b, heads, s, d)
            t = torch.randn(dims, generator=self.gen, device=self.device).to(dtype)
            return t.requires_grad_(requires_grad)

        return make(h, s_q), make(h_kv, s_k), make(h_kv, s_k)

    def assert_within(self, name, ours, same_dtype, exact, what, largest=None):
        """FlashAttention's criterion: ours at most twice the same-dtype reference's error to
        float64, plus a floor of 1e-3 of the largest exact value (`largest`: of all the case's
        gradients, for one that is exactly zero, as dQ under a one-key window, where the
        same-dtype path's error is 0 and ours is rounding)."""
        self.assertFalse(ours.isnan().any().item(), f"{name} has NaN: {what}")
        err = (ours.double() - exact).abs().max().item()
        math_err = (same_dtype.double() - exact).abs().max().item()
        largest = exact.abs().max().item() if largest is None else largest
        floor = 1e-3 * largest + 1e-6
        print(f"{what}: {name} max err {err:.3e} (math path {math_err:.3e})")
        self.assertLessEqual(err, 2 * math_err + floor, f"{name}: {err} vs the math path's {math_err}: {what}")

def captured(call):
    """``(graph, outputs)``: ``call`` captured in a fresh CUDA graph, with the outputs the
    captured call returned (the buffers each replay writes), filled with NaN so that a replay
    that writes nothing is seen."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = call()
    for t in outputs:
        if t.is_floating_point():
            t.fill_(float("nan"))
    return graph, outputs
