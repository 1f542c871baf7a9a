#!/usr/bin/env bash
# Stages cuTENSOR 2 for the `cutensor` path on a GPU machine that cannot reach PyPI: downloads the
# wheel here (PyPI's cutensor-cu13, or cutensor-cu12 with `cu12`: match the CUDA major of the
# cuBLAS there, since libcutensor needs its libcublasLt), takes libcutensor.so.2 out of it,
# xz-compresses it and splits that into parts of at most PART_SIZE (default 44M) into .gpuz/
# (git-ignored), each small enough for one device call's upload. scripts/cutensor_gpu.sh joins
# them there. Nothing fetched here is committed.
set -euo pipefail
cd "$(dirname "$0")/.."
flavour="${1:-cu13}"
case "$flavour" in
  cu12|cu13) ;;
  *) echo "usage: $0 [cu13|cu12]" >&2; exit 2 ;;
esac
part_size="${PART_SIZE:-44M}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: "cutensor-$flavour" -d "$work"
wheel="$(ls "$work"/cutensor_*.whl)"
python3 -m zipfile -e "$wheel" "$work/wheel"
lib="$work/wheel/cutensor/lib/libcutensor.so.2"
[ -f "$lib" ] || { echo "no cutensor/lib/libcutensor.so.2 in $(basename "$wheel")" >&2; exit 1; }
rm -rf .gpuz
mkdir -p .gpuz
(cd "$(dirname "$lib")" && sha256sum libcutensor.so.2) > .gpuz/libcutensor.so.2.sha256
xz -6 -T0 -c "$lib" | split -b "$part_size" -d - .gpuz/libcutensor.so.2.xz.part
echo "wheel: $(basename "$wheel") ($(stat -c %s "$wheel") bytes)"
echo "libcutensor.so.2: $(stat -c %s "$lib") bytes; xz: $(cat .gpuz/libcutensor.so.2.xz.part* | wc -c) bytes"
echo "needs: $(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')"
ls -la .gpuz
