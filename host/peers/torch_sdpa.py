"""Times PyTorch's SDPA backends (flash, cuDNN, memory-efficient) the way `host bench` times its own
kernels: CUDA graphs of back-to-back calls, CUDA events around each replay, per-call samples.

Embedded in the `host` binary and run as `python3 - SPEC_JSON` (spec on argv, script on stdin);
prints one JSON object on stdout. Also `--check IN_DIR OUT_DIR` for `verify --peer torch`: reads
q.npy, k.npy, v.npy (+ meta.json) and writes torch's float32 SDPA output to OUT_DIR/out.npy.
"""
import json
import sys


def fail(message):
    print(json.dumps({"error": message}))
    sys.exit(0)


try:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
except Exception as exc:  # no torch, or a torch without the SDPA backend API
    fail(f"torch not importable: {exc}")

BACKENDS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
}
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def time_backend(backend, q, k, v, causal, calls, warmup, replays):
    with sdpa_kernel([BACKENDS[backend]]):
        F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # raises if unsupported
        torch.cuda.synchronize()
        # One eager timing to size the graph: about a millisecond of work per replay.
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        end.record()
        torch.cuda.synchronize()
        single_us = start.elapsed_time(end) * 1000.0
        n = max(1, min(calls, int(1000.0 / max(single_us, 1e-3))))
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(n):
                out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    for _ in range(warmup):
        graph.replay()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(replays)]
    for start, end in events:
        start.record()
        graph.replay()
        end.record()
    torch.cuda.synchronize()
    del out, graph
    return n, [s.elapsed_time(e) * 1000.0 / n for s, e in events]


def bench(spec):
    if not torch.cuda.is_available():
        fail("torch sees no CUDA device")
    dtype = DTYPES[spec["dtype"]]
    results = []
    for b, h, sq, sk, d in spec["shapes"]:
        gen = torch.Generator(device="cuda").manual_seed(0)
        q = torch.randn(b, h, sq, d, device="cuda", dtype=dtype, generator=gen)
        k = torch.randn(b, h, sk, d, device="cuda", dtype=dtype, generator=gen)
        v = torch.randn(b, h, sk, d, device="cuda", dtype=dtype, generator=gen)
        for backend in spec["backends"]:
            row = {"backend": backend, "shape": [b, h, sq, d], "seq_k": sk, "causal": spec["causal"]}
            if spec["causal"] and sq != sk:
                row["error"] = "torch aligns causal masks top-left; not comparable when S_q != S_k"
            else:
                try:
                    n, samples = time_backend(
                        backend, q, k, v, spec["causal"], spec["calls"], spec["warmup"], spec["replays"]
                    )
                    row.update(calls_per_graph=n, samples_us=samples)
                except Exception as exc:
                    row["error"] = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
            results.append(row)
            torch.cuda.empty_cache()
    return {
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "device": torch.cuda.get_device_name(),
        "results": results,
    }


def check(in_dir, out_dir):
    import numpy as np

    meta = json.load(open(f"{in_dir}/meta.json"))
    q, k, v = (torch.from_numpy(np.load(f"{in_dir}/{n}.npy")).float().cuda() for n in "qkv")
    with sdpa_kernel([SDPBackend.MATH]):
        gqa = q.shape[1] != k.shape[1]
        out = F.scaled_dot_product_attention(q, k, v, is_causal=meta["causal"], scale=meta["scale"], enable_gqa=gqa)
    np.save(f"{out_dir}/out.npy", out.cpu().numpy().astype(np.float32))
    print(json.dumps({"torch": torch.__version__, "ok": True}))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--check":
        check(sys.argv[2], sys.argv[3])
    else:
        print(json.dumps(bench(json.loads(sys.argv[1]))))
