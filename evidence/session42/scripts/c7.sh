# Session 42, call 7 (H200): s42e (v59 as committed) checks and issue #12's set: the gpu, api_gpu
# and fp8_gpu tests; verify of the varlen set (LSE, both layouts: the persistent varlen items take
# the vote too) and 200 random problems; racecheck and synccheck of the persistent picks at head
# dims 64 and 128 (varlen and a dense problem of three items per block); the FP8 set, two rounds.
GPU_DIR=.gpu/s42e source evidence/session35/scripts/common.sh
p() { pack 7 > /dev/null; }
s 150 test_gpu /tmp/g/tests/gpu --include-ignored --test-threads 1; p
s 90 test_api_gpu /tmp/g/tests/api_gpu --include-ignored --test-threads 1; p
s 90 test_fp8_gpu /tmp/g/tests/fp8_gpu --include-ignored --test-threads 1; p
s 120 verify_varlen $H verify --shapes varlen --lse --layout bhsd,bshd --json /tmp/j/verify_varlen.json; p
s 120 verify_random $H verify --random 200 --json /tmp/j/verify_random.json; p
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
for tool in racecheck synccheck; do
  s 100 san_${tool}_varlen $CS --tool $tool --print-limit 20 $H verify --shapes varlen --seed 7 --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier; p
  s 60 san_${tool}_d64 $CS --tool $tool --print-limit 20 $H verify --shape 4,16,1000,64 --seed 7 --kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier; p
done
s 380 bench_fp8 $H bench --dtype e4m3 --shapes fp8 --rounds 2 --iters 40 --json /tmp/j/bench_fp8_h200.json
cp /tmp/l/bench_fp8.log /tmp/j/bench_fp8_h200.log
pack 7
grep -hE "^test result|^PASS|^FAIL|SUMMARY" /tmp/l/*.log
grep -E "pick|^flash_ws_m" /tmp/l/bench_fp8.log
