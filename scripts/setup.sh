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

# --- CUDA build kit for the candle crate (candle/) ----------------------------------------------
# candle-core's `cuda` feature compiles candle's kernels with nvcc and links cudarc to libcuda,
# libnvrtc, libcurand, libcublas and libcublasLt. None of that needs a GPU, so tools/cuda gets
# nvcc 13.0 with its compiler back end, headers and libcudart from NVIDIA's wheels, and, in
# lib/stubs, link-time stand-ins for the other libraries: each exports, under the real library's
# SONAME, the functions cudarc's bindings declare, every one returning that library's "not
# available" status (CUDA_ERROR_STUB_LIBRARY for libcuda). Programs linked against them load the
# real libraries where they run (the driver's libcuda; the others from the CUDA installation or
# torch's wheels there, through LD_LIBRARY_PATH); the candle crate's CPU tests run here on the
# stubs, so a stray CUDA call is a clean error there. Only the candle crate uses any of this.
cuda_kit="$root/tools/cuda"
cuda_kit_release="13.0"
# The marker in tools/cuda/.installed: bump the suffix when what is installed changes, so that
# existing kits are rebuilt.
cuda_kit_version="$cuda_kit_release-2"
# library:SONAME version:status every stub function returns
cuda_kit_stubs=(cuda:1:34 nvrtc:13:11 curand:10:203 cublas:13:1 cublasLt:13:1)
cuda_kit_ok() {
  [ "$(cat "$cuda_kit/.installed" 2>/dev/null)" = "$cuda_kit_version" ] || return 1
  "$cuda_kit/bin/nvcc" --version >/dev/null 2>&1 || return 1
  local stub
  for stub in "${cuda_kit_stubs[@]}"; do
    [ -f "$cuda_kit/lib/stubs/lib${stub%%:*}.so" ] || return 1
  done
}

# Writes lib/stubs from the sys bindings of the cudarc that candle/Cargo.lock pins.
make_cuda_stubs() {
  local cudarc
  (cd "$root/candle" && cargo fetch --locked --quiet) || return 1
  cudarc="$(cd "$root/candle" && cargo metadata --locked --format-version 1 2>/dev/null | python3 -c '
import json, os, sys
print(next(os.path.dirname(p["manifest_path"]) for p in json.load(sys.stdin)["packages"] if p["name"] == "cudarc"))
')" || return 1
  mkdir -p "$kit_tmp/lib/stubs"
  local stub name soname status module prefix
  for stub in "${cuda_kit_stubs[@]}"; do
    IFS=: read -r name soname status <<<"$stub"
    soname="lib$name.so.$soname"
    case "$name" in
      cuda) module=driver prefix='cu[A-Z]' ;;
      cublasLt) module=cublaslt prefix='cublasLt' ;;
      cublas) module=cublas prefix='cublas[A-Z_]' ;;
      *) module="$name" prefix="$name" ;;
    esac
    # Every function the bindings may call; the exported names are what matters, not the types.
    grep -ohE "\bfn ${prefix}[A-Za-z0-9_]*\(" "$cudarc/src/$module/sys/"*.rs \
      | sed -E "s/^fn ([A-Za-z0-9_]+)\\(\$/int \1(void) { return $status; }/" | sort -u >"$kit_tmp/$name.c"
    { [ "$name" != cublas ] || sed -i '/ cublasLt/d' "$kit_tmp/$name.c"; }
    [ -s "$kit_tmp/$name.c" ] || return 1
    cc -shared -fPIC -Wl,-soname,"$soname" -o "$kit_tmp/lib/stubs/lib$name.so" "$kit_tmp/$name.c" || return 1
    ln -sf "lib$name.so" "$kit_tmp/lib/stubs/$soname"
  done
}

install_cuda_kit() {
  local wheel
  python3 -m pip download --quiet --disable-pip-version-check --no-deps -d "$tmp" \
    "nvidia-cuda-nvcc==$cuda_kit_release.*" "nvidia-nvvm==$cuda_kit_release.*" \
    "nvidia-cuda-crt==$cuda_kit_release.*" "nvidia-cuda-runtime==$cuda_kit_release.*" \
    "nvidia-cuda-cccl==$cuda_kit_release.*" >"$tmp/pip-cuda.log" 2>&1 || {
    sed 's/^/  pip: /' "$tmp/pip-cuda.log" | tail -n 3 >&2
    return 1
  }
  kit_tmp="$cuda_kit.partial"
  rm -rf "$kit_tmp" "$tmp/cuda-wheels"
  for wheel in nvidia_cuda_nvcc nvidia_nvvm nvidia_cuda_crt nvidia_cuda_runtime nvidia_cuda_cccl; do
    python3 -c '
import sys, zipfile
zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2], [n for n in zipfile.ZipFile(sys.argv[1]).namelist() if n.startswith("nvidia/cu13/")])
' "$(ls "$tmp/$wheel"-*.whl | head -1)" "$tmp/cuda-wheels" || return 1
  done
  mv "$tmp/cuda-wheels/nvidia/cu13" "$kit_tmp"
  # zipfile drops the executable bits.
  chmod +x "$kit_tmp"/bin/* "$kit_tmp"/nvvm/bin/*
  # candle-kernels links `-lcudart`, which needs the unversioned name.
  ln -sf libcudart.so.13 "$kit_tmp/lib/libcudart.so"
  make_cuda_stubs || return 1
  echo "$cuda_kit_version" >"$kit_tmp/.installed"
  rm -rf "$cuda_kit"
  mv "$kit_tmp" "$cuda_kit"
  cuda_kit_ok
}

if cuda_kit_ok; then
  echo "cuda kit: tools/cuda (nvcc $cuda_kit_release and link stubs for candle/; already installed)"
else
  tmp="${tmp:-$(mktemp -d)}"
  trap 'rm -rf "$tmp"' EXIT
  if install_cuda_kit; then
    echo "cuda kit: tools/cuda (installed nvcc $cuda_kit_release from NVIDIA's wheels, link stubs from cudarc's bindings)"
  else
    rm -rf "$cuda_kit.partial"
    echo "cuda kit: WARNING: could not install it; the candle crate (candle/) will not build"
  fi
fi
