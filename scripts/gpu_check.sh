#!/usr/bin/env bash
# The short round on a GPU machine (no Rust, no network) for a change to the library or the
# Python package: `verify --quick`, the no-argument `bench` (the picks beside the installed peers),
# then scripts/python_gpu.sh (the wheel's CPU and GPU tests and python/bench/bench_torch.py).
# Needs .gpu/host (or .gpu/host.xz) from this checkout's `cargo build --release -p host` and the
# wheel in .gpuy/ (scripts/stage_python.sh); the FA3 peer when ../shared/peers/fa4's install.sh
# put it in /tmp/fa4. Logs and JSON land in $OUT (default ./gpu-out).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-./gpu-out}
tag=${FLASHRS_GPU_TAG:-h200}
mkdir -p "$OUT"
LOG="$OUT/check_$tag.log"
: >"$LOG"
run() { echo "+ $*" | tee -a "$LOG"; "$@" 2>&1 | tee -a "$LOG"; return "${PIPESTATUS[0]}"; }

[ -f .gpu/host ] || xz -d -k .gpu/host.xz
[ -f /tmp/fa4/pythonpath ] && export PYTHONPATH="$(cat /tmp/fa4/pythonpath)${PYTHONPATH:+:$PYTHONPATH}"
status=0
run nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
run .gpu/host verify --quick --json "$OUT/verify_quick_$tag.json" || status=1
start=$(date +%s)
run .gpu/host bench --json "$OUT/bench_default_$tag.json" || status=1
echo "bench with no arguments: $(($(date +%s) - start)) s wall, the kernels' JIT included" | tee -a "$LOG"
# SKIP_PYTHON=1 leaves the Python round for a later call (what one call can carry is limited).
[ -n "${SKIP_PYTHON:-}" ] || OUT="$OUT" FLASHRS_GPU_TAG="$tag" bash scripts/python_gpu.sh || status=1
echo "check finished with status $status" | tee -a "$LOG"
exit $status
