# Session 34, call 2 (H100): s34a: issue #11's checks on this tree: verify of every kernel on the
# splitkv, paged and varlen sets (LSE, both layouts), grouped (--heads-kv 2), 500 random problems
# (+125 paged, +125 varlen), memcheck and racecheck over verify --quick of the decode kernels and
# the persistent flash_ws (its paged-free varlen set included), the gpu and api_gpu tests.
GPU_DIR=.gpu/s34a source evidence/session34/scripts/common.sh
s 200 verify_inference $H verify --shapes splitkv,paged,varlen --lse --layout bhsd,bshd --json /tmp/j/verify_inference_h100.json
s 100 verify_inference_gqa $H verify --shapes splitkv,paged --heads-kv 2 --lse --json /tmp/j/verify_inference_gqa_h100.json
s 150 verify_random $H verify --random 500 --json /tmp/j/verify_random_inference_h100.json
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
D="--kernel flash_decode_m16_n128_w8_s3_mbarrier --kernel flash_decode_m16_n64_w4_s4_mbarrier --kernel flash_decode_m16_n128_w8_s3_light --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier"
for tool in memcheck racecheck; do
  s 100 san_$tool $CS --tool $tool --print-limit 20 $H verify --shapes splitkv,paged,varlen --seed 7 --lse $D
done
for t in gpu api_gpu; do s 120 test_$t /tmp/g/tests/$t --include-ignored --test-threads 1; done
pack 2
