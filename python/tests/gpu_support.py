"""What the GPU tests share: whether torch with a CUDA device is here, a base class that seeds
each test (``FLASHRS_SEED`` repeats a run), and CUDA-graph capture of a call warmed up eagerly
(which loads its kernels, as capture could not) and on a side stream (as torch asks)."""

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
