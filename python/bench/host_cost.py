"""Where the host time of one flashrs.attention call goes: each layer of the Python path timed on
its own, as wall clock per call of back-to-back calls (the GPU work is asynchronous and shorter
than the host work at these shapes, so the wall clock per call is the host's cost).

    python3 python/bench/host_cost.py [--json host_cost.json] [--calls 2000]

Layers, outermost first: the public function (type and grad checks, then the op), the
torch.library op (the dispatcher, then the real implementation), the implementation alone
(descriptions, the native checks, torch's allocation, the stream, the native launch), and its
parts; torch SDPA's cuDNN backend on the same tensors for comparison.
"""

import argparse
import json

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashrs
from bench_torch import wall_us as per_call_us  # this folder is on sys.path
from flashrs import _flashrs

SHAPES = [(1, 8, 8, 512, 512, 64), (1, 32, 8, 1, 8192, 128)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default="host_cost.json")
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    rows = []
    for b, h, h_kv, s_q, s_k, d in SHAPES:
        make = lambda heads, s: torch.randn(b, heads, s, d, device="cuda", dtype=torch.bfloat16)
        q, k, v = make(h, s_q), make(h_kv, s_k), make(h_kv, s_k)
        described = [flashrs._describe(n, t) for n, t in zip("qkv", (q, k, v))]
        out = torch.empty_like(q)
        out_described = flashrs._describe("out", out)
        stream = torch.cuda.current_stream().cuda_stream
        layers = {
            "flashrs.attention": lambda: flashrs.attention(q, k, v),
            "torch.ops.flashrs.attention": lambda: torch.ops.flashrs.attention(q, k, v, False, None, False, "bhsd", False),
            "implementation (_attention)": lambda: flashrs._attention(q, k, v, False, None, False, "bhsd"),
            "  describe q, k, v": lambda: [flashrs._describe(n, t) for n, t in zip("qkv", (q, k, v))],
            "  native check": lambda: _flashrs.check(*described, "bhsd", False, None),
            "  the output's allocation": lambda: flashrs._empty_like(q),
            "  current stream": lambda: flashrs._current_stream(q),
            "  native attention (checks + launch)": lambda: _flashrs.attention(
                *described, out_described, None, "bhsd", False, None, stream
            ),
        }
        row = {"shape": [b, h, h_kv, s_q, s_k, d], "dtype": "bf16", "us_per_call": {}}
        for name, fn in layers.items():
            row["us_per_call"][name] = per_call_us(fn, args.calls)
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            sdpa = lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=h != h_kv)
            row["us_per_call"]["torch SDPA cuDNN"] = per_call_us(sdpa, args.calls)
        rows.append(row)
        print(f"{row['shape']} bf16, wall clock per call of {args.calls} back-to-back calls:")
        for name, us in row["us_per_call"].items():
            print(f"  {name:40s} {us:8.1f} us")
    with open(args.json, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=1)
    print("wrote", args.json)


if __name__ == "__main__":
    main()
