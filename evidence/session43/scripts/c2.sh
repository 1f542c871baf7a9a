# Session 43, call 2 (H200): FA3's first half staged (`bash .fa4/a/install.sh a`), then the e4m3
# persistent twin against the head-dim-128 pick (s43b = s42e's host and kernels, this tree), the
# FP8 set and three more head-dim-128 shapes, twice. Carried as .fa4/a and .gpu/s43b with
# evidence/ moved aside (the tree's 64 MiB limit).
bash .fa4/a/install.sh a
GPU_DIR=.gpu/s43b source .gpu/s43b/common.sh
F8=flash_ws_fp8_m128_n128_s2_pp_ov_mbarrier
PS=flash_ws_fp8_m128_n128_s2_pp_ov_ps_mbarrier
X="--shape 4,32,2048,128 --shape 1,16,16384,128 --shape 8,16,1024,128"
s 150 fp8_1 $H bench --dtype e4m3 --shapes fp8 $X --iters 40 --kernel $F8 --kernel $PS --json /tmp/j/fp8_1.json
s 150 fp8_2 $H bench --dtype e4m3 --shapes fp8 $X --iters 40 --kernel $PS --kernel $F8 --json /tmp/j/fp8_2.json
pack 2 > /dev/null
for f in /tmp/l/fp8_*.log; do echo "== $f"; grep -E "^flash_ws_fp8" $f | grep -v pick | awk '{print $1,$3,$4,$5,$6,$7,$8,$9}'; done
