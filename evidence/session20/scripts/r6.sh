# Session 20, call 6: every variant at (1,8,2048,64), where the pick ties cuDNN (issue #11), three rounds with torch;
# the determinism check of the changed kernels (t2 = t1's kernels), split in two short runs.
source .gpux/s20/common.sh
use t2
s 240 sweep_d64 $H bench --shape 1,8,2048,64 --peers torch --rounds 3 --json /tmp/j/sweep_1x8x2048x64.json
PS="--kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier"
s 100 repeat_ws $H verify --repeat 250 --shapes small,odd --shape 1,45,559,1157,64 $PS --json /tmp/j/verify_repeat_ws_t2.json
s 100 repeat_dec $H verify --repeat 250 --shapes splitkv --kernel flash_decode_m16_n128_w8_s3_mbarrier --kernel flash_decode_m16_n128_w8_s3_light --json /tmp/j/verify_repeat_dec_t2.json
pack 6
