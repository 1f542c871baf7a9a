#!/usr/bin/env bash
# Builds the release binary and the test executables here and copies them into .gpu/ (git-ignored)
# for a GPU machine that has no Rust: .gpu/host and .gpu/tests/<name>. The build is the default one
# (the shipped variants); `FLASHRS_VARIANTS=all bash scripts/stage_gpu.sh` stages the lab build,
# every variant with its barrier-counting twins (`bench --all-variants`, `micro`, `tune`, `trace`).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p host
mkdir -p .gpu/tests
rm -f .gpu/tests/*
cp target/release/host .gpu/host
# The test executables cargo builds, one per test target, named from the JSON it prints.
cargo test --release --no-run --message-format=json 2>/dev/null \
  | python3 -c '
import json, sys, shutil, os
for line in sys.stdin:
    msg = json.loads(line)
    exe = msg.get("executable")
    if msg.get("reason") == "compiler-artifact" and exe and msg["profile"]["test"]:
        name = msg["target"]["name"] + ("-lib" if msg["target"]["kind"] == ["lib"] else "")
        if name in ("ptx_analysis", "ptxas_gate", "sass_schedule"):
            continue  # CPU-only checks of the embedded PTX: nothing for a GPU machine to add
        shutil.copy(exe, os.path.join(".gpu/tests", name))
        print("staged", name)
'
# The sm_90a kernels assembled here, so that the GPU machine skips the driver's JIT
# (gpu_round.sh points FLASHRS_CUBIN_DIR at them; the host refuses them if the PTX differs).
./target/release/host cubin --out .gpu/cubin --arch 90
# Debug sections are not needed there and the device tool carries at most 64 MiB.
strip .gpu/host .gpu/tests/*
ls -la .gpu .gpu/tests
