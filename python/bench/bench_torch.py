"""Times flashrs.attention (through the Python package, as a torch user calls it) beside torch's
SDPA backends on the same tensors: per shape, the median of CUDA-event times of single calls
after a warm-up. Host overhead is included for every contestant alike (this is the cost a
Python caller pays; `host bench` times the kernels alone through CUDA graphs).

    python3 python/bench/bench_torch.py --json bench_torch.json [--dtype bf16] [--iters 50]

It lives in its own folder, not in python/: a script's folder comes first on sys.path, and
python/flashrs (the package's sources, without the native module) would shadow the installed one.
"""

import argparse
import json
import statistics

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
    (1, 32, 8, 1, 32768, 128, False),
    (16, 32, 8, 1, 4096, 128, False),
]

BACKENDS = {
    "torch_flash": SDPBackend.FLASH_ATTENTION,
    "torch_cudnn": SDPBackend.CUDNN_ATTENTION,
    "torch_efficient": SDPBackend.EFFICIENT_ATTENTION,
}


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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default="bench_torch.json")
    parser.add_argument("--dtype", choices=["fp16", "bf16"], default="fp16")
    parser.add_argument("--iters", type=int, default=50)
    args = parser.parse_args()
    dtype = torch.float16 if args.dtype == "fp16" else torch.bfloat16
    device = torch.device("cuda")
    rows = []
    for b, h, h_kv, s_q, s_k, d, causal in SHAPES:
        q = torch.randn(b, h, s_q, d, device=device, dtype=dtype)
        k = torch.randn(b, h_kv, s_k, d, device=device, dtype=dtype)
        v = torch.randn(b, h_kv, s_k, d, device=device, dtype=dtype)
        _, _, kernel = flashrs._attention(q, k, v, causal, None, False, None)
        row = {"shape": [b, h, h_kv, s_q, s_k, d], "causal": causal, "dtype": args.dtype, "kernel": kernel}
        row["flashrs_us"] = median_us(lambda: flashrs.attention(q, k, v, causal=causal), args.iters)
        # torch's is_causal is top-left aligned; with S_q == S_k (or no mask) it is the same mask.
        torch_causal = causal and s_q == s_k
        for name, backend in BACKENDS.items():
            if causal and not torch_causal:
                row[name + "_us"] = None
                continue
            try:
                with sdpa_kernel(backend):
                    call = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=torch_causal, enable_gqa=h != h_kv)
                    row[name + "_us"] = median_us(call, args.iters)
            except RuntimeError as e:  # the backend does not take this problem
                row[name + "_us"] = None
                row[name + "_note"] = str(e).splitlines()[0][:200]
        flops = 4 * b * h * s_q * s_k * d / (2 if causal else 1)
        row["flashrs_tflops"] = flops / row["flashrs_us"] / 1e6
        rows.append(row)
        peers = "  ".join(
            f"{n} {row[n + '_us']:.1f}" if row[n + "_us"] else f"{n} -" for n in BACKENDS
        )
        print(f"{row['shape']} causal={causal}: flashrs {row['flashrs_us']:.1f} us ({kernel})  {peers}", flush=True)
    result = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "method": "median of per-call CUDA-event times from Python, host overhead included",
        "iters": args.iters,
        "rows": rows,
    }
    with open(args.json, "w") as f:
        json.dump(result, f, indent=1)
    print("wrote", args.json)


if __name__ == "__main__":
    main()
