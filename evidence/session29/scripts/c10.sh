# Session 29, call 10 (H100): issue #10's checks of s29b (v43) on the picks: verify of every
# default set in both layouts and dtypes with LSE, grouped heads (bf16, LSE), 1,000 random
# problems (with their paged and varlen ones), 250 bit-identical repeats (small and odd sets and
# a split shape).
GPU_DIR=.gpu/s29m source evidence/session29/scripts/common.sh
K192=flash_ws_m192_n128_s2_pp_ov_ps_mbarrier; K128P=flash_ws_m128_n128_s2_pp_ov_ps_mbarrier
K128=flash_ws_m128_n128_s2_pp_ov_mbarrier; K256=flash_ws_m128_n80_s2_pp_ov_mbarrier
P="--kernel $K192 --kernel $K128P --kernel $K128 --kernel $K256"
s 240 verify_picks $H verify $P --lse --layout bhsd,bshd --shape 2,8,2048,64 --shape 3,8,1000,64 --json /tmp/j/verify_picks.json
s 100 verify_gqa $H verify $P --heads-kv 2 --lse --dtype bf16 --shapes small,mission,long --shape 2,8,2048,64 --shape 3,8,1000,128 --json /tmp/j/verify_gqa.json
s 150 verify_random $H verify --random 1000 --json /tmp/j/verify_random.json
s 100 verify_repeat $H verify $P --repeat 250 --shapes small,odd --shape 2,8,2048,64 --json /tmp/j/verify_repeat.json
pack 10
