# Session 32, call 8 (H100): issue #10's checks on s32e, the picks of this tree (m256_n64_s3 new):
# verify of every default set (both layouts and dtypes, LSE), grouped heads with LSE in bf16,
# 1,000 random problems.
GPU_DIR=.gpu/s32e source evidence/session32/scripts/common.sh
K256=flash_ws_m256_n64_s3_pp_ov_mbarrier; K192=flash_ws_m192_n128_s2_pp_ov_ps_mbarrier
K128P=flash_ws_m128_n128_s2_pp_ov_ps_mbarrier; K128=flash_ws_m128_n128_s2_pp_ov_mbarrier
K80=flash_ws_m128_n80_s2_pp_ov_mbarrier
P="--kernel $K256 --kernel $K192 --kernel $K128P --kernel $K128 --kernel $K80"
s 260 verify_picks $H verify $P --lse --layout bhsd,bshd --shape 2,8,2048,64 --shape 3,8,1000,64 --shape 2,16,2048,128 --json /tmp/j/verify_picks.json
s 100 verify_gqa $H verify $P --heads-kv 2 --lse --dtype bf16 --shapes small,mission,long --shape 2,8,2048,64 --shape 3,8,1000,128 --json /tmp/j/verify_gqa.json
s 220 verify_random $H verify --random 1000 --json /tmp/j/verify_random.json
pack 8
