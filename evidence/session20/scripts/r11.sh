# Session 20, call 11: the FP8 kernels of t2 (their softmax's max chains changed with t1): tests/fp8_gpu, verify
# (both layouts, LSE), and the FP8 bench against our fp16 picks.
source .gpux/s20/common.sh
use t2
xz -dc .gpux/s20/t2.fp8test.xz > /tmp/s20/g/fp8test; chmod +x /tmp/s20/g/fp8test
s 150 test_fp8 /tmp/s20/g/fp8test --include-ignored --test-threads=1
s 150 verify_fp8 $H verify --dtype e4m3 --layout bhsd,bshd --lse --json /tmp/j/verify_fp8_t2.json
s 120 bench_fp8 $H bench --dtype e4m3 --shapes fp8 --iters 60 --json /tmp/j/bench_fp8_h100.json
cp /tmp/l/bench_fp8.log /tmp/j/bench_fp8_h100.log
pack 11
