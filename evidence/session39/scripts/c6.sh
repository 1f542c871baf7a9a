# Session 39, call 6 (H200, after FA3's first half in call 5: `bash .fa4/a/install.sh a`): the
# README's set in bf16 on the H200, on s38a (this tree's host and kernels, PTX fnv
# 91d0c0b2744859b8): std + (2,16,4096,256), bf16, torch's SDPA backends and FA3 (flash-attn-4's
# CuTe-DSL kernels on sm90), the library's picks and the grid twin, three rounds alternating which
# side goes first. Carried as .gpu/s39fa3 with evidence/ moved aside (the tree's 64 MiB limit).
bash .fa4/b/install.sh b || exit 3
GPU_DIR=.gpu/s38a source .gpu/s39fa3/common.sh
export PYTHONPATH=$(cat /tmp/fa4/pythonpath)
N=bench_bf16_h200
s 520 $N $H bench --shapes std --shape 2,16,4096,256 --dtype bf16 --peers torch,fa3 --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --rounds 3 --iters 60 --plot /tmp/j/$N.svg --json /tmp/j/$N.json
cp /tmp/l/$N.log /tmp/j/$N.log
grep -A16 "speedup" /tmp/l/$N.log | tail -16
pack 6
