#!/usr/bin/env bash
# The `cutensor` path on a GPU machine (no Rust, no network): joins the parts of libcutensor.so.2
# that scripts/stage_cutensor.sh left in .gpuz/ (one device call carries one part; `collect`
# copies it to $CUTENSOR_DIR, which outlives the calls while the machine stays warm), checks the
# hash, then runs the GPU test of the path, `verify` and `bench` with the staged .gpu/ binaries
# (scripts/stage_gpu.sh). libcutensor needs libcublasLt.so.13, taken with the rest of the CUDA
# libraries from torch's NVIDIA wheels. One log and the JSON reports land in $OUT.
#   each part:      bash scripts/cutensor_gpu.sh collect
#   then, once:     bash scripts/cutensor_gpu.sh run
set -uo pipefail
cd "$(dirname "$0")/.."
dir="${CUTENSOR_DIR:-/tmp/flashrs-cutensor}"
OUT=${OUT:-./gpu-out}
mkdir -p "$dir" "$OUT"
case "${1:-run}" in
  collect)
    shopt -s nullglob
    parts=(.gpuz/libcutensor.so.2*)
    [ ${#parts[@]} -gt 0 ] || { echo "nothing in .gpuz/ to collect" >&2; exit 1; }
    cp -v "${parts[@]}" "$dir"/ && ls -la "$dir"
    ;;
  run)
    set -e
    if [ ! -f "$dir/libcutensor.so.2" ]; then
      cat "$dir"/libcutensor.so.2.xz.part* | xz -d >"$dir/libcutensor.so.2.partial"
      mv "$dir/libcutensor.so.2.partial" "$dir/libcutensor.so.2"
    fi
    (cd "$dir" && sha256sum -c libcutensor.so.2.sha256)
    set +e
    libs=$(python3 - <<'PY'
import glob, os
import nvidia
dirs = sorted({os.path.dirname(p) for root in nvidia.__path__
               for p in glob.glob(os.path.join(root, "**", "lib*.so.*"), recursive=True)})
print(":".join(dirs))
PY
)
    export LD_LIBRARY_PATH="$dir${libs:+:$libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    [ -d .gpu/cubin ] && export FLASHRS_CUBIN_DIR="${FLASHRS_CUBIN_DIR:-.gpu/cubin}"
    LOG="$OUT/cutensor_h100.log"
    : >"$LOG"
    run() { echo "+ $*" | tee -a "$LOG"; "$@" 2>&1 | tee -a "$LOG"; return "${PIPESTATUS[0]}"; }
    status=0
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH" | tee -a "$LOG"
    run ldd "$dir/libcutensor.so.2" || status=1
    run .gpu/tests/gpu --ignored --exact cutensor_path_matches_the_reference --nocapture || status=1
    run .gpu/host verify --kernel cutensor --kernel cublas --shapes small,mission,long,odd,edge,splitkv \
      --layout bhsd,bshd --seed 13 --json "$OUT/verify_cutensor_h100.json" || status=1
    run .gpu/host verify --kernel cutensor --shapes small,mission --heads-kv 2 --layout bhsd,bshd \
      --logit-scale 40 --seed 14 || status=1
    run .gpu/host bench --kernel cutensor --kernel cublas --kernel flash_mma_m128_n64_w4_s2_light \
      --shapes std --json "$OUT/bench_cutensor_h100.json" || status=1
    exit $status
    ;;
  *) echo "usage: $0 collect|run" >&2; exit 2 ;;
esac
