# Session 42, call 5 (H200): s42d (v58 as committed: the keep-or-move vote). The FP8 GPU tests, with the new one whose row maxima
# move in many tiles (the speculative exponentials taken again), then issue #12's FP8 set: every
# e4m3 variant beside our fp16 picks, two rounds (e4m3 first in round 1, fp16 first in round 2).
GPU_DIR=.gpu/s42d source evidence/session35/scripts/common.sh
s 200 test_fp8_gpu /tmp/g/tests/fp8_gpu --include-ignored --test-threads 1; pack 5 > /dev/null
grep -E "^test |test result" /tmp/l/test_fp8_gpu.log
s 380 bench_fp8 $H bench --dtype e4m3 --shapes fp8 --rounds 2 --iters 40 --json /tmp/j/bench_fp8_h200.json
cp /tmp/l/bench_fp8.log /tmp/j/bench_fp8_h200.log
grep -E "^flash_ws|^note" /tmp/l/bench_fp8.log | tail -40
pack 5
