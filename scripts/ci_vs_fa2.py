#!/usr/bin/env python3
"""95% bootstrap interval of our fastest kernel's speedup over torch's flash backend (FA2), per
shape, from the per-replay samples of a `host bench --json` report (the same resampling as the
bench summary's interval against the best peer: 10,000 resamples of both sample sets, ratio of
medians). Usage: python3 scripts/ci_vs_fa2.py evidence/forward/bench_h100.json > evidence/forward/ci_vs_fa2_h100.json"""
import json, random, statistics, sys

report = json.load(open(sys.argv[1]))
rng = random.Random(0x5EED)
rows = report["results"]
out = []
for s in report["summary"]:
    if s["ours"] is None:  # a head dim only the peers ran
        continue
    key = (tuple(s["shape"]), s["seq_k"], s["causal"])
    case = [r for r in rows if (tuple(r["shape"]), r["seq_k"], r["causal"]) == key]
    ours = next(r for r in case if r["kernel"] == s["ours"])["samples_us"]
    fa2 = next((r for r in case if r["kernel"] == "torch_flash"), None)
    if fa2 is None:
        continue
    fa2 = fa2["samples_us"]
    ratios = sorted(
        statistics.median(rng.choices(fa2, k=len(fa2))) / statistics.median(rng.choices(ours, k=len(ours)))
        for _ in range(10_000)
    )
    out.append({
        "shape": s["shape"], "seq_k": s["seq_k"], "causal": s["causal"], "ours": s["ours"],
        "speedup_vs_fa2": statistics.median(fa2) / statistics.median(ours),
        "ci95": [ratios[249], ratios[9749]],
    })
json.dump(out, sys.stdout, indent=1)
