#!/usr/bin/env bash
# On the GPU machine: joins the parts of libcutensor.so.2 that scripts/stage_cutensor.sh made
# (carried one device call at a time into .gpuz/ and copied aside to $CUTENSOR_DIR, which
# outlives the calls while the machine stays warm), checks its hash, then runs `verify` and
# `bench` on the `cutensor` path (and `cublas` beside it) with the staged host binary.
#   part N of the upload:  bash scripts/cutensor_gpu.sh collect
#   once all are there:    bash scripts/cutensor_gpu.sh run
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${CUTENSOR_DIR:-/tmp/flashrs-cutensor}"
mkdir -p "$dir"
case "${1:-run}" in
  collect)
    cp -v .gpuz/libcutensor.so.2.xz.part* .gpuz/libcutensor.so.2.sha256 "$dir"/
    ls -la "$dir"
    ;;
  run)
    if [ ! -f "$dir/libcutensor.so.2" ]; then
      cat "$dir"/libcutensor.so.2.xz.part* | xz -d > "$dir/libcutensor.so.2"
      (cd "$dir" && sha256sum -c libcutensor.so.2.sha256)
    fi
    # cuTENSOR needs libcublasLt: the system's, else the one torch's wheels ship.
    torch_libs=$(python3 -c 'import os, nvidia.cublas as c; print(os.path.join(list(c.__path__)[0], "lib"))' 2>/dev/null || true)
    export LD_LIBRARY_PATH="$dir${torch_libs:+:$torch_libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export FLASHRS_CUBIN_DIR="${FLASHRS_CUBIN_DIR:-.gpu/cubin}"
    mkdir -p evidence
    log=evidence/cutensor_h100.log
    {
      echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
      .gpu/host verify --kernel cutensor --kernel cublas --shapes small,mission,long,odd,edge,splitkv \
        --layout bhsd,bshd --json evidence/verify_cutensor_h100.json
      .gpu/host verify --kernel cutensor --shapes small,mission --heads-kv 2 --layout bhsd,bshd --dtype f16,bf16
      .gpu/host bench --kernel cutensor --kernel cublas --kernel flash_mma_m128_n64_w4_s2_light \
        --shapes std --json evidence/bench_cutensor_h100.json
    } 2>&1 | tee "$log"
    ;;
  *) echo "usage: $0 collect|run" >&2; exit 2 ;;
esac
