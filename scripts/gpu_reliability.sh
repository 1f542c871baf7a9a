#!/usr/bin/env bash
# The reliability round on a GPU machine (binaries from scripts/stage_gpu.sh): compute-sanitizer's
# four tools over `verify --quick`, 1,000 random problems, bit-identical outputs over 250 runs,
# more heads than the grid's y holds, and scores of several thousand (large logits). Everything lands in $OUT (default ./gpu-out).
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=.gpu
OUT=${OUT:-./gpu-out}
mkdir -p "$OUT"
LOG="$OUT/reliability.log"
: >"$LOG"
run() { echo "+ $*" | tee -a "$LOG"; "$@" 2>&1 | tee -a "$LOG"; return "${PIPESTATUS[0]}"; }
status=0
run "$BIN/host" verify --random 1000 --seed 2026 --json "$OUT/verify_random_h100.json" || status=1
run "$BIN/host" verify --shapes small,odd,edge --repeat 250 --seed 5 --json "$OUT/verify_repeat_h100.json" || status=1
# B*H = 70,000: more query heads than the grid's y dimension holds (they spill into z).
run "$BIN/host" verify --shape 1000,70,16,64 --dtype f16 --seed 3 --json "$OUT/verify_grid_h100.json" || status=1
run "$BIN/host" verify --shapes odd,edge,long --logit-scale 40 --seed 9 --json "$OUT/verify_large_logits_h100.json" || status=1
OUT="$OUT" BIN="$BIN/host" run bash scripts/sanitize.sh || status=1
echo "reliability round finished with status $status" | tee -a "$LOG"
exit $status
