# Session 14, call 5: the correctness evidence of issue #11 (build t2).
B=t2 source .gpux/s14/common.sh
s 200 verify $H verify --shapes splitkv,paged,varlen --lse --layout bhsd,bshd --json /tmp/j/verify_inference_h100.json
s 120 verify_gqa $H verify --shapes splitkv,paged --heads-kv 2 --lse --json /tmp/j/verify_inference_gqa_h100.json
s 200 random $H verify --random 500 --json /tmp/j/verify_random_inference_h100.json
D="--kernel flash_decode_m16_n128_w8_s3_mbarrier --kernel flash_decode_m16_n64_w4_s4_mbarrier --kernel flash_decode_m16_n128_w8_s3_light --kernel flash_decode_m32_n64_w4_s3_light --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n176_s2_pp_ov_mbarrier"
for tool in memcheck racecheck; do s 150 san_$tool compute-sanitizer --tool $tool $H verify --quick $D; done
pack 5
