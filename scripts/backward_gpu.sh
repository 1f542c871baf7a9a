#!/usr/bin/env bash
# The backward pass's evidence round on a GPU machine (no Rust there), from what
# scripts/stage_gpu.sh (.gpu/: host, test binaries, cubin) and scripts/stage_python.sh (.gpuy/: the
# wheel and its cubin) staged: the Rust backward tests, `verify --backward` (both layouts, both
# masks, deterministic bits over FLASHRS_REPEATS runs), compute-sanitizer (memcheck, racecheck,
# synccheck) on the raw-path test, the autograd tests, bench_backward beside cuDNN, FA2 and
# flash-attn-4 (when ../shared/peers/fa4's install.sh put it in /tmp/fa4), and the training check.
# Files land in $OUT (default ./gpu-out), tagged with FLASHRS_GPU_TAG (default h200); the device
# tool brings back 8 files, so the logs go into one archive beside the three JSON files.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-./gpu-out}
tag=${FLASHRS_GPU_TAG:-h200}
repeats=${FLASHRS_REPEATS:-100}
logs=$(mktemp -d)
mkdir -p "$OUT"
run() { echo "+ $*" | tee -a "$logs/round.log"; "$@" 2>&1 | tee -a "$logs/round.log"; return "${PIPESTATUS[0]}"; }
status=0

chmod +x .gpu/host .gpu/tests/* 2>/dev/null
[ -f .gpu/cubin/kernels_sm_90a.cubin ] && export FLASHRS_CUBIN_DIR="$PWD/.gpu/cubin"
run nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
run env FLASHRS_REPEATS="$repeats" .gpu/tests/backward_gpu --ignored --test-threads 1 --nocapture \
  >"$logs/backward_gpu_$tag.log" || status=1
run .gpu/host verify --backward --layout bhsd,bshd --repeat "$repeats" \
  --json "$OUT/verify_backward_$tag.json" || status=1
for tool in memcheck racecheck synccheck; do
  run compute-sanitizer --tool "$tool" --error-exitcode 1 .gpu/tests/backward_gpu --ignored \
    --test-threads 1 --exact the_raw_path_writes_every_element_and_refuses_bad_calls \
    >"$logs/${tool}_$tag.log" || status=1
done

site=$(mktemp -d)
run python3 -m pip install -q --no-deps --no-index --target "$site" .gpuy/flashrs-*.whl || exit 1
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
[ -f /tmp/fa4/pythonpath ] && export PYTHONPATH="$PYTHONPATH:$(cat /tmp/fa4/pythonpath)"
[ -f .gpuy/cubin/kernels_sm_90a.cubin ] && export FLASHRS_CUBIN_DIR="$PWD/.gpuy/cubin"
(cd python/tests && FLASHRS_REPEATS=$repeats python3 -m unittest -v test_backward_gpu) \
  >"$logs/python_backward_$tag.log" 2>&1 || status=1
run python3 python/bench/bench_backward.py --json "$OUT/bench_backward_$tag.json" || status=1
run python3 python/bench/train_check.py --json "$OUT/train_check_$tag.json" || status=1

echo "backward round finished with status $status" | tee -a "$logs/round.log"
tar czf "$OUT/backward_logs_$tag.tgz" -C "$logs" .
exit $status
