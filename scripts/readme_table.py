#!/usr/bin/env python3
"""Prints the README's results table (markdown) from a `host bench --json` file that timed the
peers (torch, fa3): per shape the fastest of our timed kernels, its time and TFLOP/s, each peer's
time, the ratios, the 95% interval against FA3, and the library's own pick (what `Gpu::choose`
runs when no kernel is named) with its speed relative to cuDNN in the same run.

usage: readme_table.py evidence/forward/bench_h100.json
"""
import json
import sys

bench = json.load(open(sys.argv[1]))
peer_us = {}
ours_us = {}
tflops = {}
for r in bench["results"]:
    key = (tuple(r["shape"]), r["causal"])
    if r["peer"]:
        peer_us[key + (r["kernel"],)] = r["p50_us"]
    else:
        ours_us[key + (r["kernel"],)] = r["p50_us"]
        tflops[key + (r["kernel"],)] = r["tflops"]

print("| shape (B,H,S,D) | causal | ours (fastest variant) | ours us | TFLOP/s | FA2 us | cuDNN us | FA3 us "
      "| vs FA2 | vs cuDNN | vs FA3 [95% CI] | library's pick, vs cuDNN |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for s in bench["summary"]:
    key = (tuple(s["shape"]), s["causal"])
    fa2, cudnn = peer_us.get(key + ("torch_flash",)), peer_us.get(key + ("torch_cudnn",))
    fa3 = s.get("fa3_us")
    us = s["ours_us"]
    ratio = lambda peer: f"{peer / us:.2f}x" if peer else "-"
    ci = s.get("ci95_vs_fa3") or [None, None]
    vs_fa3 = f"{fa3 / us:.2f}x [{ci[0]:.3f}, {ci[1]:.3f}]" if fa3 and ci[0] else "-"
    # The pick's own time in this run, against the same run's cuDNN (src/dispatch.rs's test of the
    # README recomputes it this way).
    source = " (tuned)" if s.get("dispatch_source") == "tuned" else ""
    pick_us = ours_us.get(key + (s["dispatch"],))
    if pick_us and cudnn:
        pick = f"`{s['dispatch']}`{source}, {cudnn / pick_us:.2f}x"
    else:
        pick = f"`{s['dispatch']}`{source} (not timed)"
    fmt = lambda t: f"{t:.2f}" if t else "-"
    print(f"| {key[0]} | {'yes' if key[1] else 'no'} | `{s['ours']}` | {us:.2f} | "
          f"{tflops.get(key + (s['ours'],), 0):.0f} | {fmt(fa2)} | {fmt(cudnn)} | {fmt(fa3)} | "
          f"{ratio(fa2)} | {ratio(cudnn)} | {vs_fa3} | {pick} |")
