"""Times the sliding window, the logit softcap, attention sinks and the head dims without tiles of
their own (96, 192), flashrs beside flash-attn-4 (`flash_attn.cute`, FlashAttention-3's algorithm
on sm90) with the same `window_size`, `softcap` and sinks (its `learnable_sink`), beside cuDNN
through torch's SDPA where the case has none of the three, and beside each one's own plain call
of the same shape: forward alone and forward + backward through torch autograd, each the median
of CUDA-event times after a warm-up, in one process.

    python3 python/bench/bench_window.py --json bench_window.json [--dtype bf16] [--iters 30]

A window of w keys over S keys should cost about w / S of the causal call when the kernels skip
the key tiles before the window (flashrs' `flash_ws` and `flash_decode` do; its backward masks
without skipping). Sinks (one logit per query head, GPT-OSS's) cost one more term per row at the
end, so a call with them should take the plain call's time. Head dim 96 runs on flashrs' 128-wide
tiles and 192 on its 256-wide ones (zero-filled by the copy engine): each should cost about what
the wider head dim's call costs, which the cases beside them show. Inputs are [B, S, H, D].
"""

import argparse
import json

import torch

import flashrs
from bench_backward import load_fa4, median_us

# (name, B, H, H_kv, S_q, S_k, D, causal, window_size, softcap, sinks)
CASES = [
    ("prefill causal", 1, 16, 16, 16384, 16384, 128, True, (-1, -1), 0.0, False),
    ("prefill window 4096", 1, 16, 16, 16384, 16384, 128, True, (4096, 0), 0.0, False),
    ("prefill window 1024", 1, 16, 16, 16384, 16384, 128, True, (1024, 0), 0.0, False),
    ("prefill softcap 50", 1, 16, 16, 16384, 16384, 128, True, (-1, -1), 50.0, False),
    ("gemma-like d256 window 4096 softcap 50", 1, 8, 4, 8192, 8192, 256, True, (4095, 0), 50.0, False),
    ("decode causal", 32, 32, 8, 1, 32768, 128, True, (-1, -1), 0.0, False),
    ("decode window 4096", 32, 32, 8, 1, 32768, 128, True, (4096, 0), 0.0, False),
    # GPT-OSS's attention: 64 query heads on 8 KV heads of dim 64, full and 128-key sliding
    # layers, a sink per head; each beside the same call without sinks.
    ("gpt-oss-like full", 2, 64, 8, 4096, 4096, 64, True, (-1, -1), 0.0, False),
    ("gpt-oss-like full sinks", 2, 64, 8, 4096, 4096, 64, True, (-1, -1), 0.0, True),
    ("gpt-oss-like sliding 128 sinks", 2, 64, 8, 4096, 4096, 64, True, (127, 0), 0.0, True),
    ("gpt-oss-like decode", 32, 64, 8, 1, 8192, 64, True, (-1, -1), 0.0, False),
    ("gpt-oss-like decode sinks", 32, 64, 8, 1, 8192, 64, True, (-1, -1), 0.0, True),
    # Head dims without tiles of their own, each beside the head dim whose tiles run it.
    ("head dim 96", 2, 16, 16, 4096, 4096, 96, False, (-1, -1), 0.0, False),
    ("head dim 96 causal", 2, 16, 16, 4096, 4096, 96, True, (-1, -1), 0.0, False),
    ("head dim 128 (96's tiles)", 2, 16, 16, 4096, 4096, 128, False, (-1, -1), 0.0, False),
    ("head dim 192", 2, 16, 16, 4096, 4096, 192, False, (-1, -1), 0.0, False),
    ("head dim 192 causal", 2, 16, 16, 4096, 4096, 192, True, (-1, -1), 0.0, False),
    ("head dim 256 (192's tiles)", 2, 16, 16, 4096, 4096, 256, False, (-1, -1), 0.0, False),
]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the results here too")
    parser.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--cases", help="only the cases whose name contains one of these comma-separated words")
    args = parser.parse_args()
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    fa4, fa4_error = load_fa4()
    report = {"device": torch.cuda.get_device_name(), "dtype": args.dtype, "fa4_error": fa4_error, "results": []}
    gen = torch.Generator(device="cuda").manual_seed(0)

    def contestants():
        found = {
            "flashrs": lambda q, k, v, c, w, s, sinks: flashrs.attention(
                q, k, v, causal=c, layout="bshd", window_size=w, softcap=s, sinks=sinks
            )
        }
        if fa4 is not None:
            def fa4_call(q, k, v, c, w, s, sinks):
                window = tuple(None if x < 0 else x for x in w)
                extra = {} if sinks is None else {"learnable_sink": sinks}
                out = fa4(q, k, v, causal=c, window_size=window, softcap=s, **extra)
                return out[0] if isinstance(out, tuple) else out

            found["fa4"] = fa4_call

        def cudnn(q, k, v, c, w, s, sinks):
            if tuple(w) != (-1, -1) or s or sinks is not None:
                raise ValueError("torch's SDPA takes no window, softcap or sinks")
            if c and q.shape[1] != k.shape[1]:
                raise ValueError("torch's is_causal aligns top-left, flashrs' bottom-right")
            from torch.nn.attention import SDPBackend, sdpa_kernel

            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                q, k, v = (t.transpose(1, 2) for t in (q, k, v))
                out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=c, enable_gqa=True)
                return out.transpose(1, 2)

        found["cudnn"] = cudnn
        return found

    for name, b, h, h_kv, s_q, s_k, d, causal, window, softcap, with_sinks in CASES:
        if args.cases and not any(word in name for word in args.cases.split(",")):
            continue
        q = torch.randn((b, s_q, h, d), generator=gen, device="cuda").to(dtype)
        k = torch.randn((b, s_k, h_kv, d), generator=gen, device="cuda").to(dtype)
        v = torch.randn((b, s_k, h_kv, d), generator=gen, device="cuda").to(dtype)
        d_out = torch.randn((b, s_q, h, d), generator=gen, device="cuda").to(dtype)
        sinks = torch.rand(h, generator=gen, device="cuda") * 4 if with_sinks else None
        row = {"case": name, "shape": [b, h, h_kv, s_q, s_k, d], "causal": causal, "window_size": list(window),
               "softcap": softcap, "sinks": with_sinks, "forward_us": {}, "forward_backward_us": {}, "errors": {}}
        for who, f in contestants().items():
            try:
                forward = median_us(lambda: f(q, k, v, causal, window, softcap, sinks), args.iters)
                row["forward_us"][who] = round(forward, 1)
                if s_q > 1:
                    inputs = [t.clone().requires_grad_() for t in (q, k, v)]
                    trained = None if sinks is None else sinks.clone().requires_grad_()
                    step = lambda: f(*inputs, causal, window, softcap, trained).backward(d_out)
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
