#!/usr/bin/env bash
# Nsight Compute profile of one training step's attention (forward + backward,
# python/bench/profile_step.py) for each contestant named, on a GPU machine with the wheel on
# PYTHONPATH (and flash-attn-4's path for fa4): per contestant the report, its details page and
# the per-instruction (SASS) stall samples of every kernel, compressed, into $OUT.
#   SHAPE=2,16,16,4096,128 CAUSAL=--causal bash scripts/profile_step.sh flashrs fa4
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-./gpu-out}
shape=${SHAPE:-2,16,16,4096,128}
mkdir -p "$OUT"
status=0
for who in "$@"; do
  name="step_${who}_${shape//,/x}${CAUSAL:+_causal}"
  ncu --profile-from-start off --clock-control none --set full --import-source no -f \
    -o "$OUT/$name" python3 python/bench/profile_step.py --who "$who" --shape "$shape" ${CAUSAL:-} \
    > "$OUT/$name.log" 2>&1 || { status=1; tail -5 "$OUT/$name.log"; continue; }
  ncu --import "$OUT/$name.ncu-rep" --page details > "$OUT/$name.details.txt" 2>&1
  ncu --import "$OUT/$name.ncu-rep" --page source --csv --print-source sass > "$OUT/$name.sass.csv" 2>&1
  xz -9 -f "$OUT/$name.sass.csv" "$OUT/$name.ncu-rep"
  grep -E "^  [a-zA-Z_].*\(|Duration|Compute \(SM\) Throughput|Memory Throughput" "$OUT/$name.details.txt" | head -40
done
exit $status
