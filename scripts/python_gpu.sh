#!/usr/bin/env bash
# The Python package on a GPU machine (Python 3.12, torch, no Rust, no network), from the wheel
# scripts/stage_python.sh left in .gpuy/: installs it into a scratch folder, runs the CPU and GPU
# tests against torch's SDPA, then times it beside torch's backends (fp16 and bf16). One log and
# the bench JSON land in $OUT (default ./gpu-out).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-./gpu-out}
mkdir -p "$OUT"
# File names carry the GPU (h200 unless FLASHRS_GPU_TAG says otherwise).
tag=${FLASHRS_GPU_TAG:-h200}
LOG="$OUT/python_$tag.log"
: >"$LOG"
run() { echo "+ $*" | tee -a "$LOG"; "$@" 2>&1 | tee -a "$LOG"; return "${PIPESTATUS[0]}"; }

site=$(mktemp -d)
status=0
run nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
run python3 -m pip install --no-deps --no-index --target "$site" .gpuy/flashrs-*.whl || exit 1
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
# Prebuilt kernels skip the JIT; they are refused (RuntimeError) if built from another PTX than the
# wheel's, so a smoke call decides.
smoke='import torch, flashrs; q = torch.randn(1, 2, 64, 64, device="cuda", dtype=torch.float16); flashrs.attention(q, q, q); torch.cuda.synchronize(); print("smoke ok", flashrs.__file__, torch.__version__)'
if [ -f .gpuy/cubin/kernels_sm_90a.cubin ]; then
  export FLASHRS_CUBIN_DIR="$PWD/.gpuy/cubin"
  run python3 -c "$smoke" || { echo "prebuilt kernels refused: JIT from here on" | tee -a "$LOG"; unset FLASHRS_CUBIN_DIR; }
fi
run python3 -c "$smoke" || status=1
# From the checkout's root, so that python/flashrs (no native module) does not shadow the install.
run python3 -m unittest discover -v -s python/tests -t python/tests || status=1
run python3 python/bench/bench_torch.py --json "$OUT/bench_torch_$tag.json" || status=1
run python3 python/bench/bench_torch.py --dtype bf16 --json "$OUT/bench_torch_bf16_$tag.json" || status=1
echo "python round finished with status $status" | tee -a "$LOG"
exit $status
