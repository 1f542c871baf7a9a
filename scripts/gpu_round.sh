#!/usr/bin/env bash
# One full round on a GPU machine, from binaries built elsewhere (scripts/stage_gpu.sh puts them
# in .gpu/): device facts, the GPU tests, verify, bench (non-causal and causal). Everything lands in
# $OUT (default ./gpu-out): JSON for evidence/, and one log.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=.gpu
OUT=${OUT:-./gpu-out}
mkdir -p "$OUT"
LOG="$OUT/round.log"
: >"$LOG"
run() { echo "+ $*" | tee -a "$LOG"; "$@" 2>&1 | tee -a "$LOG"; return "${PIPESTATUS[0]}"; }

status=0
run nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
for test in "$BIN"/tests/*; do
  run "$test" --include-ignored --test-threads=1 || status=1
done
run "$BIN/host" verify --json "$OUT/verify_h100.json" ${VERIFY_ARGS:-} || status=1
run "$BIN/host" bench --shapes small,mission,long,large --json "$OUT/bench_h100.json" ${BENCH_ARGS:-} || status=1
run "$BIN/host" bench --shapes small,mission,long,large --causal --json "$OUT/bench_causal_h100.json" ${BENCH_ARGS:-} || status=1
echo "round finished with status $status" | tee -a "$LOG"
exit $status
