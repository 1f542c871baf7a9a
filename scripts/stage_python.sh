#!/usr/bin/env bash
# Builds the Python package's wheel here (no GPU, torch or nvcc needed) and the sm_90a cubin into
# .gpuy/ (git-ignored), for scripts/python_gpu.sh on a GPU machine that has no Rust: hand the
# device tool `carry: [".gpuy"]`.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v maturin >/dev/null || python3 -m pip install -q "maturin>=1.5,<2"
rm -rf .gpuy
(cd python && maturin build --release --out ../.gpuy)
# The kernels assembled ahead of time, so that each Python process skips the driver's ~40 s JIT;
# python_gpu.sh falls back to the JIT if the wheel's PTX and these ever differ.
cargo build --release -p host
./target/release/host cubin --out .gpuy/cubin --arch 90
ls -la .gpuy .gpuy/cubin
