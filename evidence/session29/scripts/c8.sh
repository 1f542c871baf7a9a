# Session 29, calls 8 and 9 (after FA3's two halves, calls 6 and 7): the evidence bench of issue
# #10 on this tree's build (s29b, v43; carried as .gpu/s29m, host and kernels only) in DTYPE (f16 in call 8, bf16 in call 9): std +
# (2,16,4096,256), torch + FA3, the library's picks and their grid twin, three rounds alternating
# which side goes first.
GPU_DIR=.gpu/s29m source evidence/session29/scripts/common.sh
export PYTHONPATH=$(cat /tmp/fa4/pythonpath 2>/dev/null)
DT=${1:-f16}; N=bench_h100; [ $DT = bf16 ] && N=bench_bf16_h100
s 585 $N $H bench --shapes std --shape 2,16,4096,256 --dtype $DT --peers torch,fa3 --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --rounds 3 --iters 60 --plot /tmp/j/$N.svg --json /tmp/j/$N.json
cp /tmp/l/$N.log /tmp/j/$N.log
grep -A20 "speedup\|vs cuDNN" /tmp/l/$N.log | tail -22
pack 8$DT
