# Session 36, call 7 (H200): s36e (= this tree: every tensor map's L2 promotion 128 bytes, the two
# experimental two- and three-per-SM decode variants) : issue #11's whole bench in one run as c1
# (decode set + short prompts, paged at 16 and 256 keys per page, the varlen batch beside its dense
# and padded cases, torch's backends, two rounds), then verify of the inference sets (LSE).
GPU_DIR=.gpu/s36e source evidence/session35/scripts/common.sh
K="--kernel flash_decode_m16_n128_w8_s3_mbarrier --kernel flash_decode_m16_n64_w4_s4_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier"
s 330 bench_decode $H bench --shapes decode --shape 1,8,2048,64 --shape 1,8,2048,128 --block-size 16,256 --varlen --peers torch $K --rounds 2 --json /tmp/j/bench_decode_h200.json
cp /tmp/l/bench_decode.log /tmp/j/bench_decode_h200.log
grep -A14 "speedup" /tmp/l/bench_decode.log | tail -15; grep -E "^note: varlen" /tmp/l/bench_decode.log | tail -3
s 60 verify_inference $H verify --shapes splitkv,paged,varlen --lse --json /tmp/j/verify_inference_h200.json
pack 7
