#!/usr/bin/env bash
# One full round on a GPU machine, from binaries built elsewhere (scripts/stage_gpu.sh puts them
# in .gpu/): device facts, the GPU tests, verify (with the torch cross-check), bench of the standard
# shapes and (2,16,4096,256) against the peers, torch's SDPA and FA3 (with plot), a gate that must fail, micro + tune for the two reference
# shapes, and an ncu profile of the best kernel. JSON, CSV, SVG and one log land in $OUT
# (default ./gpu-out); the device tool brings back 8 files, so callers pack $OUT into one archive.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=.gpu
OUT=${OUT:-./gpu-out}
PROFILE_KERNEL=${PROFILE_KERNEL:-flash_ws_m128_n176_s2_pp_ov_mbarrier}
mkdir -p "$OUT"
LOG="$OUT/round.log"
: >"$LOG"
run() { echo "+ $*" | tee -a "$LOG"; "$@" 2>&1 | tee -a "$LOG"; return "${PIPESTATUS[0]}"; }

# cuBLAS for the `cublas` peer: the system's, else the one torch's wheels ship.
torch_libs=$(python3 -c 'import os, nvidia.cublas as c; print(os.path.join(list(c.__path__)[0], "lib"))' 2>/dev/null || true)
[ -n "$torch_libs" ] && export LD_LIBRARY_PATH="$torch_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# The FlashAttention-3 peer (flash-attn-4), where ../shared/peers/fa4's install.sh put it
# (README, "Running on a GPU machine"); without it bench notes the peer missing and goes on.
[ -f /tmp/fa4/pythonpath ] && export PYTHONPATH="$(cat /tmp/fa4/pythonpath)${PYTHONPATH:+:$PYTHONPATH}"

# Kernels ptxas assembled on the build machine (scripts/stage_gpu.sh ran `host cubin`): no
# driver JIT, which costs about 40 s in every process that loads the sm_90a module.
[ -f "$BIN/cubin/kernels_sm_90a.cubin" ] && export FLASHRS_CUBIN_DIR="$BIN/cubin"

status=0
run nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
for test in "$BIN"/tests/*; do
  run "$test" --include-ignored --test-threads=1 || status=1
done
run bash scripts/attend_check.sh || status=1
run "$BIN/host" verify --peer torch --json "$OUT/verify_h100.json" ${VERIFY_ARGS:-} || status=1
run "$BIN/host" verify --shapes small,odd --heads-kv 1 --lse --layout bhsd,bshd --peer torch --json "$OUT/verify_mqa_lse_h100.json" || status=1
run "$BIN/host" bench --shapes decode --kernel flash_decode_m16_n128_w8_s3_light --kernel flash_decode_m16_n64_w4_s4_light --kernel flash_ws_m128_n128_s2_ov_mbarrier --kernel flash_ws_m128_n176_s2_pp_ov_mbarrier --peers torch --json "$OUT/bench_decode_h100.json" ${BENCH_ARGS:-} || status=1
[ -n "${SKIP_BENCH:-}" ] && { echo "round finished with status $status (bench skipped)" | tee -a "$LOG"; exit $status; }
run "$BIN/host" bench --shapes std --shape 2,16,4096,256 --peers torch,fa3 --plot "$OUT/bench_h100.svg" --json "$OUT/bench_h100.json" ${BENCH_ARGS:-} || status=1
run "$BIN/host" bench --shapes std --shape 2,16,4096,256 --dtype bf16 --peers torch,fa3 --json "$OUT/bench_bf16_h100.json" ${BENCH_ARGS:-} || status=1
# The gate must fail on an unreachable ratio (exit 1), and say which shapes fail.
if run "$BIN/host" bench --shape 2,8,512,64 --kernel "$PROFILE_KERNEL" --peers torch --iters 20 --gate "$PROFILE_KERNEL:1000"; then
  echo "gate check: FAILED (an unreachable gate passed)" | tee -a "$LOG"; status=1
else
  echo "gate check: ok (unreachable gate exited non-zero)" | tee -a "$LOG"
fi
# Configuration search: micro's ranking, then tune seeded by it, for the two reference shapes;
# the winners go into the tuned table (a copy, so the round never edits the checkout).
# Both time each variant's barrier-counting twin, which only a lab build has (FLASHRS_VARIANTS=all
# or naming variants, at `scripts/stage_gpu.sh` time); a default build skips them.
cp tuned/h100.json "$OUT/tuned_h100.json"
search_shapes="2,16,4096,128 2,8,512,64"
if ! "$BIN/host" list 2>/dev/null | grep -q "^[0-9]* variants, .* ([1-9][0-9]* variants with barrier-counting twins)"; then
  echo "micro and tune: skipped (this build has no barrier-counting twins: stage with FLASHRS_VARIANTS=all)" | tee -a "$LOG"
  search_shapes=""
fi
for shape in $search_shapes; do
  tag=$([ "$shape" = 2,16,4096,128 ] && echo "" || echo "_${shape//,/x}")
  run "$BIN/host" micro --shape "$shape" --csv "$OUT/micro_log$tag.csv" --best "$OUT/micro_best$tag.json" || status=1
  run "$BIN/host" tune --shape "$shape" --budget 40 --peers torch --log "$OUT/evo_log$tag.csv" \
    --json "$OUT/evo_best$tag.json" --save --table "$OUT/tuned_h100.json" || status=1
done
run "$BIN/host" profile --kernel "$PROFILE_KERNEL" --shape 2,16,4096,128 --out "$OUT/ncu_$PROFILE_KERNEL.json" || status=1
echo "round finished with status $status" | tee -a "$LOG"
exit $status
