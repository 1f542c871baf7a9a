# Session 24, call 8: build s24b (this tree), issue #11's evidence bench, three rounds (session
# 20's r13b.sh).
GPU_DIR=.gpu/s24b source evidence/session24/scripts/common.sh
KD="--kernel flash_decode_m16_n128_w8_s3_mbarrier --kernel flash_decode_m16_n64_w4_s4_mbarrier"
s 560 bench_decode $H bench --shapes decode --shape 1,8,2048,64 --shape 1,8,2048,128 --block-size 16,256 --peers torch $KD --rounds 3 --json /tmp/j/bench_decode_h100.json
cp /tmp/l/bench_decode.log /tmp/j/bench_decode_h100.log
pack 8
