# Session 24, calls 6 and 7 (after FA3's two halves, calls 4 and 5: `bash .fa4/a/install.sh a`,
# then `bash .fa4/b/install.sh b`): build s24b (this tree), the evidence bench of issue #10 in
# DTYPE (f16 in call 6, bf16 in call 7): std + (2,16,4096,256), torch + FA3, the library's picks
# and their grid twin, three rounds alternating which side goes first (session 20's r14.sh).
GPU_DIR=.gpu/s24b source evidence/session24/scripts/common.sh
export PYTHONPATH=$(cat /tmp/fa4/pythonpath 2>/dev/null)
DT=${1:-f16}; N=bench_h100; [ $DT = bf16 ] && N=bench_bf16_h100
s 585 $N $H bench --shapes std --shape 2,16,4096,256 --dtype $DT --peers torch,fa3 --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --rounds 3 --iters 60 --plot /tmp/j/$N.svg --json /tmp/j/$N.json
cp /tmp/l/$N.log /tmp/j/$N.log
pack 6
