# Session 41: writes Gaussian float32 .npy files without numpy (the GPU machine's python may lack
# it). Usage: python3 mknpy.py DIR B H S D SEED -> DIR/q.npy, k.npy, v.npy
import random, struct, sys
d, b, h, s, dim, seed = sys.argv[1], *map(int, sys.argv[2:7])
rng = random.Random(seed)
shape = (b, h, s, dim)
header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d, %d, %d), }" % shape
header += " " * (63 - (10 + len(header)) % 64) + "\n"
n = b * h * s * dim
for name in "qkv":
    with open(f"{d}/{name}.npy", "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack(f"<{n}f", *(rng.gauss(0.0, 1.0) for _ in range(n))))
