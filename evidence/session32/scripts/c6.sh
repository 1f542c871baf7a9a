# Session 32, calls 6 and 7 (after FA3's first half, call 5): the evidence bench of issue #10 on
# s32e (this tree: m256_n64_s3 picked where 256-row blocks make one or two full rounds, e.g.
# (2,8,2048,64)) in DTYPE (f16 in call 6, which first installs FA3's second half; bf16 in call 7):
# std + (2,16,4096,256), torch + FA3, the library's picks and the grid twin, three rounds
# alternating which side goes first.
[ "${1:-f16}" = f16 ] && bash .fa4/b/install.sh b
GPU_DIR=.gpu/s32e source evidence/session32/scripts/common.sh
export PYTHONPATH=$(cat /tmp/fa4/pythonpath 2>/dev/null)
DT=${1:-f16}; N=bench_h100; [ $DT = bf16 ] && N=bench_bf16_h100
s 500 $N $H bench --shapes std --shape 2,16,4096,256 --dtype $DT --peers torch,fa3 --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --rounds 3 --iters 60 --plot /tmp/j/$N.svg --json /tmp/j/$N.json
cp /tmp/l/$N.log /tmp/j/$N.log
grep -A24 "speedup\|vs cuDNN" /tmp/l/$N.log | tail -26
pack 6$DT
