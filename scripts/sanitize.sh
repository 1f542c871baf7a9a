#!/usr/bin/env bash
# compute-sanitizer over `verify --quick` (every variant of ours, the small, odd and edge shapes,
# causal and not, plus the barrier-counting twins): memcheck, racecheck, synccheck, initcheck.
# Writes one log per tool and a summary, $OUT/sanitizer_h100.json: per tool, the errors the tool
# reported in total and per kernel (every kernel that ran is listed, zero or not).
# Usage (on a GPU machine, binaries from scripts/stage_gpu.sh): OUT=dir bash scripts/sanitize.sh
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.gpu/host}
OUT=${OUT:-./gpu-out}
mkdir -p "$OUT"
SANITIZER=${SANITIZER:-$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)}
if [ -z "$SANITIZER" ]; then
  echo "compute-sanitizer not found (set SANITIZER=/path/to/compute-sanitizer)" >&2
  exit 2
fi
status=0
for tool in memcheck racecheck synccheck initcheck; do
  echo "+ $SANITIZER --tool $tool $BIN verify --quick" >&2
  "$SANITIZER" --tool "$tool" --print-limit 100 "$BIN" verify --quick --seed 7 \
    >"$OUT/sanitizer_$tool.log" 2>&1 || status=1
  tail -2 "$OUT/sanitizer_$tool.log" >&2
done
python3 - "$OUT" "$BIN" <<'PY' || status=1
import json, re, subprocess, sys
out, host = sys.argv[1], sys.argv[2]
# The kernels verify --quick runs: every variant's symbols (the tool logs name kernels by symbol).
subprocess.run([host, "list", "--json", f"{out}/.variants.json"], capture_output=True)
listing = json.load(open(f"{out}/.variants.json"))
variants = sorted({e["kernel"] for e in listing})
summary = {"command": f"compute-sanitizer --tool TOOL {host} verify --quick --seed 7", "tools": {}}
total = 0
for tool in ("memcheck", "racecheck", "synccheck", "initcheck"):
    text = open(f"{out}/sanitizer_{tool}.log", errors="replace").read()
    m = re.search(r"ERROR SUMMARY: (\d+) error", text) or re.search(r"SUMMARY: \d+ hazards? displayed \((\d+) error", text)
    errors = int(m.group(1)) if m else None
    # Each reported error names the kernel it happened in ("... in <kernel>" or "at <kernel>+0x..").
    per_kernel = {v: 0 for v in variants}
    for line in text.splitlines():
        # One report per "========= Error..." / "========= Invalid ..." line; its kernel is the first
        # symbol named after "at" or "in" (NVIDIA's own kernels keep their names).
        if not re.match(r"=========\s+(Error|Invalid|Uninitialized|Barrier|Race|Warning)", line):
            continue
        hit = re.search(r"(?:\bat|\bin) ([A-Za-z_][A-Za-z0-9_]*)", line)
        name = hit.group(1) if hit else "unattributed"
        variant = next((v for v in variants if name == v or name.startswith(v + "_d")), name)
        per_kernel[variant] = per_kernel.get(variant, 0) + 1
    passed = "PASS:" in text
    summary["tools"][tool] = {"errors": errors, "verify_passed": passed, "per_variant": per_kernel}
    total += errors if errors is not None else 1
    if errors is None or not passed:
        print(f"{tool}: summary line or verify verdict missing", file=sys.stderr)
summary["total_errors"] = total
summary["zero_errors"] = total == 0
json.dump(summary, open(f"{out}/sanitizer_h100.json", "w"), indent=2)
import os; os.remove(f"{out}/.variants.json")
print(f"sanitizer: {total} errors over {len(variants)} variants")
sys.exit(0 if total == 0 else 1)
PY
exit $status
