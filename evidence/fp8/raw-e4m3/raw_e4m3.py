"""attend's raw e4m3 path (uint8 files + --descale) against its --quantize path and a float64 reference.
Quantises like flashrs::fp8::quantize (one factor per batch and KV head, amax / 448, round to nearest even) with torch's float8_e4m3fn."""
import subprocess, sys, json
import numpy as np, torch
host, d = sys.argv[1], sys.argv[2]
B, H, S, D = 1, 4, 384, 128
g = torch.Generator().manual_seed(12)
q, k, v = (torch.randn(B, H, S, D, generator=g, dtype=torch.float32) for _ in range(3))
def quant(x):
    amax = x.abs().amax(dim=(2, 3)).clamp_min(1e-30)  # [B, H]
    scale = amax / 448.0
    b = (x / scale[:, :, None, None]).to(torch.float8_e4m3fn)
    return b.view(torch.uint8).numpy(), scale.numpy().astype(np.float32), b.to(torch.float64) * scale.double()[:, :, None, None]
(q8, sq, qd), (k8, sk, kd), (v8, sv, vd) = quant(q), quant(k), quant(v)
for n, a in [("q8", q8), ("k8", k8), ("v8", v8), ("qf", q.numpy()), ("kf", k.numpy()), ("vf", v.numpy())]:
    np.save(f"{d}/{n}.npy", a)
np.save(f"{d}/descale.npy", np.stack([sq, sk, sv]))
res = {}
for causal in [False, True]:
    c = ["--causal"] if causal else []
    raw = subprocess.run([host, "attend", "--q", f"{d}/q8.npy", "--k", f"{d}/k8.npy", "--v", f"{d}/v8.npy", "--out", f"{d}/o_raw.npy", "--dtype", "e4m3", "--descale", f"{d}/descale.npy", "--out-dtype", "f16"] + c, capture_output=True, text=True)
    qz = subprocess.run([host, "attend", "--q", f"{d}/qf.npy", "--k", f"{d}/kf.npy", "--v", f"{d}/vf.npy", "--out", f"{d}/o_q.npy", "--dtype", "e4m3", "--quantize", "--out-dtype", "f16"] + c, capture_output=True, text=True)
    print(raw.stdout, raw.stderr, qz.stdout, qz.stderr)
    o_raw, o_q = np.load(f"{d}/o_raw.npy").astype(np.float64), np.load(f"{d}/o_q.npy").astype(np.float64)
    ref = torch.nn.functional.scaled_dot_product_attention(qd, kd, vd, is_causal=causal).numpy()
    res[str(causal)] = dict(rc=[raw.returncode, qz.returncode], raw_vs_quantize_max=float(np.abs(o_raw - o_q).max()), raw_bit_identical=bool((o_raw == o_q).all()), raw_vs_f64_max=float(np.abs(o_raw - ref).max()), raw_nan=int(np.isnan(o_raw).sum()))
print(json.dumps(res, indent=1))
json.dump(res, open(f"{d}/raw_e4m3.json", "w"), indent=1)
