# Session 16, call 7 (the machine still warm from call 6, FA3 installed in /tmp/fa4): t3's evidence bench in bf16.
rm -rf /tmp/l /tmp/j
B=t3 source .gpux/fa/common.sh
export PYTHONPATH=$(cat /tmp/fa4/pythonpath 2>/dev/null)
s 500 bench_bf16 $H bench --shapes std --shape 2,16,4096,256 --dtype bf16 --peers torch,fa3 --iters 40 --json /tmp/j/bench_bf16_h100.json
cp /tmp/l/bench_bf16.log /tmp/j/bench_bf16_h100.log
pack 7; cp /tmp/j/bench_bf16_h100.log $OUT/
