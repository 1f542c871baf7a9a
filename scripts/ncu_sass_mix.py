#!/usr/bin/env python3
"""Instruction mix of kernels from Nsight Compute's source page, SASS view, exported as CSV
(`ncu -i REPORT --page source --csv --print-source sass > FILE`): warp instructions executed per
opcode, the share of each, and where the fixed-latency ("wait") stalls sit. Used to compare
flash_ws with FlashAttention-3's kernel, which found the descriptors rebuilt per product
(docs/kernels/flash_ws.md, the products).

usage: ncu_sass_mix.py NAME=FILE [NAME=FILE ...]
"""
import collections
import csv
import re
import sys


def load(path):
    rows = list(csv.reader(open(path)))
    header = rows[1]  # row 0 names the kernel
    return [dict(zip(header, r)) for r in rows[2:] if len(r) > 5]


def opcode(source):
    source = re.sub(r"^@!?U?P\w+\s+", "", source.strip())  # drop a predicate
    return source.split()[0].split(".")[0] if source else "?"


for arg in sys.argv[1:]:
    name, path = arg.split("=", 1)
    executed, waits = collections.Counter(), collections.Counter()
    for row in load(path):
        op = opcode(row["Source"])
        executed[op] += int(row["Instructions Executed"] or 0)
        waits[op] += float(row.get("stall_wait") or 0)
    total = sum(executed.values())
    print(f"{name}: {total} warp instructions executed")
    for op, n in executed.most_common(24):
        print(f"   {op:12s} {n:>12d} {100 * n / total:5.1f}%   wait-stall samples {int(waits[op]):>6d}")
