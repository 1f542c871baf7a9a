#!/usr/bin/env bash
# Installs what building and checking flashrs needs, when it is missing; fast when nothing is.
#   - the device compiler: Debian's rustc-web, cargo-web and rust-web-src (rustc 1.96 with the
#     standard library source that -Zbuild-std=core compiles for nvptx64);
#   - ptxas, from NVIDIA's nvidia-cuda-nvcc wheel on PyPI, into tools/ptxas/bin (for the resource
#     gate; the build does not need it).
# Prints one line per item saying what it found or did.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# --- device toolchain -------------------------------------------------------------------------
have_device_toolchain() {
  [ -x /usr/bin/rustc ] && [ -x /usr/bin/cargo ] && [ -d /usr/lib/rustlib/src/rust/library/core ]
}
if have_device_toolchain; then
  echo "device toolchain: $(/usr/bin/rustc --version) (already installed)"
else
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    rustc-web cargo-web rust-web-src >/dev/null
  have_device_toolchain || { echo "device toolchain: install failed" >&2; exit 1; }
  echo "device toolchain: $(/usr/bin/rustc --version) (installed rustc-web cargo-web rust-web-src)"
fi

# --- host toolchain ---------------------------------------------------------------------------
echo "host toolchain: $(cd "$root" && cargo --version) (rustup, rust-toolchain.toml)"

# --- ptxas ------------------------------------------------------------------------------------
ptxas="$root/tools/ptxas/bin/ptxas"
if [ -x "$ptxas" ] && "$ptxas" --version >/dev/null 2>&1; then
  echo "ptxas: tools/ptxas/bin/ptxas $("$ptxas" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p') (already installed)"
else
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  if python3 -m pip download -q --no-deps "nvidia-cuda-nvcc==13.0.*" -d "$tmp" >/dev/null 2>&1; then
    mkdir -p "$(dirname "$ptxas")"
    python3 - "$tmp" "$ptxas" <<'PY'
import glob, shutil, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/nvidia_cuda_nvcc-*.whl")[0]
with zipfile.ZipFile(wheel) as z, z.open("nvidia/cu13/bin/ptxas") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
    chmod +x "$ptxas"
    echo "ptxas: tools/ptxas/bin/ptxas $("$ptxas" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p') (installed from the nvidia-cuda-nvcc wheel)"
  else
    echo "ptxas: WARNING: could not download nvidia-cuda-nvcc; the ptxas gate will report itself skipped"
  fi
fi
