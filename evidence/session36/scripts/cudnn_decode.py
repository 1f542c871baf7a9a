# Session 36: one decode call through torch's cuDNN SDPA backend, inside an NVTX range named
# "prof", for Nsight Compute to profile beside our kernel (c3.sh). Args: B H_q H_kv S_k D.
import sys
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

b, h, h_kv, s_k, d = (int(x) for x in sys.argv[1:6])
g = torch.Generator(device="cuda").manual_seed(36)
q = torch.randn(b, h, 1, d, device="cuda", dtype=torch.float16, generator=g)
k = torch.randn(b, h_kv, s_k, d, device="cuda", dtype=torch.float16, generator=g)
v = torch.randn(b, h_kv, s_k, d, device="cuda", dtype=torch.float16, generator=g)
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    for _ in range(3):  # warm-up: plan building, autotuning
        F.scaled_dot_product_attention(q, k, v, enable_gqa=h != h_kv)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push("prof")
    F.scaled_dot_product_attention(q, k, v, enable_gqa=h != h_kv)
    torch.cuda.nvtx.range_pop()
torch.cuda.synchronize()
print("done", b, h, h_kv, s_k, d)
