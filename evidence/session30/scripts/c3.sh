# Session 30, call 3 (H100): checks of s30c (v44: flash_ws's set-up before its wait for the
# launch before): verify of the picks on every default set (both layouts and dtypes, LSE),
# grouped heads, the varlen twins, e4m3, 300 random problems, 20 bit-identical repeats.
GPU_DIR=.gpu/s30c source evidence/session30/scripts/common.sh
K192=flash_ws_m192_n128_s2_pp_ov_ps_mbarrier; K128P=flash_ws_m128_n128_s2_pp_ov_ps_mbarrier
K128=flash_ws_m128_n128_s2_pp_ov_mbarrier; K256=flash_ws_m128_n80_s2_pp_ov_mbarrier
P="--kernel $K192 --kernel $K128P --kernel $K128 --kernel $K256"
s 240 verify_picks $H verify $P --lse --layout bhsd,bshd --dtype f16,bf16 --shape 2,8,2048,64 --shape 3,8,1000,64 --json /tmp/j/verify_picks.json
s 100 verify_gqa $H verify $P --heads-kv 2 --lse --dtype bf16 --shapes small,mission,long --shape 2,8,2048,64 --shape 3,8,1000,128 --json /tmp/j/verify_gqa.json
s 100 verify_varlen $H verify --shapes varlen --lse --json /tmp/j/verify_varlen.json
s 100 verify_fp8 $H verify --dtype e4m3 --lse --shape 1,136,128,4096,128 --shape 2,8,2048,128 --json /tmp/j/verify_fp8.json
s 120 verify_random $H verify --random 300 --json /tmp/j/verify_random.json
s 100 verify_repeat $H verify $P --repeat 20 --shapes small,odd --shape 2,8,2048,64 --json /tmp/j/verify_repeat.json
pack 3
