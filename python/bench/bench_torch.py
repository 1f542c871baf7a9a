"""Times flashrs.attention (through the Python package, as a torch user calls it) beside torch's
SDPA backends on the same tensors, three ways per contestant: the median of CUDA-event times of
single calls after a warm-up, the wall clock per call of 1,000 back-to-back calls (host overhead
included for every contestant alike: the cost a Python caller pays), and the median per call
replayed from a CUDA graph (no host work: `host bench` times the kernels alone this way too).
When flash-attn-4's `flash_attn.cute` imports (FlashAttention-3's algorithm on sm90), it is timed
the same three ways as `fa3`, on [B, S, H, D] copies of the same tensors.

    python3 python/bench/bench_torch.py --json bench_torch.json [--dtype bf16] [--iters 50]

It lives in its own folder, not in python/: a script's folder comes first on sys.path, and
python/flashrs (the package's sources, without the native module) would shadow the installed one.
"""

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashrs

# (B, H, H_kv, S_q, S_k, D, causal)
SHAPES = [
    (1, 8, 8, 512, 512, 64, False),
    (2, 8, 8, 2048, 2048, 64, False),
    (4, 16, 16, 2048, 2048, 128, False),
    (2, 16, 16, 4096, 4096, 128, False),
    (2, 16, 16, 4096, 4096, 128, True),
    (2, 32, 8, 2048, 2048, 128, True),
    (1, 32, 8, 1, 8192, 128, False),
    (1, 32, 8, 1, 32768, 128, False),
    (16, 32, 8, 1, 4096, 128, False),
]

BACKENDS = {
    "torch_flash": SDPBackend.FLASH_ATTENTION,
    "torch_cudnn": SDPBackend.CUDNN_ATTENTION,
    "torch_efficient": SDPBackend.EFFICIENT_ATTENTION,
}


def fa3_peer():
    """flash-attn-4's flash_attn_func (FlashAttention-3's algorithm on sm90), or None."""
    try:
        from flash_attn.cute.interface import flash_attn_func
    except Exception:  # not installed: the column stays empty
        return None
    return flash_attn_func


def median_us(fn, iters, warmup=5):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0)
    return statistics.median(times)


def graph_us(fn, iters, calls=20):
    """The median time of one call replayed from a CUDA graph of ``calls`` back-to-back calls
    (warmed up eagerly first, on a side stream, as torch asks): the kernel's time with no host
    work, what a serving engine that captures its steps pays."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    return median_us(graph.replay, iters) / calls


def wall_us(fn, calls=1000):
    """Wall-clock time per call of ``calls`` back-to-back calls (one synchronisation at the end):
    the larger of the host's cost per call and the kernel's."""
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def timings(fn, iters):
    """The three times of one contestant: per call between events, back to back, in a graph."""
    return {"us": median_us(fn, iters), "wall_us": wall_us(fn), "graph_us": graph_us(fn, iters)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default="bench_torch.json")
    parser.add_argument("--dtype", choices=["fp16", "bf16"], default="fp16")
    parser.add_argument("--iters", type=int, default=50)
    args = parser.parse_args()
    dtype = torch.float16 if args.dtype == "fp16" else torch.bfloat16
    device = torch.device("cuda")
    rows = []
    fa3 = fa3_peer()
    for b, h, h_kv, s_q, s_k, d, causal in SHAPES:
        q = torch.randn(b, h, s_q, d, device=device, dtype=dtype)
        k = torch.randn(b, h_kv, s_k, d, device=device, dtype=dtype)
        v = torch.randn(b, h_kv, s_k, d, device=device, dtype=dtype)
        _, _, kernel = flashrs._attention(q, k, v, causal, None, False, None)
        row = {"shape": [b, h, h_kv, s_q, s_k, d], "causal": causal, "dtype": args.dtype, "kernel": kernel}
        for key, value in timings(lambda: flashrs.attention(q, k, v, causal=causal), args.iters).items():
            row["flashrs_" + key] = value
        # torch's is_causal is top-left aligned; with S_q == S_k (or no mask) it is the same mask.
        torch_causal = causal and s_q == s_k
        for name, backend in BACKENDS.items():
            if causal and not torch_causal:
                row[name + "_us"] = None
                continue
            try:
                with sdpa_kernel(backend):
                    call = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=torch_causal, enable_gqa=h != h_kv)
                    for key, value in timings(call, args.iters).items():
                        row[name + "_" + key] = value
            except RuntimeError as e:  # the backend does not take this problem
                row[name + "_us"] = None
                row[name + "_note"] = str(e).splitlines()[0][:200]
        if fa3 is not None:
            # [B, S, H, D] copies; the scale 1/sqrt(D) and bottom-right causal mask match ours.
            qs, ks, vs = (t.transpose(1, 2).contiguous() for t in (q, k, v))
            scale = d**-0.5

            def fa3_call():
                out = fa3(qs, ks, vs, causal=causal, softmax_scale=scale)
                return out[0] if isinstance(out, tuple) else out

            try:
                for key, value in timings(fa3_call, args.iters).items():
                    row["fa3_" + key] = value
            except Exception as e:  # noqa: BLE001 - a peer's failure is reported, not fatal
                row["fa3_us"] = None
                row["fa3_note"] = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
        flops = 4 * b * h * s_q * s_k * d / (2 if causal else 1)
        row["flashrs_tflops"] = flops / row["flashrs_us"] / 1e6
        rows.append(row)
        def times(n):
            if not row.get(n + "_us"):
                return f"{n} -"
            return f"{n} {row[n + '_us']:.1f}/{row[n + '_wall_us']:.1f}/{row[n + '_graph_us']:.1f}"

        peers = "  ".join(times(n) for n in [*BACKENDS, "fa3"])
        print(f"{row['shape']} causal={causal} ({kernel}) events/wall/graph us: {times('flashrs')}  {peers}", flush=True)
    result = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "method": "per contestant: *_us median of per-call CUDA-event times from Python (host overhead "
        "included), *_wall_us wall clock per call of 1000 back-to-back calls, *_graph_us median per call "
        "replayed from a CUDA graph of 20 calls",
        "iters": args.iters,
        "rows": rows,
    }
    with open(args.json, "w") as f:
        json.dump(result, f, indent=1)
    print("wrote", args.json)


if __name__ == "__main__":
    main()
