# Call 4 (evidence): build t3, the commit under test. The decode bench for #11 (decode set with
# paged rows at 16 and 256 keys per page, the two short prompts), the varlen bench, every
# inference path verified against float64, 500 random problems, memcheck and racecheck.
B=t3 source .gpux/s13/common.sh
s 300 bench $H bench --shapes decode --shape 1,8,2048,64 --shape 1,8,2048,128 --block-size 16,256 --peers torch --json /tmp/j/bench_decode_h100.json
s 120 varlen $H bench --varlen --shapes small --peers torch --json /tmp/j/bench_varlen_h100.json
s 150 verify $H verify --shapes splitkv,paged,varlen --lse --layout bhsd,bshd --json /tmp/j/verify_inference_h100.json
s 150 verify_gqa $H verify --shapes splitkv --heads-kv 2 --lse --json /tmp/j/verify_inference_gqa_h100.json
s 200 random $H verify --random 500 --json /tmp/j/verify_random_inference_h100.json
D="--kernel flash_decode_m16_n128_w8_s3_mbarrier --kernel flash_decode_m16_n64_w4_s4_mbarrier --kernel flash_decode_m16_n128_w8_s3_light --kernel flash_decode_m32_n64_w4_s3_light"
for tool in memcheck racecheck; do s 200 san_$tool compute-sanitizer --tool $tool $H verify --quick $D; done
grep -E "^ *\[" /tmp/l/bench.log | tail -10
pack 4
