# Session 20, call 18: build t3, issue #11's evidence bench, three rounds (after r14.sh).
source .gpux/s20/common.sh
use t3
KD="--kernel flash_decode_m16_n128_w8_s3_mbarrier --kernel flash_decode_m16_n64_w4_s4_mbarrier"
s 330 bench_decode $H bench --shapes decode --shape 1,8,2048,64 --shape 1,8,2048,128 --block-size 16,256 --peers torch $KD --rounds 3 --json /tmp/j/bench_decode_h100.json
cp /tmp/l/bench_decode.log /tmp/j/bench_decode_h100.log
pack 14
