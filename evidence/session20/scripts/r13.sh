# Session 20, call 13: build t3 = t2 without the max-chain start (it made three unpicked variants spill; this
# tree's kernels). Checks of the picks, the decode variants and FP8, the FP8 bench, then issue #11's evidence bench, three rounds.
source .gpux/s20/common.sh
use t3
PK="--kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n80_s2_pp_ov_mbarrier"
DEC="--kernel flash_decode_m16_n128_w8_s3_mbarrier --kernel flash_decode_m16_n64_w4_s4_mbarrier --kernel flash_decode_m16_n128_w8_s3_light --kernel flash_decode_m32_n64_w4_s3_light"
s 60 verify_picks $H verify --shapes small,odd,edge,large --layout bhsd,bshd --lse --dtype f16,bf16 $PK --json /tmp/j/verify_picks_t3.json
s 60 verify_dec $H verify --shapes small,splitkv,paged,varlen --lse --layout bhsd,bshd $DEC --json /tmp/j/verify_dec_t3.json
s 60 random $H verify --random 300 $PK $DEC --json /tmp/j/verify_random_t3.json
s 40 repeat_dec $H verify --repeat 250 --shapes splitkv --kernel flash_decode_m16_n128_w8_s3_mbarrier --json /tmp/j/verify_repeat_dec_t3.json
s 60 verify_fp8 $H verify --dtype e4m3 --layout bhsd,bshd --lse --json /tmp/j/verify_fp8_t3.json
s 90 bench_fp8 $H bench --dtype e4m3 --shapes fp8 --iters 60 --json /tmp/j/bench_fp8_h100.json
cp /tmp/l/bench_fp8.log /tmp/j/bench_fp8_h100.log
pack 13
