# Session 31, call 8 (H100): issue #10's checks of s31a (this tree; its kernels are session 30's,
# PTX fnv 871c1859d375f759, whose four compute-sanitizer tools ran in session30/c10) on the picks,
# the causal persistent twins among them: verify of every default set in both layouts and dtypes
# with LSE, grouped heads (bf16, LSE), 1,000 random problems (with their paged and varlen ones).
GPU_DIR=.gpu/s31a source evidence/session31/scripts/common.sh
K192=flash_ws_m192_n128_s2_pp_ov_ps_mbarrier; K128P=flash_ws_m128_n128_s2_pp_ov_ps_mbarrier
K128=flash_ws_m128_n128_s2_pp_ov_mbarrier; K256=flash_ws_m128_n80_s2_pp_ov_mbarrier
P="--kernel $K192 --kernel $K128P --kernel $K128 --kernel $K256"
s 240 verify_picks $H verify $P --lse --layout bhsd,bshd --shape 2,8,2048,64 --shape 3,8,1000,64 --shape 2,16,2048,128 --json /tmp/j/verify_picks.json
s 100 verify_gqa $H verify $P --heads-kv 2 --lse --dtype bf16 --shapes small,mission,long --shape 2,8,2048,64 --shape 3,8,1000,128 --json /tmp/j/verify_gqa.json
s 220 verify_random $H verify --random 1000 --json /tmp/j/verify_random.json
pack 8
