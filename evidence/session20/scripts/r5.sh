# Session 20, call 5: issue #11's evidence bench with t2 (t1's kernels, bench --rounds): the decode set + (1,8,2048,64/128),
# paged at 16 and 256 keys per page, torch's backends, three rounds alternating which side goes first.
source .gpux/s20/common.sh
use t2
KD="--kernel flash_decode_m16_n128_w8_s3_mbarrier --kernel flash_decode_m16_n64_w4_s4_mbarrier"
s 480 bench_decode $H bench --shapes decode --shape 1,8,2048,64 --shape 1,8,2048,128 --block-size 16,256 --peers torch $KD --rounds 3 --json /tmp/j/bench_decode_h100.json
cp /tmp/l/bench_decode.log /tmp/j/bench_decode_h100.log
pack 5 > /dev/null
RK="--kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n80_s2_pp_ov_mbarrier --kernel flash_decode_m16_n128_w8_s3_mbarrier --kernel flash_decode_m16_n128_w8_s3_light"
s 100 repeat_picks $H verify --repeat 250 --shapes small,odd,splitkv --shape 1,45,559,1157,64 $RK --json /tmp/j/verify_repeat_picks_t2.json
pack 5
