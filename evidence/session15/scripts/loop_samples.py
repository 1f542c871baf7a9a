#!/usr/bin/env python3
"""Where a kernel's warp-stall samples and executed instructions sit, from Nsight Compute's SASS
source page (`ncu -i REPORT --page source --csv --print-source sass > FILE`, in `call5/`, xz'd):
instructions executed at least 100,000 times (the KV loop at (1,16,8192,128)), 2,000 or more
(per item), fewer; the top instructions by samples; and, for two files, which opcodes the first
kernel's loop has more of than the second's (instructions executed exactly LOOP_COUNT times).

usage: loop_samples.py [--loop-count N] FILE [FILE]
"""
import collections
import csv
import lzma
import re
import sys


def load(path):
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt") as f:
        rows = list(csv.reader(f))
    header = rows[1]  # row 0 names the kernel
    return [dict(zip(header, r)) for r in rows[2:] if len(r) > 5]


def opcode(source):
    source = re.sub(r"^@!?U?P\w+\s+", "", source.strip())
    return source.split()[0].split(".")[0] if source else "?"


args = sys.argv[1:]
loop_count = 516096
if args[:1] == ["--loop-count"]:
    loop_count, args = int(args[1]), args[2:]
mixes = []
for path in args:
    rows = load(path)
    total = sum(int(r["Warp Stall Sampling (All Samples)"]) for r in rows)
    samples, executed = collections.Counter(), collections.Counter()
    mix = collections.Counter()
    for r in rows:
        n, s = int(r["Instructions Executed"]), int(r["Warp Stall Sampling (All Samples)"])
        bucket = "loop" if n >= 100_000 else ("item" if n >= 2_000 else "rare")
        samples[bucket] += s
        executed[bucket] += n
        if n == loop_count:
            mix[opcode(r["Source"])] += 1
    mixes.append(mix)
    print(f"{path}: {total} samples, {sum(executed.values())} warp instructions")
    for bucket in ("loop", "item", "rare"):
        print(f"  {bucket:5} {samples[bucket]:7} samples ({100 * samples[bucket] / total:.1f}%), {executed[bucket]} executed")
    print(f"  {sum(mix.values())} static instructions executed {loop_count} times")
    for r in sorted(rows, key=lambda r: -int(r["Warp Stall Sampling (All Samples)"]))[:8]:
        print(f"    {r['Warp Stall Sampling (All Samples)']:>6} {r['Instructions Executed']:>9} {r['Source'].strip()[:60]}")
if len(mixes) == 2:
    a, b = mixes
    print("opcode: first, second (the loop's static instructions)")
    for op in sorted(set(a) | set(b), key=lambda op: b[op] - a[op]):
        if a[op] != b[op]:
            print(f"  {op:10} {a[op]:4} {b[op]:4}")
