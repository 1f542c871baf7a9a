"""One training step's attention (forward, then backward) for a profiler: warms up, then runs a
single step between `torch.cuda.profiler.start()` and `stop()`, so that a profiler started with
profiling off sees only that step's kernels. Each contestant runs in its own process (one
`--who` per run), on the same shape and values.

    ncu --profile-from-start off --clock-control none --set full -o step_flashrs \\
        python3 python/bench/profile_step.py --who flashrs --shape 2,16,16,4096,128

`--who`: flashrs, flashrs_deterministic, fa4 (flash-attn-4, `flash_attn.cute`), torch_cudnn,
torch_flash. `--shape B,H,H_kv,S,D`; `--causal` for a causal mask.
"""

import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def attention_of(who):
    """f(q, k, v, causal) -> out on [B, S, H, D] tensors."""
    if who.startswith("flashrs"):
        import flashrs

        deterministic = who == "flashrs_deterministic"
        return lambda q, k, v, c: flashrs.attention(q, k, v, causal=c, layout="bshd", deterministic=deterministic)
    if who == "fa4":
        from flash_attn.cute.interface import flash_attn_func

        def fa4(q, k, v, c):
            out = flash_attn_func(q, k, v, causal=c, softmax_scale=q.shape[-1] ** -0.5)
            return out[0] if isinstance(out, tuple) else out

        return fa4
    backend = {"torch_cudnn": SDPBackend.CUDNN_ATTENTION, "torch_flash": SDPBackend.FLASH_ATTENTION}[who]

    def sdpa(q, k, v, c):
        q, k, v = (x.transpose(1, 2) for x in (q, k, v))
        with sdpa_kernel([backend]):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=c, enable_gqa=q.shape[1] != k.shape[1])
        return out.transpose(1, 2)

    return sdpa


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--who", required=True)
    parser.add_argument("--shape", default="2,16,16,4096,128", help="B,H,H_kv,S,D")
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    args = parser.parse_args()
    b, h, h_kv, s, d = (int(x) for x in args.shape.split(","))
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    gen = torch.Generator(device="cuda").manual_seed(0)

    def tensor(heads):
        return torch.randn(b, s, heads, d, device="cuda", dtype=dtype, generator=gen).requires_grad_()

    q, k, v = tensor(h), tensor(h_kv), tensor(h_kv)
    d_out = torch.randn(b, s, h, d, device="cuda", dtype=dtype, generator=gen)
    attend = attention_of(args.who)

    def step():
        out = attend(q, k, v, args.causal)
        torch.autograd.grad(out, (q, k, v), d_out)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    step()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    print(f"{args.who}: one step at {args.shape} causal={args.causal} profiled")


if __name__ == "__main__":
    main()
