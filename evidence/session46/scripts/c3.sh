# Session 46, call 3 (H200): s46base = this tree's build (acacb55's kernels and host, PTX fnv
# e1677a006fca279a; the decode kernels are session 37's). Issue #11's whole bench as session 38's
# c5 (decode set and short prompts, paged at 16 and 256 keys per page, the varlen batch, torch's
# backends, two rounds), then (8,32,1,8192) alone over five rounds.
GPU_DIR=.gpu/s46base source .gpu/s46base/common.sh
K="--kernel flash_decode_m16_n128_w8_s3_mbarrier --kernel flash_decode_m16_n64_w4_s4_mbarrier --kernel flash_decode_m16_n64_w4_s2_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier"
s 420 bench_decode $H bench --shapes decode --shape 1,8,2048,64 --shape 1,8,2048,128 --block-size 16,256 --varlen --peers torch $K --rounds 2 --json /tmp/j/bench_decode_h200.json
cp /tmp/l/bench_decode.log /tmp/j/bench_decode_h200.log
pack 3 > /dev/null
grep -A16 "speedup" /tmp/l/bench_decode.log | tail -17 | cut -c1-150; grep -E "^note: (varlen|paged)" /tmp/l/bench_decode.log | tail -16
s 150 decode_8x8192 $H bench --shape 8,32,1,8192,128 --kernel flash_decode_m16_n128_w8_s3_mbarrier --peers torch --rounds 5 --json /tmp/j/decode_8x8192.json
grep -A3 "speedup" /tmp/l/decode_8x8192.log | tail -3 | cut -c1-150
pack 3 > /dev/null
