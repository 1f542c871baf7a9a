# Session 43, call 3 (H200, right after call 2, which staged FA3's first half): the README's set
# after v58/v59 on s43b (this tree): std + (2,16,4096,256), fp16, torch's SDPA backends and FA3
# (flash-attn-4's CuTe-DSL kernels on sm90), the picks and the grid twin, three rounds alternating
# which side goes first (as session 39's c4). Carried as .fa4/b and .gpu/s43b, evidence/ aside.
bash .fa4/b/install.sh b || exit 3
GPU_DIR=.gpu/s43b source .gpu/s43b/common.sh
export PYTHONPATH=$(cat /tmp/fa4/pythonpath)
N=bench_h200
s 560 $N $H bench --shapes std --shape 2,16,4096,256 --dtype f16 --peers torch,fa3 --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --rounds 3 --iters 60 --plot /tmp/j/$N.svg --json /tmp/j/$N.json
cp /tmp/l/$N.log /tmp/j/$N.log
grep -A16 "speedup" /tmp/l/$N.log | tail -16
pack 3
