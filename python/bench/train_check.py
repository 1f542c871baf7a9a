"""Trains the same small decoder twice from the same seed, once with flashrs attention and once
with torch SDPA (its default backend choice), on synthetic data this script generates, and checks
that the two loss curves agree at every logged step.

    python3 python/bench/train_check.py --json train_check.json [--steps 300] [--tolerance 0.02]

The model: a pre-norm decoder (6 layers, width 512, 8 heads of 64, sequence 1024, learned
positions, GELU MLP), fp32 weights under bf16 autocast, AdamW. The data: sequences whose first
half follows a sparse random bigram chain (each token has four likely successors) and whose
second half repeats the first, so the loss falls both by learning the chain and by learning to
attend back (the copy needs attention across 512 positions). Both runs draw the same batches and
the same initial weights; dropout is off, so the runs differ only by the attention kernels'
rounding (bf16 inputs, fp32 accumulation, different summation orders), and the curves agree to
within that noise. The check: at every logged step |loss_flashrs - loss_sdpa| <= tolerance *
loss_sdpa; the script exits 1 otherwise.
"""

import argparse
import json
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import flashrs


class Block(nn.Module):
    def __init__(self, width, heads, attend):
        super().__init__()
        self.heads, self.attend = heads, attend
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width, bias=False)
        self.proj = nn.Linear(width, width, bias=False)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x):
        b, s, w = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, w // self.heads).unbind(2)
        x = x + self.proj(self.attend(q, k, v).reshape(b, s, w))
        return x + self.mlp(self.norm2(x))


class Decoder(nn.Module):
    def __init__(self, vocab, width, layers, heads, seq, attend):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.position = nn.Parameter(torch.randn(seq, width) * 0.02)
        self.blocks = nn.ModuleList(Block(width, heads, attend) for _ in range(layers))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, tokens):
        x = self.embed(tokens) + self.position[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def attend_flashrs(q, k, v):
    # [B, S, H, D] views of the fused projection: flashrs takes them as they are.
    return flashrs.attention(q, k, v, causal=True, layout="bshd")


def attend_sdpa(q, k, v):
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)


def batches(steps, batch, seq, vocab, seed, device):
    """The same synthetic batches for every run: a sparse bigram chain, then its copy."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    successors = torch.randint(0, vocab, (vocab, 4), generator=gen)
    weights = torch.tensor([0.55, 0.25, 0.15, 0.05])
    half = seq // 2 + 1
    for _ in range(steps):
        tokens = torch.empty(batch, half, dtype=torch.long)
        tokens[:, 0] = torch.randint(0, vocab, (batch,), generator=gen)
        for i in range(1, half):
            pick = torch.multinomial(weights, batch, replacement=True, generator=gen)
            tokens[:, i] = successors[tokens[:, i - 1], pick]
        sequence = torch.cat([tokens, tokens[:, 1:]], dim=1)[:, : seq + 1]
        yield sequence.to(device)


def train(attend, args, data_batches, device):
    torch.manual_seed(args.seed)
    model = Decoder(args.vocab, args.width, args.layers, args.heads, args.seq, attend).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    losses, start = [], time.perf_counter()
    for step, data in enumerate(data_batches):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(data[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, args.vocab), data[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if step % args.log_every == 0 or step + 1 == args.steps:
            losses.append((step, loss.item()))
    torch.cuda.synchronize()
    return losses, time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=512)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--tolerance", type=float, default=0.02, help="relative, per logged step")
    parser.add_argument("--json", help="write the curves and the verdict here")
    args = parser.parse_args()
    device = torch.device("cuda")

    data_batches = list(batches(args.steps, args.batch, args.seq, args.vocab, args.seed, device))
    curves, seconds = {}, {}
    for name, attend in [("sdpa", attend_sdpa), ("flashrs", attend_flashrs)]:
        curves[name], seconds[name] = train(attend, args, data_batches, device)
        print(f"{name}: {args.steps} steps in {seconds[name]:.1f} s", flush=True)

    worst, rows = 0.0, []
    print(f"{'step':>6} {'sdpa':>9} {'flashrs':>9} {'rel diff':>9}")
    for (step, ref), (_, ours) in zip(curves["sdpa"], curves["flashrs"]):
        rel = abs(ours - ref) / ref if math.isfinite(ours) else math.inf
        worst = max(worst, rel)
        rows.append({"step": step, "sdpa": ref, "flashrs": ours, "relative_difference": rel})
        print(f"{step:>6} {ref:>9.4f} {ours:>9.4f} {rel:>9.2e}")
    passed = worst <= args.tolerance
    first, last = curves["sdpa"][0][1], curves["sdpa"][-1][1]
    print(f"loss {first:.3f} -> {last:.3f}; largest relative difference {worst:.2e} "
          f"(tolerance {args.tolerance}): {'PASS' if passed else 'FAIL'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({
                "config": vars(args),
                "gpu": torch.cuda.get_device_name(),
                "torch": torch.__version__,
                "seconds": seconds,
                "curves": rows,
                "largest_relative_difference": worst,
                "passed": passed,
            }, f, indent=1)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
