#!/usr/bin/env bash
# The quick GPU check of a change to the library or the Python package, on a GPU machine without
# Rust: the GPU test binaries (tests/gpu.rs, api_gpu.rs, backward_gpu.rs, fp8_gpu.rs, masks_gpu.rs,
# sinks_gpu.rs, head_dims_gpu.rs), then the
# wheel's CPU and GPU tests (python/tests) and python/bench/host_cost.py. Needs, from this
# checkout: `bash scripts/stage_gpu.sh` (then `xz` of .gpu/host and .gpu/tests/* to fit a call)
# and the wheel in .gpuy/ (`scripts/stage_python.sh`, cubins in .gpuy/cubin). MEMCHECK=1 adds
# compute-sanitizer's memcheck of the strided-views test. Logs and JSON land in $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-./gpu-out}; mkdir -p "$OUT"
LOG="$OUT/round.log"; : > "$LOG"
run() { echo "+ $*" | tee -a "$LOG"; local t0=$(date +%s); "$@" 2>&1 | tee -a "$LOG"; local rc=${PIPESTATUS[0]}; echo "[rc=$rc, $(( $(date +%s) - t0 )) s]" | tee -a "$LOG"; return $rc; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee -a "$LOG"
for f in .gpu/host.xz .gpu/tests/*.xz; do [ -f "$f" ] && xz -d -k -f "$f"; done
export FLASHRS_CUBIN_DIR="$PWD/.gpu/cubin"
for t in api_gpu gpu backward_gpu fp8_gpu masks_gpu sinks_gpu head_dims_gpu; do
  run timeout 200 .gpu/tests/$t --include-ignored --test-threads=1 > "$OUT/tests_$t.log" 2>&1
  tail -3 "$OUT/tests_$t.log" | tee -a "$LOG"
  grep -E "FAILED|panicked" "$OUT/tests_$t.log" | head -5 | tee -a "$LOG"
done
site=$(mktemp -d)
python3 -m pip install -q --no-deps --no-index --target "$site" .gpuy/flashrs-*.whl
export PYTHONPATH="$site"
export FLASHRS_CUBIN_DIR="$PWD/.gpuy/cubin"
run timeout 240 python3 -m unittest discover -s python/tests -t python/tests > "$OUT/python_tests.log" 2>&1
grep -E "^(FAIL|ERROR)|Error|Ran |OK|FAILED" "$OUT/python_tests.log" | head -20 | tee -a "$LOG"
run timeout 120 python3 python/bench/host_cost.py --json "$OUT/host_cost.json" --calls 2000 2>&1 | tail -24
if [ -n "${MEMCHECK:-}" ]; then
  export FLASHRS_CUBIN_DIR="$PWD/.gpu/cubin"
  run timeout 150 compute-sanitizer --tool memcheck --error-exitcode 1 .gpu/tests/api_gpu --include-ignored \
    --test-threads=1 mixed_layouts_and_strided_views_match_the_reference > "$OUT/memcheck_mixed.log" 2>&1
  tail -4 "$OUT/memcheck_mixed.log" | tee -a "$LOG"
fi
echo done | tee -a "$LOG"
