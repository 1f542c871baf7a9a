# Session 35, call 7 (H100): s35e's checks, each step's logs packed as it ends: verify of every
# kernel on the splitkv, paged and varlen sets (LSE, both layouts), the gpu tests, 500 random
# problems (paged, varlen, split), memcheck on the inference sets of the decode-path kernels,
# racecheck and synccheck on the varlen set of the persistent pick and on a dense head-dim-64
# problem of three items per block (v51 moved the persistent kernels' final turn hand-over), the
# api_gpu tests.
GPU_DIR=.gpu/s35e source evidence/session35/scripts/common.sh
p() { pack 7 > /dev/null; }
s 200 verify_inference $H verify --shapes splitkv,paged,varlen --lse --layout bhsd,bshd --json /tmp/j/verify_inference_h100.json; p
s 120 test_gpu /tmp/g/tests/gpu --include-ignored --test-threads 1; p
s 150 verify_random $H verify --random 500 --json /tmp/j/verify_random_inference_h100.json; p
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
D="--kernel flash_decode_m16_n128_w8_s3_mbarrier --kernel flash_decode_m16_n64_w4_s4_mbarrier --kernel flash_decode_m16_n128_w8_s3_light --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier"
s 120 san_memcheck $CS --tool memcheck --print-limit 20 $H verify --shapes splitkv,paged,varlen --seed 7 --lse $D; p
for tool in racecheck synccheck; do
  s 100 san_${tool}_varlen $CS --tool $tool --print-limit 20 $H verify --shapes varlen --seed 7 --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier; p
  s 60 san_${tool}_d64 $CS --tool $tool --print-limit 20 $H verify --shape 4,16,1000,64 --seed 7 --kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier; p
done
s 90 test_api_gpu /tmp/g/tests/api_gpu --include-ignored --test-threads 1; p
ls -la $OUT
