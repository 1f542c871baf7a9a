#!/usr/bin/env bash
# Installs what building and checking flashrs needs, when it is missing; fast when nothing is.
#   - the device compiler: Debian's rustc-web, cargo-web and rust-web-src (/usr/bin/rustc 1.96+
#     with the standard library source that -Zbuild-std=core compiles for nvptx64);
#   - the host toolchain: rustup's, pinned by rust-toolchain.toml (checked, installed by rustup
#     itself on first use);
#   - ptxas, from NVIDIA's nvidia-cuda-nvcc wheel on PyPI, into tools/ptxas/bin (for the ptxas
#     gate; the build does not need it, so failing to get it is only a warning);
#   - cuobjdump and nvdisasm, from NVIDIA's wheels of them, into tools/cuobjdump/bin (for the
#     SASS schedule checks; also only a warning when they cannot be had).
# Prints one line per item saying what it found or did. Runs from any directory.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
apt_updated=""
apt_install() {
  if [ -z "$apt_updated" ]; then
    $sudo apt-get update -qq
    apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# --- device toolchain -------------------------------------------------------------------------
device_rustc_ok() {
  # /usr/bin/rustc 1.96 or newer, /usr/bin/cargo, and the library source for -Zbuild-std.
  local version
  version="$(/usr/bin/rustc --version 2>/dev/null | awk '{print $2}')" || return 1
  [ -x /usr/bin/cargo ] && [ -d /usr/lib/rustlib/src/rust/library/core ] || return 1
  local major minor
  IFS=. read -r major minor _ <<<"$version"
  [ "${major:-0}" -gt 1 ] || { [ "${major:-0}" -eq 1 ] && [ "${minor:-0}" -ge 96 ]; }
}
if device_rustc_ok; then
  echo "device toolchain: /usr/bin/rustc $(/usr/bin/rustc --version | awk '{print $2}') (already installed)"
else
  apt_install rustc-web cargo-web rust-web-src
  if ! device_rustc_ok; then
    echo "device toolchain: ERROR: /usr/bin/rustc 1.96+ with library source still missing after installing rustc-web cargo-web rust-web-src" >&2
    exit 1
  fi
  echo "device toolchain: /usr/bin/rustc $(/usr/bin/rustc --version | awk '{print $2}') (installed rustc-web cargo-web rust-web-src)"
fi

# --- host toolchain ---------------------------------------------------------------------------
# Run from the repository root so rustup applies rust-toolchain.toml (and installs it if needed).
if host_cargo="$(cd "$root" && cargo --version 2>/dev/null)"; then
  echo "host toolchain: $host_cargo (rustup, rust-toolchain.toml)"
else
  echo "host toolchain: ERROR: \`cargo --version\` fails in $root; install rustup (https://rustup.rs)" >&2
  exit 1
fi

# --- ptxas ------------------------------------------------------------------------------------
ptxas="$root/tools/ptxas/bin/ptxas"
ptxas_version() { "$ptxas" --version 2>/dev/null | sed -n 's/.*, V\([0-9.]*\).*/\1/p'; }

# Downloads the wheel into the temporary folder $tmp and extracts ptxas from it; returns
# non-zero on any failure.
install_ptxas() {
  local wheels
  if ! python3 -m pip --version >/dev/null 2>&1; then
    command -v apt-get >/dev/null 2>&1 && apt_install python3-pip >/dev/null 2>&1 || true
  fi
  python3 -m pip download --quiet --disable-pip-version-check --no-deps \
    "nvidia-cuda-nvcc==13.0.*" -d "$tmp" >"$tmp/pip.log" 2>&1 || {
    sed 's/^/  pip: /' "$tmp/pip.log" | tail -n 3 >&2
    return 1
  }
  wheels=("$tmp"/nvidia_cuda_nvcc-*.whl)
  [ -f "${wheels[0]}" ] || return 1
  mkdir -p "$(dirname "$ptxas")"
  if command -v unzip >/dev/null 2>&1; then
    unzip -p "${wheels[0]}" nvidia/cu13/bin/ptxas >"$ptxas.partial" || return 1
  else
    python3 - "${wheels[0]}" "$ptxas.partial" <<'PY' || return 1
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open("nvidia/cu13/bin/ptxas") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
  fi
  chmod +x "$ptxas.partial"
  mv "$ptxas.partial" "$ptxas"
  [ -n "$(ptxas_version)" ]
}

if [ -x "$ptxas" ] && [ -n "$(ptxas_version)" ]; then
  echo "ptxas: tools/ptxas/bin/ptxas $(ptxas_version) (already installed)"
else
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  if install_ptxas; then
    echo "ptxas: tools/ptxas/bin/ptxas $(ptxas_version) (installed from the nvidia-cuda-nvcc wheel)"
  else
    rm -f "$ptxas" "$ptxas.partial"
    echo "ptxas: WARNING: could not install it from the nvidia-cuda-nvcc wheel; the ptxas gate will report itself skipped"
  fi
fi

# --- cuobjdump + nvdisasm (SASS of the assembled kernels) ---------------------------------------
sass_bin="$root/tools/cuobjdump/bin"
# The wheels' oldest release for CUDA 13 is 13.2; it reads what ptxas 13.0 writes.
install_disassembler() {
  local tool=$1 wheels
  python3 -m pip download --quiet --disable-pip-version-check --no-deps \
    "nvidia-cuda-$tool==13.2.*" -d "$tmp" >"$tmp/pip-$tool.log" 2>&1 || {
    sed 's/^/  pip: /' "$tmp/pip-$tool.log" | tail -n 3 >&2
    return 1
  }
  wheels=("$tmp"/nvidia_cuda_"$tool"-*.whl)
  [ -f "${wheels[0]}" ] || return 1
  mkdir -p "$sass_bin"
  python3 -c '
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst)
' "${wheels[0]}" "nvidia/cu13/bin/$tool" "$sass_bin/$tool.partial" || return 1
  chmod +x "$sass_bin/$tool.partial"
  mv "$sass_bin/$tool.partial" "$sass_bin/$tool"
}
if "$sass_bin/cuobjdump" --version >/dev/null 2>&1 && [ -x "$sass_bin/nvdisasm" ]; then
  echo "cuobjdump: tools/cuobjdump/bin (already installed)"
else
  tmp="${tmp:-$(mktemp -d)}"
  trap 'rm -rf "$tmp"' EXIT
  if install_disassembler cuobjdump && install_disassembler nvdisasm; then
    echo "cuobjdump: tools/cuobjdump/bin (installed with nvdisasm from NVIDIA's wheels)"
  else
    echo "cuobjdump: WARNING: could not install it; the SASS schedule checks will fail"
  fi
fi
