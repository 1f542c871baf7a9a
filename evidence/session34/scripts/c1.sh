# Session 34, call 1 (H100): s34a (= HEAD d7882b2): issue #11's whole bench in one run: the decode
# set + the two short prompts, paged at 16 and 256 keys per page, the varlen batch (16 sequences
# of 1-4096, H=16, D=128) beside its dense and padded cases, the dispatch's picks, the decode
# kernels and the persistent flash_ws, torch's backends in the same run, two rounds.
GPU_DIR=.gpu/s34a source evidence/session34/scripts/common.sh
K="--kernel flash_decode_m16_n128_w8_s3_mbarrier --kernel flash_decode_m16_n64_w4_s4_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier"
s 585 bench_decode $H bench --shapes decode --shape 1,8,2048,64 --shape 1,8,2048,128 --block-size 16,256 --varlen --peers torch $K --rounds 2 --json /tmp/j/bench_decode_h100.json
cp /tmp/l/bench_decode.log /tmp/j/bench_decode_h100.log
grep -A14 "speedup" /tmp/l/bench_decode.log | tail -15; grep -E "^note" /tmp/l/bench_decode.log | tail -8
pack 1
