#!/usr/bin/env bash
# `attend` end to end on a GPU machine: random [B,H,S,D] tensors saved as .npy by numpy, our
# kernel through `host attend`, torch's float32 SDPA on the same data, and the largest difference.
# Exits non-zero when they disagree. Needs python3 with numpy and torch.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.gpu/host}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
python3 - "$dir" <<'PY'
import sys, numpy as np
rng = np.random.default_rng(0)
d = sys.argv[1]
for name, seq in (("q", 300), ("k", 300), ("v", 300)):
    np.save(f"{d}/{name}.npy", rng.standard_normal((2, 4, seq, 64)).astype(np.float32))
    np.save(f"{d}/{name}16.npy", np.load(f"{d}/{name}.npy").astype(np.float16))
    # The same tensor as [B,S,H,D], for --layout bshd.
    np.save(f"{d}/{name}16s.npy", np.load(f"{d}/{name}16.npy").transpose(0, 2, 1, 3).copy())
PY
"$BIN" attend --q "$dir/q.npy" --k "$dir/k.npy" --v "$dir/v.npy" --out "$dir/o32.npy" --causal
"$BIN" attend --q "$dir/q16.npy" --k "$dir/k16.npy" --v "$dir/v16.npy" --out "$dir/o16.npy" --causal --lse "$dir/lse.npy"
"$BIN" attend --q "$dir/q.npy" --k "$dir/k.npy" --v "$dir/v.npy" --out "$dir/obf.npy" --causal --dtype bf16
"$BIN" attend --q "$dir/q16.npy" --k "$dir/k16.npy" --v "$dir/v16.npy" --out "$dir/ocb.npy" --kernel cublas --causal
"$BIN" attend --q "$dir/q16s.npy" --k "$dir/k16s.npy" --v "$dir/v16s.npy" --out "$dir/os.npy" --causal --layout bshd
python3 - "$dir" <<'PY'
import sys, numpy as np, torch
d = sys.argv[1]
q, k, v = (torch.from_numpy(np.load(f"{d}/{n}16.npy").astype(np.float32)) for n in "qkv")
ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).numpy()
worst = 0.0
for name, tol in (("o32", 1e-2), ("o16", 1e-2), ("obf", 6e-2), ("ocb", 1e-2)):
    out = np.load(f"{d}/{name}.npy")
    err = float(np.abs(out.astype(np.float32) - ref).max())
    print(f"attend {name}: dtype {out.dtype}, shape {out.shape}, max abs diff vs torch {err:.2e} (bound {tol})")
    assert out.shape == ref.shape and np.isfinite(out).all() and err <= tol, name
out = np.load(f"{d}/os.npy")
err = float(np.abs(out.astype(np.float32).transpose(0, 2, 1, 3) - ref).max())
print(f"attend bshd: shape {out.shape}, max abs diff vs torch {err:.2e} (bound 1e-2)")
assert out.shape == (ref.shape[0], ref.shape[2], ref.shape[1], ref.shape[3]) and err <= 1e-2
scores = (q @ k.transpose(-1, -2)) / np.sqrt(q.shape[-1])
mask = torch.ones(scores.shape[-2:], dtype=torch.bool).tril()
lse_ref = torch.logsumexp(scores.masked_fill(~mask, float("-inf")), dim=-1).numpy()
lse = np.load(f"{d}/lse.npy")
err = float(np.abs(lse - lse_ref).max())
print(f"attend lse: shape {lse.shape}, max abs diff vs torch {err:.2e} (bound 1e-3)")
assert lse.shape == lse_ref.shape and err <= 1e-3
print("attend check: ok")
PY
