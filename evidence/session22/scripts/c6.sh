# Session 22, call 6: this tree (u4): the FP8 set, every e4m3 variant beside our fp16 picks, three
# rounds (session 21's evidence command).
source evidence/session22/scripts/common.sh
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
s 560 bench_fp8 $H bench --dtype e4m3 --shapes fp8 --rounds 3 --iters 40 --json /tmp/j/bench_fp8_h100.json
cp /tmp/l/bench_fp8.log /tmp/j/bench_fp8_h100.log
pack 6
