"""CUDA-graph capture for the GPU tests: a call warmed up eagerly (which loads its kernels, as
capture could not) and on a side stream (as torch asks before capture), then captured."""

import torch


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
