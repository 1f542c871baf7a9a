"""Times the backward pass through torch autograd, flashrs beside torch SDPA's cuDNN and flash
(FlashAttention-2) backends and flash-attn-4 (`flash_attn.cute`, FlashAttention-3's algorithm on
sm90) when it imports, on the same shapes in one process: forward + backward (one training
step's attention: the forward, then `backward(d_out)`) and the backward alone (`autograd.grad`
on a kept graph), each the median of CUDA-event times after a warm-up, with the backward's
TFLOP/s (2.5x the forward's FLOPs: five matrix products of the forward's two; half of it under a
causal mask). flashrs runs in both of its modes (atomic and deterministic dQ).

    python3 python/bench/bench_backward.py --json bench_backward.json [--dtype bf16] [--iters 30]
        [--only flashrs,fa4,torch_cudnn]

Each contestant gets its own preferred memory order of the same values: [B, S, H, D] for
flashrs and flash-attn-4, [B, H, S, D] for SDPA.
"""

import argparse
import json
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashrs

# (B, H, H_kv, S, D, causal)
SHAPES = [
    (2, 16, 16, 4096, 64, False),
    (2, 16, 16, 4096, 128, False),
    (2, 16, 16, 4096, 128, True),
    (2, 16, 16, 4096, 256, False),
    (2, 32, 8, 2048, 128, True),
]


def median_us(fn, iters, warmup=3):
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


def load_fa4():
    try:
        from flash_attn.cute.interface import flash_attn_func

        return flash_attn_func, None
    except Exception as exc:  # not installed on this machine
        return None, f"flash_attn.cute not importable: {str(exc).splitlines()[0]}"


def contestants(fa4):
    """name -> (layout, f(q, k, v, causal) -> out)."""
    def sdpa(backend):
        def f(q, k, v, causal):
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=q.shape[1] != k.shape[1])
        return f

    found = {
        "flashrs": ("bshd", lambda q, k, v, c: flashrs.attention(q, k, v, causal=c, layout="bshd")),
        "flashrs_deterministic": (
            "bshd",
            lambda q, k, v, c: flashrs.attention(q, k, v, causal=c, layout="bshd", deterministic=True),
        ),
        "torch_cudnn": ("bhsd", sdpa(SDPBackend.CUDNN_ATTENTION)),
        "torch_flash": ("bhsd", sdpa(SDPBackend.FLASH_ATTENTION)),
    }
    if fa4 is not None:
        def fa4_call(q, k, v, causal):
            out = fa4(q, k, v, causal=causal, softmax_scale=q.shape[-1] ** -0.5)
            return out[0] if isinstance(out, tuple) else out

        found["fa4"] = ("bshd", fa4_call)
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the results here too")
    parser.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--only", help="comma-separated contestants to time (default: all that import)")
    args = parser.parse_args()
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    fa4, fa4_error = load_fa4()
    report = {
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "device": torch.cuda.get_device_name(),
        "dtype": args.dtype,
        "fa4_error": fa4_error,
        "results": [],
    }
    gen = torch.Generator(device="cuda").manual_seed(0)
    for b, h, h_kv, s, d, causal in SHAPES:
        bshd = [torch.randn(dims, generator=gen, device="cuda").to(dtype)
                for dims in ((b, s, h, d), (b, s, h_kv, d), (b, s, h_kv, d))]
        d_out_bshd = torch.randn((b, s, h, d), generator=gen, device="cuda").to(dtype)
        forward_flops = 4 * b * h * s * s * d * (0.5 if causal else 1.0)
        row = {"shape": [b, h, h_kv, s, d], "causal": causal, "us": {}, "backward_tflops": {}, "errors": {}}
        for name, (layout, f) in contestants(fa4).items():
            if args.only and name not in args.only.split(","):
                continue
            if layout == "bshd":
                inputs = [t.clone().requires_grad_() for t in bshd]
                d_out = d_out_bshd
            else:
                inputs = [t.transpose(1, 2).contiguous().requires_grad_() for t in bshd]
                d_out = d_out_bshd.transpose(1, 2).contiguous()
            try:
                def step():
                    f(*inputs, causal).backward(d_out)

                total = median_us(step, args.iters)
                out = f(*inputs, causal)

                def backward_only():
                    torch.autograd.grad(out, inputs, d_out, retain_graph=True)

                backward = median_us(backward_only, args.iters)
            except Exception as exc:  # a peer without this case says so
                row["errors"][name] = str(exc).splitlines()[0][:200]
                continue
            row["us"][name] = {"forward_backward": round(total, 1), "backward": round(backward, 1)}
            row["backward_tflops"][name] = round(2.5 * forward_flops / backward / 1e6, 1)
            del out, inputs
        us = row["us"]
        for peer in ("fa4", "torch_cudnn", "torch_flash"):
            if "flashrs" in us and peer in us:
                row.setdefault("speedup", {})[peer] = {
                    part: round(us[peer][part] / us["flashrs"][part], 3) for part in ("forward_backward", "backward")
                }
        report["results"].append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(report, out, indent=1)
    print(f"{len(report['results'])} shapes; fa4: {fa4_error or 'present'}", file=sys.stderr)


if __name__ == "__main__":
    main()
