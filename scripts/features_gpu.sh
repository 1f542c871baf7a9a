#!/usr/bin/env bash
# The GPU round of the model features (issue #63) on a GPU machine without Rust, in one call of
# under ten minutes: the Rust GPU tests of the masks, the sinks and the padded head dims; the
# Python tests of the same (sinks, window and softcap, head dims); the forward timings of the
# features and head dims beside flash-attn-4 and cuDNN (python/bench/bench_window.py, when
# flash-attn-4 is importable); and the multi-token decode shapes (32 query heads on 8 KV heads,
# S_k 8192, B 32, 1 to 64 new tokens) through `host bench` with the dispatch's pick beside the
# 16-row `flash_decode` named, which decides whether decode should keep more than 32 packed rows
# per KV head. Needs `bash scripts/stage_gpu.sh` (.gpu/, with `xz` of .gpu/host and
# .gpu/tests/*) and the wheel in .gpuy/ (`scripts/stage_python.sh`); STAGED and WHEELS name other
# folders of the same layout (a slimmer copy that fits one call). FA4_PYTHONPATH adds
# flash-attn-4 to the Python path for bench_window.py (without it that bench times flashrs and
# cuDNN alone). Logs and JSON land in $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-./gpu-out}; mkdir -p "$OUT"
LOG="$OUT/features.log"; : > "$LOG"
G=${STAGED:-.gpu}; W=${WHEELS:-.gpuy}
run() { echo "+ $*" | tee -a "$LOG"; local t0=$(date +%s); "$@" 2>&1 | tee -a "$LOG"; local rc=${PIPESTATUS[0]}; echo "[rc=$rc, $(( $(date +%s) - t0 )) s]" | tee -a "$LOG"; return $rc; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee -a "$LOG"
for f in $G/host.xz $G/tests/*.xz $G/cubin/*.xz; do [ -f "$f" ] && xz -d -k -f "$f"; done
export FLASHRS_CUBIN_DIR="$PWD/$G/cubin"
for t in head_dims_gpu sinks_gpu masks_gpu; do
  run timeout 240 $G/tests/$t --include-ignored --test-threads=1 > "$OUT/tests_$t.log" 2>&1
  tail -3 "$OUT/tests_$t.log" | tee -a "$LOG"
  grep -E "FAILED|panicked" "$OUT/tests_$t.log" | head -5 | tee -a "$LOG"
done
# Multi-token decode: the pick, and flash_decode's 16-row variant over as many row blocks as the
# packed rows take (named, so past the dispatch's 32-row limit).
shapes=""
for t in 1 8 16 32 64; do shapes="$shapes --shape 32,32,$t,8192,128"; done
run timeout 150 $G/host bench $shapes --heads-kv 8 --causal --dtype bf16 --no-peers \
  --kernel flash_decode_m16_n128_w8_s3_mbarrier --json "$OUT/bench_multi_token_decode.json" \
  > "$OUT/bench_multi_token_decode.log" 2>&1
tail -20 "$OUT/bench_multi_token_decode.log" | tee -a "$LOG"
site=$(mktemp -d)
python3 -m pip install -q --no-deps --no-index --target "$site" $W/flashrs-*.whl
export PYTHONPATH="$site${FA4_PYTHONPATH:+:$FA4_PYTHONPATH}"
export FLASHRS_CUBIN_DIR="$PWD/$G/cubin"  # the wheel embeds the same PTX
(cd python/tests && run timeout 200 python3 -m unittest test_head_dims_gpu test_sinks_gpu test_window_softcap_gpu) \
  > "$OUT/python_features.log" 2>&1
grep -E "^(FAIL|ERROR)|Ran |OK|FAILED" "$OUT/python_features.log" | head -20 | tee -a "$LOG"
(cd python/bench && run timeout 150 python3 bench_window.py --json "$OUT/bench_features.json") \
  > "$OUT/bench_features.log" 2>&1
tail -30 "$OUT/bench_features.log" | tee -a "$LOG"
echo done | tee -a "$LOG"
