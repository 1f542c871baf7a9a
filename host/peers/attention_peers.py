"""Times the peers of `host bench` the way it times its own kernels: CUDA graphs of back-to-back
calls, CUDA events around each replay, per-call samples. The peers: PyTorch's SDPA backends
(flash = FlashAttention-2, cuDNN, memory-efficient) and, when `flash_attn.cute` imports (PyPI's
`flash-attn-4`, which runs the FlashAttention-3 algorithm on sm90), `fa3`.

Embedded in the `host` binary and run as `python3 - SPEC_JSON` (spec on argv, script on stdin);
prints one JSON object on stdout. Also `--check IN_DIR OUT_DIR` for `verify --peer torch`: reads
q.npy, k.npy, v.npy (+ meta.json) and writes torch's float32 SDPA output to OUT_DIR/out.npy.
"""
import json
import math
import os
import sys
import time

# Anything the libraries print (a JIT compiler's chatter included, even from C) goes to stderr;
# stdout carries only the one JSON object.
_json_out = os.fdopen(os.dup(1), "w")
sys.stdout.flush()
os.dup2(2, 1)


def emit(value):
    _json_out.write(json.dumps(value) + "\n")
    _json_out.flush()


def fail(message):
    emit({"error": message})
    sys.exit(0)


try:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
except Exception as exc:  # no torch, or a torch without the SDPA backend API
    fail(f"torch not importable: {exc}")

TORCH_BACKENDS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
}
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def load_fa3():
    """(flash_attn_func, version) from flash-attn-4's CuTe-DSL interface; raises when absent."""
    from flash_attn.cute.interface import flash_attn_func

    try:
        from importlib.metadata import version

        return flash_attn_func, version("flash-attn-4")
    except Exception:
        import flash_attn

        return flash_attn_func, getattr(flash_attn, "__version__", "unknown version")


def sdpa_call(backend, q, k, v, causal):
    # Grouped-query attention (fewer K/V heads) through SDPA's own flag, which leaves K and V
    # unexpanded for the backends that support it.
    gqa = q.shape[1] != k.shape[1]

    def call():
        with sdpa_kernel([TORCH_BACKENDS[backend]]):
            if gqa:
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    return call


def fa3_call(flash_attn_func, q, k, v, causal):
    """q, k, v as [B, S, H, D]; the scale is 1/sqrt(D), as for the other peers and our kernels."""
    scale = q.shape[-1] ** -0.5

    def call():
        out = flash_attn_func(q, k, v, causal=causal, softmax_scale=scale)
        # Some versions return (out, lse).
        return out[0] if isinstance(out, tuple) else out

    return call


def eager_call_us(call):
    """Microseconds of one eager call, by CUDA events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    call()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000.0


def calls_per_graph(single_us, most):
    """About a millisecond of work per replay."""
    return max(1, min(most, int(1000.0 / max(single_us, 1e-3))))


def warmup_replays(count, min_ms, calls, call_us):
    """At least `count` replays and at least `min_ms` of work (as the host's `warmup_replays`):
    each call is timed in the clock and power state its own sustained load brings the GPU to."""
    replay_us = calls * call_us
    if not replay_us > 0 or not min_ms > 0:
        return count
    return max(count, int(math.ceil(min(min_ms * 1000.0 / replay_us, 1e7))))


def capture(call, n):
    # Warm-up on a side stream first, as torch's graph capture asks (lazy workspaces, handles).
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            call()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(n):
            call()
    return graph


def time_events(launch, n, warmup, replays):
    """Per-call microseconds of `replays` timed runs of `launch`, which makes `n` calls, and the
    wall-clock window (Unix seconds) of the timed runs, for the host to look up their clocks."""
    for _ in range(warmup):
        launch()
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(replays)]
    began = time.time()
    for start, end in events:
        start.record()
        launch()
        end.record()
    torch.cuda.synchronize()
    window = [began, time.time()]
    return [s.elapsed_time(e) * 1000.0 / n for s, e in events], window


def time_calls(call, shape_check, calls, warmup, warmup_ms, replays):
    """Times `call` by graph replay; where the capture fails, by CUDA events around `n`
    back-to-back eager calls (which then include any host overhead the GPU waits for)."""
    out = call()  # raises if unsupported; the first call also JIT-compiles (fa3)
    torch.cuda.synchronize()
    if tuple(out.shape) != shape_check:
        raise RuntimeError(f"output shape {tuple(out.shape)}, expected {shape_check}")
    del out
    single_us = eager_call_us(call)
    n = calls_per_graph(single_us, calls)
    warmup = warmup_replays(warmup, warmup_ms, n, single_us)
    try:
        graph = capture(call, n)
    except Exception as exc:
        torch.cuda.synchronize()

        def back_to_back():
            for _ in range(n):
                call()

        note = f"graph capture failed ({first_line(exc)}): CUDA events around back-to-back calls"
        samples, window = time_events(back_to_back, n, warmup, replays)
        return "cuda_events_back_to_back", note, n, samples, window
    samples, window = time_events(graph.replay, n, warmup, replays)
    del graph
    return "cuda_graph_replay", None, n, samples, window


def first_line(exc):
    return str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__


def bench(spec):
    if not torch.cuda.is_available():
        fail("torch sees no CUDA device")
    dtype = DTYPES[spec["dtype"]]
    backends = list(spec["backends"])
    report = {
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "device": torch.cuda.get_device_name(),
    }
    fa3 = None
    if "fa3" in backends:
        try:
            fa3, report["fa3"] = load_fa3()
        except Exception as exc:
            report["fa3_error"] = f"flash_attn.cute not importable: {first_line(exc)}"
            backends.remove("fa3")
    results = []
    for shape in spec["shapes"]:
        # [B, H, S_q, S_k, D] and, from hosts that send it, H_kv.
        b, h, sq, sk, d = shape[:5]
        hkv = shape[5] if len(shape) > 5 else h
        gen = torch.Generator(device="cuda").manual_seed(0)
        q = torch.randn(b, h, sq, d, device="cuda", dtype=dtype, generator=gen)
        k = torch.randn(b, hkv, sk, d, device="cuda", dtype=dtype, generator=gen)
        v = torch.randn(b, hkv, sk, d, device="cuda", dtype=dtype, generator=gen)
        for backend in backends:
            row = {
                "backend": backend,
                "shape": [b, h, sq, d],
                "seq_k": sk,
                "heads_kv": hkv,
                "causal": spec["causal"],
            }
            if backend == "fa3":
                # [B, S, H, D], contiguous, as flash_attn takes them; its causal mask is aligned
                # bottom-right as ours is, so S_q != S_k compares too.
                bshd = [t.transpose(1, 2).contiguous() for t in (q, k, v)]
                call, expected = fa3_call(fa3, *bshd, spec["causal"]), (b, sq, h, d)
            elif spec["causal"] and sq != sk:
                row["error"] = "torch aligns causal masks top-left; not comparable when S_q != S_k"
                results.append(row)
                continue
            else:
                call, expected = sdpa_call(backend, q, k, v, spec["causal"]), (b, h, sq, d)
            try:
                method, note, n, samples, window = time_calls(
                    call, expected, spec["calls"], spec["warmup"], spec.get("warmup_ms", 0.0), spec["replays"]
                )
                row.update(method=method, calls_per_graph=n, samples_us=samples, window=window)
                if note:
                    row["method_note"] = note
            except Exception as exc:
                row["error"] = first_line(exc)
            results.append(row)
            call = None
            torch.cuda.empty_cache()
    report["results"] = results
    return report


def check(in_dir, out_dir):
    import numpy as np

    meta = json.load(open(f"{in_dir}/meta.json"))
    q, k, v = (torch.from_numpy(np.load(f"{in_dir}/{n}.npy")).float().cuda() for n in "qkv")
    with sdpa_kernel([SDPBackend.MATH]):
        gqa = q.shape[1] != k.shape[1]
        out = F.scaled_dot_product_attention(q, k, v, is_causal=meta["causal"], scale=meta["scale"], enable_gqa=gqa)
    np.save(f"{out_dir}/out.npy", out.cpu().numpy().astype(np.float32))
    emit({"torch": torch.__version__, "ok": True})


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--check":
        check(sys.argv[2], sys.argv[3])
    else:
        emit(bench(json.loads(sys.argv[1])))
