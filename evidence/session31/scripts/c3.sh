# Session 31, calls 3 and 4 (after FA3's two halves, calls 1 and 2): the evidence bench of issue
# #10 on s31a (this tree; the library's causal picks now the persistent twins) in DTYPE (f16 in
# call 3, bf16 in call 4): std + (2,16,4096,256), torch + FA3, the library's picks and the grid
# twin, three rounds alternating which side goes first.
GPU_DIR=.gpu/s31a source evidence/session31/scripts/common.sh
export PYTHONPATH=$(cat /tmp/fa4/pythonpath 2>/dev/null)
DT=${1:-f16}; N=bench_h100; [ $DT = bf16 ] && N=bench_bf16_h100
s 585 $N $H bench --shapes std --shape 2,16,4096,256 --dtype $DT --peers torch,fa3 --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --rounds 3 --iters 60 --plot /tmp/j/$N.svg --json /tmp/j/$N.json
cp /tmp/l/$N.log /tmp/j/$N.log
grep -A24 "speedup\|vs cuDNN" /tmp/l/$N.log | tail -26
pack 3$DT
