# Session 37, call 7 (H200): the two ungrouped decode shapes of issue #11 that c4 put just under
# cuDNN (0.997x and 0.993x), alone, with torch's backends, five rounds (as session 35's c8 did for
# grouped B=16): whether the gap is real or the spread of one run.
GPU_DIR=.gpu/s37c source evidence/session35/scripts/common.sh
s 300 bench_decode5 $H bench --shape 1,32,1,32768,128 --shape 8,32,1,8192,128 --peers torch --kernel flash_decode_m16_n128_w8_s3_mbarrier --rounds 5 --json /tmp/j/bench_decode5.json
grep -A4 "speedup" /tmp/l/bench_decode5.log
pack 7
