# Session 14, call 2: paged through the copy engine against the contiguous cache; varlen against dense in both layouts (build t1).
B=t1 source .gpux/s14/common.sh
T="--kernel flash_decode_m16_n128_w8_s3_mbarrier --kernel flash_decode_m16_n64_w4_s4_mbarrier"
L="--kernel flash_decode_m16_n128_w8_s3_light"
s 240 bench $H bench --shapes decode $T $L --block-size 16,256 --peers torch --json /tmp/j/bench_paged.json
W="--kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n176_s2_pp_ov_mbarrier"
s 120 varlen_bshd $H bench --varlen --shape 1,16,128,128 $W --layout bshd --json /tmp/j/varlen_bshd.json
s 120 varlen_bhsd $H bench --varlen --shape 1,16,128,128 $W --layout bhsd --json /tmp/j/varlen_bhsd.json
grep -E "^note: varlen" /tmp/l/varlen_*.log
grep -E "_paged|mbarrier " /tmp/l/bench.log | head -40
pack 2
