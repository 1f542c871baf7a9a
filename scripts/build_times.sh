#!/usr/bin/env bash
# Times the edit-build loop on a fresh clone of this repository's HEAD and writes the figures as
# JSON (default evidence/build/build_times.json):
#   1. the cold build of README line 1 (`cargo run -p host --release -- bench`) to its first line
#      of output (on a machine without a GPU that line is the "no GPU" message, exit 2);
#   2. `touch` of one kernel family's file, then `cargo build --release -p host`;
#   3. a one-line edit of that file (a comment added, so no kernel changes), then the same build;
#   4. the Python wheel (`maturin build --release` in python/) after the host build;
#   5. README line 2 (`cargo test --release --workspace`) after all that.
# Usage: bash scripts/build_times.sh [OUT.json] [FAMILY_FILE]   (FAMILY_FILE relative to the root,
# default kernels-rs/src/attention/naive.rs). Needs scripts/setup.sh's toolchain and maturin.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$root/evidence/build/build_times.json}"
family_file="${2:-kernels-rs/src/attention/naive.rs}"
clone="$(mktemp -d)/flashrs"
git clone -q "$root" "$clone"
cp -r "$root/tools" "$clone/tools" 2>/dev/null || true
cd "$clone"
commit="$(git rev-parse --short HEAD)"

seconds() { python3 -c 'import sys,time; print(round(time.time() - float(sys.argv[1]), 1))' "$1"; }

# 1. Cold build to the first line of output.
start="$(date +%s.%N)"
first_line="$( (cargo run -p host --release -- bench 2>&1 || true) | grep -v -E '^\s*(Compiling|Finished|Running|Building|warning: flashrs)' | head -1)"
cold="$(seconds "$start")"

# 2. touch of one family's file.
touch "$family_file"
start="$(date +%s.%N)"
cargo build --release -p host -q 2>/dev/null
touched="$(seconds "$start")"

# 3. A one-line edit of it (a comment: the kernels stay the same, the file's contents change).
echo "// build-time probe" >>"$family_file"
start="$(date +%s.%N)"
cargo build --release -p host -q 2>/dev/null
edited="$(seconds "$start")"
git checkout -q -- "$family_file"
cargo build --release -p host -q 2>/dev/null

# 4. The wheel after the host build.
start="$(date +%s.%N)"
(cd python && maturin build --release --out ../target/wheels-probe >/dev/null 2>&1)
wheel="$(seconds "$start")"

# 5. README line 2 (its setup.sh already ran: tools/ is copied).
start="$(date +%s.%N)"
tests_ok=true
cargo test --release --workspace -q >/dev/null 2>&1 || tests_ok=false
tests="$(seconds "$start")"

mkdir -p "$(dirname "$out")"
python3 - "$out" <<PY
import json, os, sys
json.dump({
    "commit": "$commit",
    "machine": f"{os.cpu_count()} cores, no GPU",
    "date": "$(date -u +%Y-%m-%d)",
    "command": "bash scripts/build_times.sh",
    "family_file": "$family_file",
    "cold_readme_line_1_to_first_output_s": $cold,
    "first_output": """$first_line""",
    "touch_family_file_then_host_build_s": $touched,
    "one_line_edit_family_file_then_host_build_s": $edited,
    "wheel_after_host_build_s": $wheel,
    "readme_line_2_after_the_above_s": $tests,
    "readme_line_2_passed": $( $tests_ok && echo True || echo False ),
}, open(sys.argv[1], "w"), indent=2)
print(open(sys.argv[1]).read())
PY
rm -rf "$(dirname "$clone")"
