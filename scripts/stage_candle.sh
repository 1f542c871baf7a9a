#!/usr/bin/env bash
# Builds the candle crate's GPU test and example here (nvcc and link stubs from tools/cuda, which
# scripts/setup.sh installs) and puts them, stripped and gzipped, with the sm_90a cubin into .gpuc/
# (git-ignored), for scripts/candle_gpu.sh on a GPU machine that has no Rust: hand the device
# tool `carry: [".gpuc"]`. Each binary is about 80 MB stripped (candle's kernels: PTX and a
# 32 MB fatbin), over what one device call carries, and about 17 MB gzipped.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .gpuc
mkdir -p .gpuc
# cargo runs in candle/ so that candle/.cargo/config.toml (toolkit, target dir) applies.
(cd candle && cargo build --release --locked --example candle_attention)
(cd candle && cargo test --release --locked --no-run --message-format=json 2>/dev/null) \
  | python3 -c '
import json, shutil, sys
for line in sys.stdin:
    msg = json.loads(line)
    if msg.get("reason") == "compiler-artifact" and msg.get("executable") and msg["profile"]["test"] \
            and msg["target"]["kind"] == ["test"]:
        shutil.copy(msg["executable"], ".gpuc/" + msg["target"]["name"])
        print("staged", msg["target"]["name"])
'
cp target/candle/release/examples/candle_attention .gpuc/candle_attention
# The kernels assembled ahead of time, so that the GPU machine skips the driver's ~40 s JIT.
cargo build --release -p host
./target/release/host cubin --out .gpuc/cubin --arch 90
strip .gpuc/gpu .gpuc/candle_attention
gzip -9 .gpuc/gpu .gpuc/candle_attention
ls -la .gpuc .gpuc/cubin
du -sh .gpuc
