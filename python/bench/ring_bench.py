"""Ring attention (flashrs.distributed.ring_attention) across the GPUs of one host, under torchrun:

    torchrun --nproc-per-node 8 python/bench/ring_bench.py --seq 262144 --json ring.json

First a check at a small size (--check-seq): every rank runs the ring (and Ulysses, when the heads
divide by the world) forward and backward on its zigzag part of one seeded problem, the outputs
and gradients are gathered and compared with flashrs.attention on the whole sequence on one GPU.
Then, at --seq (the whole sequence; each rank holds seq / world), the median time of one
training step's attention (forward, then the gradients of q, k and v) and of the forward alone,
for

  ring          the ring over NCCL, each exchange posted before the kernels it overlaps;
  compute       the same kernels and merges on each rank with every exchange handing back its
                own tensors (fd._LoopbackRing): one rank's work on one GPU, no communication;
  exchanges     the ring's exchanges alone, each waited for at once (what overlap can hide);
  whole         (--whole) flashrs.attention on the whole sequence on rank 0's GPU alone;

the maxima over ranks, with the communication left exposed (ring - compute), the share of the
exchanges hidden behind the kernels (1 - exposed / exchanges), TFLOP/s per GPU, and, with --whole,
the speedup over one GPU. Causal (zigzag order) and full masks by default (--mask). Writes the
JSON (rank 0) with the machine, the options and the environment.

NVLink multicast stays off: NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and
NVSHMEM_DISABLE_NVLS=1 are set here before torch starts NCCL (whatever the caller's environment
says).
"""

import os

for _name, _value in (
    ("NCCL_NVLS_ENABLE", "0"),
    ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
    ("NVSHMEM_DISABLE_NVLS", "1"),
):
    os.environ[_name] = _value

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import flashrs  # noqa: E402

try:
    import flashrs.distributed as fd
except ImportError:  # an installed wheel older than the module: take it from this checkout
    flashrs.__path__.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "flashrs"))
    import flashrs.distributed as fd

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
# Largest error of the gathered ring against flashrs on the whole sequence, relative to the
# largest value of the latter (both in the low dtype: a few roundings apart).
TOLERANCE = {"bf16": 3e-2, "fp16": 5e-3}
ENV = ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seq", type=int, default=262144, help="whole sequence length of the timed problem")
    p.add_argument("--check-seq", type=int, default=8192, help="whole sequence length of the check")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    p.add_argument("--mask", choices=("both", "causal", "full"), default="both")
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--whole", action="store_true", help="also time the whole sequence on rank 0's GPU alone")
    p.add_argument("--skip-check", action="store_true")
    p.add_argument("--json", help="where rank 0 writes the results")
    return p.parse_args()


def setup():
    local = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local)
    device = torch.device("cuda", local)
    try:
        dist.init_process_group("nccl", device_id=device)
    except TypeError:  # a torch without device_id
        dist.init_process_group("nccl")
    return dist.get_rank(), dist.get_world_size(), device


def say(rank, *words):
    if rank == 0:
        print(*words, flush=True)


def rounded_up(n, step):
    return -(-n // step) * step


def relative_error(got, want):
    scale = want.float().abs().max().item()
    return (got.float() - want.float()).abs().max().item() / max(scale, 1e-30)


def seeded(shape, dtype, device, seed):
    """The same values on every rank (one seed, one generator kind, one GPU model)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    return torch.randn(shape, generator=gen, device=device).to(dtype)


def check(args, rank, world, device, causal):
    """The ring (and Ulysses) against flashrs on the whole sequence: largest relative errors."""
    dtype = DTYPES[args.dtype]
    seq = rounded_up(args.check_seq, 2 * world)
    b, h, h_kv, d = args.batch, args.heads, args.kv_heads, args.dim
    q = seeded((b, seq, h, d), dtype, device, 1)
    k = seeded((b, seq, h_kv, d), dtype, device, 2)
    v = seeded((b, seq, h_kv, d), dtype, device, 3)
    d_out = seeded((b, seq, h, d), dtype, device, 4)

    whole = [t.clone().requires_grad_() for t in (q, k, v)]
    out = flashrs.attention(*whole, causal=causal, layout="bshd")
    want = [out.detach(), *torch.autograd.grad(out, whole, d_out)]

    results = {"seq": seq}
    local = [fd.zigzag_split(t, rank, world, 1).requires_grad_() for t in (q, k, v)]
    out = fd.ring_attention(*local, causal=causal, layout="bshd")
    grads = torch.autograd.grad(out, local, fd.zigzag_split(d_out, rank, world, 1))
    got = [fd.zigzag_all_gather(t.detach().contiguous()) for t in (out, *grads)]
    results["ring"] = {n: relative_error(g, w) for n, g, w in zip(("out", "dq", "dk", "dv"), got, want)}

    if h % world == 0 and h_kv % world == 0:
        local = [t.chunk(world, dim=1)[rank].contiguous().requires_grad_() for t in (q, k, v)]
        out = fd.ulysses_attention(*local, causal=causal, layout="bshd")
        grads = torch.autograd.grad(out, local, d_out.chunk(world, dim=1)[rank].contiguous())
        got = []
        for t in (out, *grads):
            parts = [torch.empty_like(t) for _ in range(world)]
            dist.all_gather(parts, t.detach().contiguous())
            got.append(torch.cat(parts, dim=1))
        results["ulysses"] = {n: relative_error(g, w) for n, g, w in zip(("out", "dq", "dk", "dv"), got, want)}
    worst = max(e for scheme in ("ring", "ulysses") if scheme in results for e in results[scheme].values())
    results["worst"] = worst
    results["passed"] = worst <= TOLERANCE[args.dtype]
    return results


def median_ms(fn, iters, warmup):
    """The median over ``iters`` runs of ``fn`` (CUDA events on this rank's stream, every rank
    starting together), after ``warmup`` runs."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        dist.barrier()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def across_ranks(value, device):
    """(max, min) of a number over the ranks."""
    t = torch.tensor([value, -value], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t[0].item(), -t[1].item()


def exchanges(ring, k, v, backward):
    """The ring's exchanges without its kernels: R - 1 of the keys and values (the forward), and
    for the backward R - 1 again and R of the float32 gradient accumulators."""
    world = ring.world
    kv = (k, v)
    for _ in range(world - 1):
        kv = ring.send_recv(kv).wait()
    if backward:
        acc = (torch.zeros(k.shape, dtype=torch.float32, device=k.device),
               torch.zeros(v.shape, dtype=torch.float32, device=v.device))
        for step in range(world):
            if step + 1 < world:
                kv = ring.send_recv(kv).wait()
            acc = ring.send_recv(acc).wait()


def attention_flops(b, h, d, seq, causal):
    """Forward FLOPs of the whole problem: two matrix products over the visible pairs."""
    pairs = seq * (seq + 1) // 2 if causal else seq * seq
    return 4 * b * h * d * pairs


def bench(args, rank, world, device, causal):
    dtype = DTYPES[args.dtype]
    if args.seq % (2 * world):
        raise SystemExit(f"--seq {args.seq} must be a multiple of 2 * {world} (the zigzag chunks)")
    b, h, h_kv, d, local_seq = args.batch, args.heads, args.kv_heads, args.dim, args.seq // world
    gen = torch.Generator(device=device).manual_seed(100 + rank)
    rand = lambda heads: torch.randn((b, local_seq, heads, d), generator=gen, device=device).to(dtype)
    q, k, v = (t.requires_grad_() for t in (rand(h), rand(h_kv), rand(h_kv)))
    d_out = rand(h)
    ring = fd._NcclRing(None)
    loopback = fd._LoopbackRing(rank, world)

    def step_with(r):
        out, _ = fd._RingAttention.apply(q, k, v, r, causal, None, "bshd", False)
        torch.autograd.grad(out, (q, k, v), d_out)

    def forward_with(r):
        with torch.no_grad():
            fd._RingAttention.apply(q, k, v, r, causal, None, "bshd", False)

    def public_step():  # the public entry point, which builds its ring per call
        out = fd.ring_attention(q, k, v, causal=causal, layout="bshd")
        torch.autograd.grad(out, (q, k, v), d_out)

    torch.cuda.reset_peak_memory_stats(device)
    timings = {}
    for name, fn in (
        ("ring_step", lambda: step_with(ring)),
        ("ring_step_public", public_step),
        ("compute_step", lambda: step_with(loopback)),
        ("exchanges_step", lambda: exchanges(ring, k.detach(), v.detach(), True)),
        ("ring_forward", lambda: forward_with(ring)),
        ("compute_forward", lambda: forward_with(loopback)),
        ("exchanges_forward", lambda: exchanges(ring, k.detach(), v.detach(), False)),
    ):
        slowest, fastest = across_ranks(median_ms(fn, args.iters, args.warmup), device)
        timings[name] = {"ms_max_over_ranks": slowest, "ms_min_over_ranks": fastest}
        say(rank, f"  {name:18s} {slowest:10.3f} ms (fastest rank {fastest:.3f})")
    peak = across_ranks(torch.cuda.max_memory_allocated(device) / 2**30, device)[0]

    result = {"local_seq": local_seq, "timings": timings, "peak_gib_max_over_ranks": peak}
    for phase in ("step", "forward"):
        ring_ms = timings[f"ring_{phase}"]["ms_max_over_ranks"]
        compute_ms = timings[f"compute_{phase}"]["ms_max_over_ranks"]
        comm_ms = timings[f"exchanges_{phase}"]["ms_max_over_ranks"]
        exposed = ring_ms - compute_ms
        result[f"overlap_{phase}"] = {
            "exposed_ms": exposed,
            "exchanges_ms": comm_ms,
            "hidden_share": None if comm_ms <= 0 or world == 1 else max(0.0, min(1.0, 1.0 - exposed / comm_ms)),
            "ring_over_compute": ring_ms / compute_ms,
            "ms_per_ring_step": ring_ms / world,
        }
    flops = attention_flops(b, h, d, args.seq, causal)
    result["tflops_per_gpu"] = {
        "ring_step": 3.5 * flops / world / (timings["ring_step"]["ms_max_over_ranks"] * 1e9),
        "ring_forward": flops / world / (timings["ring_forward"]["ms_max_over_ranks"] * 1e9),
    }
    # One K/V exchange moves this many bytes out of each rank (and the gradients' twice as many).
    kv_bytes = 2 * k.numel() * k.element_size()
    exchange_ms = timings["exchanges_forward"]["ms_max_over_ranks"] / max(world - 1, 1)
    result["kv_exchange"] = {"bytes": kv_bytes, "gb_per_s": kv_bytes / (exchange_ms * 1e6) if world > 1 else None}
    return result


def whole_sequence(args, rank, device, causal, dtype):
    """flashrs.attention on the whole sequence on rank 0's GPU (the others wait at a barrier)."""
    if rank != 0:
        return None
    b, h, h_kv, d, seq = args.batch, args.heads, args.kv_heads, args.dim, args.seq
    gen = torch.Generator(device=device).manual_seed(7)
    rand = lambda heads: torch.randn((b, seq, heads, d), generator=gen, device=device).to(dtype)
    q, k, v = (t.requires_grad_() for t in (rand(h), rand(h_kv), rand(h_kv)))
    d_out = rand(h)

    def step():
        out = flashrs.attention(q, k, v, causal=causal, layout="bshd")
        torch.autograd.grad(out, (q, k, v), d_out)

    def forward():
        with torch.no_grad():
            flashrs.attention(q, k, v, causal=causal, layout="bshd")

    iters, warmup = max(1, min(args.iters, 3)), 1
    times = {}
    for name, fn in (("step_ms", step), ("forward_ms", forward)):
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        samples = []
        for _ in range(iters):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end))
        times[name] = statistics.median(samples)
        print(f"  whole {name:12s} {times[name]:10.3f} ms (one GPU)", flush=True)
    return times


def nccl_version():
    try:
        version = torch.cuda.nccl.version()
    except Exception:  # a build without NCCL's Python binding
        return None
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


def main():
    args = parse_args()
    rank, world, device = setup()
    masks = {"both": (True, False), "causal": (True,), "full": (False,)}[args.mask]
    report = {
        "world": world,
        "device": torch.cuda.get_device_name(device),
        "torch": torch.__version__,
        "nccl": nccl_version(),
        "options": vars(args),
        "env": {name: os.environ.get(name) for name in ENV},
        "checks": {},
        "bench": {},
    }
    say(rank, f"{world} x {report['device']}, torch {report['torch']}, NCCL {report['nccl']}")
    failed = False
    for causal in masks:
        label = "causal" if causal else "full"
        if not args.skip_check:
            result = check(args, rank, world, device, causal)
            report["checks"][label] = result
            failed |= not result["passed"]
            say(rank, f"check {label}: {'ok' if result['passed'] else 'FAILED'} "
                      f"(worst relative error {result['worst']:.2e}) {json.dumps(result)}")
        say(rank, f"bench {label}: seq {args.seq} (B {args.batch}, H {args.heads}/{args.kv_heads}, D {args.dim}, "
                  f"{args.dtype}), {args.seq // world} per rank")
        result = report["bench"][label] = bench(args, rank, world, device, causal)
        torch.cuda.empty_cache()  # the ring's tensors are gone with bench's frame
        if args.whole:
            whole = whole_sequence(args, rank, device, causal, DTYPES[args.dtype])
            torch.cuda.empty_cache()
            if whole is not None:
                result["whole"] = whole
                result["speedup_over_one_gpu"] = whole["step_ms"] / result["timings"]["ring_step"]["ms_max_over_ranks"]
            dist.barrier()  # the other ranks wait here for rank 0's single-GPU run
        say(rank, f"  overlap: {json.dumps(report['bench'][label]['overlap_step'])}")
    report["checks_passed"] = not failed
    if rank == 0 and args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
        print(f"wrote {args.json}")
    dist.barrier()
    dist.destroy_process_group()
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
