# Session 24, call 3: the GPU tests and compute-sanitizer on build s24b (programmatic dependent
# launch on), and the bench's (2,8,2048,64) and small shapes once more with it on and off.
GPU_DIR=.gpu/s24b source evidence/session24/scripts/common.sh
for t in gpu api_gpu fp8_gpu; do s 300 test_$t /tmp/g/tests/$t --include-ignored --test-threads=1; done
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
K="--kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --kernel flash_decode_m16_n128_w8_s3_mbarrier --kernel flash_mma_m64_n64_w4_s2_light"
for tool in memcheck racecheck synccheck; do s 200 san_$tool $CS --tool $tool --print-limit 20 $H verify --quick --seed 7 $K; done
B="bench --shapes small,mission --shape 2,8,2048,64 --shape 1,8,2048,64 --shape 1,8,2048,128 --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --iters 100"
s 200 bench_on3 $H $B --peers torch --json /tmp/j/bench_on3.json
s 200 bench_off3 env FLASHRS_PDL=0 $H $B --json /tmp/j/bench_off3.json
s 200 bench_on4 $H $B --json /tmp/j/bench_on4.json
s 200 bench_off4 env FLASHRS_PDL=0 $H $B --json /tmp/j/bench_off4.json
pack 3
