# Call 2: build t1 (flash_decode through the copy engine: _mbarrier variants) verified, benched
# against the light ones, flash_ws and cuDNN on the decode set; sanitizers on the new variant.
B=t1 source .gpux/s13/common.sh
T="--kernel flash_decode_m16_n128_w8_s3_mbarrier --kernel flash_decode_m16_n64_w4_s4_mbarrier"
L="--kernel flash_decode_m16_n128_w8_s3_light --kernel flash_decode_m16_n64_w4_s4_light"
s 150 verify $H verify $T --kernel flash_decode_m16_n128_w8_s3_light --shapes small,odd,edge,splitkv,decode --lse --layout bhsd,bshd --json /tmp/j/verify_tma.json
s 100 verify_gqa $H verify $T --heads-kv 2 --shapes small,odd,edge,splitkv --lse --layout bhsd,bshd --json /tmp/j/verify_tma_gqa.json
s 100 verify_mqa $H verify $T --heads-kv 1 --shapes small,odd,edge,splitkv --lse --json /tmp/j/verify_tma_mqa.json
s 120 random $H verify --random 200 $T --json /tmp/j/random_tma.json
s 240 bench $H bench --shapes decode $T $L --kernel flash_ws_m128_n128_s2_ov_mbarrier --kernel flash_ws_m128_n176_s2_pp_ov_mbarrier --peers torch --json /tmp/j/bench_decode_t1.json
for tool in memcheck racecheck synccheck; do s 150 san_$tool compute-sanitizer --tool $tool $H verify --quick --kernel flash_decode_m16_n128_w8_s3_mbarrier; done
grep -E "bar|barrier" /tmp/l/verify.log | head -20
grep -E "^ *\[" /tmp/l/bench.log | tail -8
pack 2
