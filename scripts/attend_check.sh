#!/usr/bin/env bash
# `attend` end to end on a GPU machine: random [B,H,S,D] tensors saved as .npy by numpy, our
# kernel through `host attend`, torch's float32 SDPA on the same data, and the largest difference;
# then a packed varlen batch and a paged KV cache (int32 prefix sums and block table) against a
# float64 numpy reference per sequence. Exits non-zero when they disagree. Needs python3 with
# numpy and torch.
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
# Varlen and paged inputs, and the float64 reference of each sequence (causal aligned bottom-right).
python3 - "$dir" <<'PY'
import sys, numpy as np
rng = np.random.default_rng(1)
d = sys.argv[1]
save = lambda name, x: np.save(f"{d}/{name}.npy", x)
# Varlen: an empty sequence and a single row among longer ones, queries shorter than their keys.
lens_q, lens_k = [5, 0, 37, 1], [9, 3, 37, 1]
save("cu_q", np.concatenate([[0], np.cumsum(lens_q)]).astype(np.int32))
save("cu_k", np.concatenate([[0], np.cumsum(lens_k)]).astype(np.int32))
save("pq", rng.standard_normal((sum(lens_q), 4, 64)).astype(np.float16))
save("pk", rng.standard_normal((sum(lens_k), 2, 64)).astype(np.float16))
save("pv", rng.standard_normal((sum(lens_k), 2, 64)).astype(np.float16))
# Paged: 3 sequences in pages of 16 keys in a random order, two pages unused and NaN.
lens, bs, pages_used = [20, 1, 33], 16, [2, 1, 3]
num_blocks = sum(pages_used) + 2
order = rng.permutation(num_blocks)
table = -np.ones((3, 3), dtype=np.int32)
at = 0
for b, n in enumerate(pages_used):
    table[b, :n] = order[at:at + n]
    at += n
cache = lambda: rng.standard_normal((num_blocks, bs, 1, 128)).astype(np.float16)
kc, vc = cache(), cache()
for page in order[at:]:
    kc[page] = vc[page] = np.nan
save("table", table)
save("lens", np.array(lens, dtype=np.int32))
save("kc", kc)
save("vc", vc)
save("gq", rng.standard_normal((3, 4, 2, 128)).astype(np.float16))
PY
"$BIN" attend --q "$dir/pq.npy" --k "$dir/pk.npy" --v "$dir/pv.npy" --out "$dir/po.npy" --causal \
  --cu-seqlens-q "$dir/cu_q.npy" --cu-seqlens-k "$dir/cu_k.npy" --lse "$dir/plse.npy"
"$BIN" attend --q "$dir/gq.npy" --k "$dir/kc.npy" --v "$dir/vc.npy" --out "$dir/go.npy" --causal \
  --block-table "$dir/table.npy" --seqlens-k "$dir/lens.npy" --lse "$dir/glse.npy"
python3 - "$dir" <<'PY'
import sys, numpy as np
d = sys.argv[1]
load = lambda name: np.load(f"{d}/{name}.npy")

def attention(q, k, v):
    """q [H,Sq,D], k and v [Hkv,Sk,D] in float64, causal bottom-right: output and log-sum-exp."""
    h, sq, dim = q.shape
    k, v = (np.repeat(x, h // x.shape[0], axis=0) for x in (k, v))
    sk = k.shape[1]
    scores = q @ k.transpose(0, 2, 1) / np.sqrt(dim)
    visible = np.arange(sk)[None, :] <= np.arange(sq)[:, None] + sk - sq
    scores = np.where(visible, scores, -np.inf)
    top = scores.max(axis=-1, keepdims=True)
    weights = np.where(visible, np.exp(scores - np.where(np.isfinite(top), top, 0)), 0)
    total = weights.sum(axis=-1, keepdims=True)
    out = np.where(total > 0, weights @ v / np.where(total > 0, total, 1), 0)
    with np.errstate(divide="ignore"):
        lse = np.where(total[..., 0] > 0, np.log(np.where(total[..., 0] > 0, total[..., 0], 1)) + top[..., 0], -np.inf)
    return out, lse

def check(name, out, ref, tol):
    err = float(np.abs(out - ref).max()) if out.size else 0.0
    print(f"attend {name}: shape {out.shape}, max abs diff vs float64 {err:.2e} (bound {tol})")
    assert np.isfinite(out).all() and err <= tol, name

q, k, v = (load(n).astype(np.float64) for n in ("pq", "pk", "pv"))
cu_q, cu_k = load("cu_q"), load("cu_k")
out, lse = np.zeros_like(q), np.zeros((q.shape[1], q.shape[0]))
for b in range(len(cu_q) - 1):
    rq, rk = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
    if rq.stop > rq.start:
        o, l = attention(q[rq].transpose(1, 0, 2), k[rk].transpose(1, 0, 2), v[rk].transpose(1, 0, 2))
        out[rq], lse[:, rq] = o.transpose(1, 0, 2), l
check("varlen", load("po").astype(np.float64), out, 1e-2)
assert load("plse").shape == lse.shape
check("varlen lse", load("plse"), lse, 1e-3)

q, kc, vc, table, lens = load("gq").astype(np.float64), load("kc"), load("vc"), load("table"), load("lens")
out, lse = np.zeros_like(q), np.zeros(q.shape[:3])
for b, n in enumerate(lens):
    pages = table[b, : -(-n // kc.shape[1])]
    gather = lambda c: c[pages].reshape(-1, *c.shape[2:])[:n].transpose(1, 0, 2).astype(np.float64)
    out[b], lse[b] = attention(q[b], gather(kc), gather(vc))
check("paged", load("go").astype(np.float64), out, 1e-2)
lse_ours = load("glse")
assert lse_ours.shape == lse.shape
same = (lse_ours == lse) | (np.abs(lse_ours - np.where(np.isfinite(lse), lse, 0)) <= 1e-3)
print(f"attend paged lse: shape {lse_ours.shape}, rows with no key -inf: {bool((lse_ours[~np.isfinite(lse)] == -np.inf).all())}")
assert same.all(), "paged lse"
print("attend varlen and paged check: ok")
PY
