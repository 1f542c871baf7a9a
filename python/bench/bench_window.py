"""Times the sliding window and the logit softcap, flashrs beside flash-attn-4 (`flash_attn.cute`,
FlashAttention-3's algorithm on sm90) with the same `window_size` and `softcap`, and beside each
one's own full (causal) call: forward alone and forward + backward through torch autograd, each
the median of CUDA-event times after a warm-up, in one process.

    python3 python/bench/bench_window.py --json bench_window.json [--dtype bf16] [--iters 30]

A window of w keys over S keys should cost about w / S of the causal call when the kernels skip
the key tiles before the window (flashrs' `flash_ws` and `flash_decode` do; its backward masks
without skipping). Inputs are [B, S, H, D] for both.
"""

import argparse
import json

import torch

import flashrs
from bench_backward import load_fa4, median_us

# (name, B, H, H_kv, S_q, S_k, D, causal, window_size, softcap)
CASES = [
    ("prefill causal", 1, 16, 16, 16384, 16384, 128, True, (-1, -1), 0.0),
    ("prefill window 4096", 1, 16, 16, 16384, 16384, 128, True, (4096, 0), 0.0),
    ("prefill window 1024", 1, 16, 16, 16384, 16384, 128, True, (1024, 0), 0.0),
    ("prefill softcap 50", 1, 16, 16, 16384, 16384, 128, True, (-1, -1), 50.0),
    ("gemma-like d256 window 4096 softcap 50", 1, 8, 4, 8192, 8192, 256, True, (4095, 0), 50.0),
    ("decode causal", 32, 32, 8, 1, 32768, 128, True, (-1, -1), 0.0),
    ("decode window 4096", 32, 32, 8, 1, 32768, 128, True, (4096, 0), 0.0),
]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the results here too")
    parser.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    parser.add_argument("--iters", type=int, default=30)
    args = parser.parse_args()
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    fa4, fa4_error = load_fa4()
    report = {"device": torch.cuda.get_device_name(), "dtype": args.dtype, "fa4_error": fa4_error, "results": []}
    gen = torch.Generator(device="cuda").manual_seed(0)

    def contestants():
        found = {
            "flashrs": lambda q, k, v, c, w, s: flashrs.attention(
                q, k, v, causal=c, layout="bshd", window_size=w, softcap=s
            )
        }
        if fa4 is not None:
            def fa4_call(q, k, v, c, w, s):
                window = tuple(None if x < 0 else x for x in w)
                out = fa4(q, k, v, causal=c, window_size=window, softcap=s)
                return out[0] if isinstance(out, tuple) else out

            found["fa4"] = fa4_call
        return found

    for name, b, h, h_kv, s_q, s_k, d, causal, window, softcap in CASES:
        q = torch.randn((b, s_q, h, d), generator=gen, device="cuda").to(dtype)
        k = torch.randn((b, s_k, h_kv, d), generator=gen, device="cuda").to(dtype)
        v = torch.randn((b, s_k, h_kv, d), generator=gen, device="cuda").to(dtype)
        d_out = torch.randn((b, s_q, h, d), generator=gen, device="cuda").to(dtype)
        row = {"case": name, "shape": [b, h, h_kv, s_q, s_k, d], "causal": causal, "window_size": list(window),
               "softcap": softcap, "forward_us": {}, "forward_backward_us": {}, "errors": {}}
        for who, f in contestants().items():
            try:
                forward = median_us(lambda: f(q, k, v, causal, window, softcap), args.iters)
                row["forward_us"][who] = round(forward, 1)
                if s_q > 1:
                    inputs = [t.clone().requires_grad_() for t in (q, k, v)]
                    step = lambda: f(*inputs, causal, window, softcap).backward(d_out)
                    row["forward_backward_us"][who] = round(median_us(step, args.iters), 1)
            except Exception as exc:  # a contestant without this case says so
                row["errors"][who] = str(exc).splitlines()[0][:200]
        report["results"].append(row)
        print(name, row["forward_us"], row["forward_backward_us"], row["errors"] or "", flush=True)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(report, out, indent=1)


if __name__ == "__main__":
    main()
