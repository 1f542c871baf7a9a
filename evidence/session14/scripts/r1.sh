# Session 14, call 1: correctness of the paged copy-engine entry points (build t1).
B=t1 source .gpux/s14/common.sh
T="--kernel flash_decode_m16_n128_w8_s3_mbarrier --kernel flash_decode_m16_n64_w4_s4_mbarrier"
L="--kernel flash_decode_m16_n128_w8_s3_light --kernel flash_decode_m32_n64_w4_s3_light"
s 200 verify $H verify $T $L --shapes splitkv,paged --lse --layout bhsd,bshd --json /tmp/j/verify_paged.json
s 100 verify_gqa $H verify $T $L --heads-kv 2 --shapes splitkv,paged --lse --json /tmp/j/verify_paged_gqa.json
s 150 random $H verify --random 300 $T $L --json /tmp/j/random_paged.json
for tool in memcheck racecheck synccheck; do s 120 san_$tool compute-sanitizer --tool $tool $H verify --quick $T; done
grep -E "paged" /tmp/l/verify.log | head -12
pack 1
