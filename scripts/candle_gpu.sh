#!/usr/bin/env bash
# The candle crate on a GPU machine (no Rust, no network), from what scripts/stage_candle.sh left
# in .gpuc/: the GPU tests against candle's own attention, then the example. The binaries load the
# CUDA libraries candle links (cuBLAS, cuBLASLt, cuRAND, NVRTC, the CUDA runtime; major version
# 13) from torch's NVIDIA wheels there. One log lands in $OUT (default ./gpu-out).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-./gpu-out}
mkdir -p "$OUT"
LOG="$OUT/candle_h100.log"
: >"$LOG"
run() { echo "+ $*" | tee -a "$LOG"; "$@" 2>&1 | tee -a "$LOG"; return "${PIPESTATUS[0]}"; }

libs=$(python3 - <<'PY'
import glob, os
import nvidia
dirs = sorted({os.path.dirname(p) for root in nvidia.__path__
               for p in glob.glob(os.path.join(root, "**", "lib*.so.*"), recursive=True)})
print(":".join(dirs))
PY
)
export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
bin=$(mktemp -d)
for name in gpu candle_attention; do
  gzip -dc ".gpuc/$name.gz" >"$bin/$name" && chmod +x "$bin/$name" || exit 1
done
status=0
run nvidia-smi --query-gpu=name,driver_version --format=csv
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH" | tee -a "$LOG"
run ldd "$bin/gpu"
# Prebuilt kernels skip the ~40 s JIT per process; flashrs refuses them if they were built from
# another PTX than the binaries', so one short test decides.
export FLASHRS_CUBIN_DIR="$PWD/.gpuc/cubin"
run "$bin/gpu" --ignored --exact bad_inputs_on_the_gpu_are_errors_not_panics \
  || { echo "prebuilt kernels refused: JIT from here on" | tee -a "$LOG"; unset FLASHRS_CUBIN_DIR; }
run "$bin/gpu" --ignored --test-threads=1 --nocapture || status=1
run "$bin/candle_attention" || status=1
echo "candle round finished with status $status" | tee -a "$LOG"
exit $status
