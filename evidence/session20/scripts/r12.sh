# Session 20, call 12: t2's picks on every default shape set, both layouts and dtypes, with LSE; and multi-query + LSE.
source .gpux/s20/common.sh
use t2
PK="--kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n80_s2_pp_ov_mbarrier --kernel flash_decode_m16_n128_w8_s3_mbarrier"
s 280 verify_picks $H verify --layout bhsd,bshd --lse --dtype f16,bf16 $PK --json /tmp/j/verify_picks_t2.json
s 150 verify_mqa $H verify --shapes small,odd,edge,splitkv,large --heads-kv 1 --lse --layout bhsd,bshd $PK --json /tmp/j/verify_mqa_lse_t2.json
pack 12
