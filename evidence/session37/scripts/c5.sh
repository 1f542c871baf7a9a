# Session 37, call 5 (H200): s37c's checks, each step's logs packed as it ends: the gpu tests, 500
# random problems (paged, varlen, split), memcheck on the splitkv and paged sets of the decode
# pick and its three-per-SM twin (the paged boxes and the lookahead changed), racecheck and
# synccheck on the paged set of both, the api_gpu tests.
GPU_DIR=.gpu/s37c source evidence/session35/scripts/common.sh
p() { pack 5 > /dev/null; }
s 120 test_gpu /tmp/g/tests/gpu --include-ignored --test-threads 1; p
s 150 verify_random $H verify --random 500 --json /tmp/j/verify_random_inference_h200.json; p
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
D="--kernel flash_decode_m16_n128_w8_s3_mbarrier --kernel flash_decode_m16_n64_w4_s2_mbarrier"
s 100 san_memcheck $CS --tool memcheck --print-limit 20 $H verify --shapes splitkv,paged --seed 7 --lse $D; p
for tool in racecheck synccheck; do
  s 60 san_${tool}_paged $CS --tool $tool --print-limit 20 $H verify --shapes paged --seed 7 $D; p
done
s 90 test_api_gpu /tmp/g/tests/api_gpu --include-ignored --test-threads 1; p
for f in /tmp/l/*.log; do echo "$(basename $f): $(grep -E '^PASS|^FAIL|test result|ERROR SUMMARY|RACECHECK SUMMARY' $f | tail -1)"; done
ls -la $OUT
