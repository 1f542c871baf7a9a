# Session 20, calls 16 and 17 (right after FA3's two halves, calls 14 and 15: `bash .fa4/a/install.sh a`, then
# `cp .fa4/b/*.whl /tmp/fa4/ && bash .fa4/b/install.sh b`): build t3, the evidence bench of issue #10 in DTYPE:
# std + (2,16,4096,256), torch + FA3, the library's picks and their grid twin, three rounds alternating which side goes first.
source .gpux/s20/common.sh
use t3
export PYTHONPATH=$(cat /tmp/fa4/pythonpath 2>/dev/null)
DT=${1:-f16}; N=bench_h100; [ $DT = bf16 ] && N=bench_bf16_h100
s 580 $N $H bench --shapes std --shape 2,16,4096,256 --dtype $DT --peers torch,fa3 --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --rounds 3 --iters 60 --plot /tmp/j/$N.svg --json /tmp/j/$N.json
cp /tmp/l/$N.log /tmp/j/$N.log
pack 15
