# Session 37, call 6 (H200): issue #12's FP8 set on the H200 for the first time (s37c; no FP8 code
# changed since session 35): every e4m3 variant beside our fp16 picks, two rounds (e4m3 first in
# round 1, fp16 first in round 2), each row from its better round.
GPU_DIR=.gpu/s37c source evidence/session35/scripts/common.sh
s 380 bench_fp8 $H bench --dtype e4m3 --shapes fp8 --rounds 2 --iters 40 --json /tmp/j/bench_fp8_h200.json
cp /tmp/l/bench_fp8.log /tmp/j/bench_fp8_h200.log
grep -E "speedup|e4m3|fp16" /tmp/l/bench_fp8.log | grep -iE "^note|x " | tail -20
pack 6
