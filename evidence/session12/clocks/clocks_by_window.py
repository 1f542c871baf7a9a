#!/usr/bin/env python3
"""Tabulates nvidia-smi's 50 ms samples (clocks.csv) inside each bench window (windows.txt):
SM clock rounded down to 15 MHz, with the clock-event bits (04 = software power cap, 00 = none,
01 = idle). usage: clocks_by_window.py (in this folder)"""
import collections
import csv
import datetime

samples = []
for r in list(csv.reader(open("clocks.csv")))[1:]:
    stamp = datetime.datetime.strptime(r[0].strip(), "%Y/%m/%d %H:%M:%S.%f")
    t = stamp.replace(tzinfo=datetime.timezone.utc).timestamp()
    samples.append((t, int(r[1]), r[5].strip()[-2:]))
marks = [line.split() for line in open("windows.txt")]
for start, end in zip(marks[0::2], marks[1::2]):
    a, b = float(start[0]), float(end[0])
    counts = collections.Counter((mhz // 15 * 15, bits) for t, mhz, bits in samples if a <= t <= b)
    print(f"{start[2][:36]:36} rep {start[3]}:", ", ".join(f"{m} MHz/{bits} x{n}" for (m, bits), n in sorted(counts.items())))
