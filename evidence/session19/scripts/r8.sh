# Session 19, call 8 (right after call 7, FA3 still installed): the bf16 evidence bench with t3.
source .gpux/s19/common.sh
use t3
export PYTHONPATH=$(cat /tmp/fa4/pythonpath 2>/dev/null)
s 560 bench_bf16 $H bench --shapes std --shape 2,16,4096,256 --peers torch,fa3 --dtype bf16 --iters 60 --plot /tmp/j/bench_bf16_h100.svg --json /tmp/j/bench_bf16_h100.json
cp /tmp/l/bench_bf16.log /tmp/j/bench_bf16_h100.log
pack 8
