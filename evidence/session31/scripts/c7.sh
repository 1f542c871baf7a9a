# Session 31, call 7 (H100): issue #11's decode benches on s31a (this tree): the decode set + the
# two short prompts, paged at 16 and 256 keys per page, the dispatch's decode kernels and the
# flash_ws pick, torch's backends in the same run, two rounds.
GPU_DIR=.gpu/s31a source evidence/session31/scripts/common.sh
KD="--kernel flash_decode_m16_n128_w8_s3_mbarrier --kernel flash_decode_m16_n64_w4_s4_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier"
s 560 bench_decode $H bench --shapes decode --shape 1,8,2048,64 --shape 1,8,2048,128 --block-size 16,256 --peers torch $KD --rounds 2 --json /tmp/j/bench_decode_h100.json
cp /tmp/l/bench_decode.log /tmp/j/bench_decode_h100.log
grep -A16 "speedup" /tmp/l/bench_decode.log | tail -17
pack 7
