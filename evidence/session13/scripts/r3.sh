# Call 3: build t2 (copy-engine flash_decode + the slices merged by the last one, no combine
# kernel): verify every decode path, random problems, the decode bench with paged rows, sanitizers.
B=t2 source .gpux/s13/common.sh
T="--kernel flash_decode_m16_n128_w8_s3_mbarrier --kernel flash_decode_m16_n64_w4_s4_mbarrier"
L="--kernel flash_decode_m16_n128_w8_s3_light --kernel flash_decode_m16_n64_w4_s4_light --kernel flash_decode_m32_n64_w4_s3_light"
s 200 verify $H verify $T $L --shapes small,odd,edge,splitkv,paged,varlen --lse --layout bhsd,bshd --json /tmp/j/verify_decode.json
s 100 verify_gqa $H verify $T $L --heads-kv 2 --shapes splitkv --lse --layout bhsd,bshd --json /tmp/j/verify_decode_gqa.json
s 150 random $H verify --random 500 $T $L --json /tmp/j/random_decode.json
s 240 bench $H bench --shapes decode $T $L --kernel flash_ws_m128_n128_s2_ov_mbarrier --kernel flash_ws_m128_n176_s2_pp_ov_mbarrier --block-size 16,256 --peers torch --json /tmp/j/bench_decode_t2.json
for tool in memcheck racecheck synccheck initcheck; do s 200 san_$tool compute-sanitizer --tool $tool $H verify --quick $T --kernel flash_decode_m16_n128_w8_s3_light; done
grep -E "^ *\[" /tmp/l/bench.log | tail -8
pack 3
