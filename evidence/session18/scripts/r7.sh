# Session 18, call 7: build t3, issue #11's benches with the clock-aware warm-ups (500 ms per timed set, ours and torch's alike): the decode set + (1,8,2048,64/128), paged at 16 and 256 keys per page; the varlen batch, non-causal and causal.
source .gpux/s18/common.sh
use t3
KD="--kernel flash_decode_m16_n128_w8_s3_mbarrier --kernel flash_decode_m16_n64_w4_s4_mbarrier --kernel flash_decode_m16_n128_w8_s3_light --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n128_s2_ov_mbarrier"
s 330 bench_decode $H bench --shapes decode --shape 1,8,2048,64 --shape 1,8,2048,128 --block-size 16,256 --peers torch $KD --json /tmp/j/bench_decode_h100.json
cp /tmp/l/bench_decode.log /tmp/j/bench_decode_h100.log
pack 7 > /dev/null
KV="--kernel flash_ws_m128_n128_s2_mbarrier --kernel flash_ws_m128_n128_s2_pp_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier"
s 120 varlen $H bench --varlen --shape 1,16,128,128 --peers torch $KV --json /tmp/j/bench_varlen_h100.json
s 120 varlen_causal $H bench --varlen --causal --shape 1,16,128,128 --peers torch $KV --json /tmp/j/bench_varlen_causal_h100.json
grep -E "^note: varlen" /tmp/l/varlen.log /tmp/l/varlen_causal.log
pack 7
