# Session 43, call 8 (H200, right after call 7): the README's set in bf16 after v58/v59, on s43b
# (session 42's final build; its 16-bit kernels compile to this tree's SASS): std +
# (2,16,4096,256), torch's SDPA backends and FA3, the picks and the grid twin, three rounds (as
# session 39's c6). Carried as .fa4/b and .gpu/s43b, evidence/ aside.
bash .fa4/b/install.sh b || exit 3
GPU_DIR=.gpu/s43b source .gpu/s43b/common.sh
export PYTHONPATH=$(cat /tmp/fa4/pythonpath)
N=bench_bf16_h200
s 560 $N $H bench --shapes std --shape 2,16,4096,256 --dtype bf16 --peers torch,fa3 --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --rounds 3 --iters 60 --plot /tmp/j/$N.svg --json /tmp/j/$N.json
cp /tmp/l/$N.log /tmp/j/$N.log
grep -A16 "speedup" /tmp/l/$N.log | tail -16
pack 8
