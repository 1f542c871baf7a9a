# Session 37, call 4 (H200): s37c = s37b's kernels (the same PTX) + the paged dispatch by page size
# (pages of 16 or 32 keys over a full grid take the three-per-SM twin) + bench's paged notes and
# its varlen batch beside its dense cases. Issue #11's whole bench as session 36's c7 (decode set
# and short prompts, paged at 16 and 256 keys per page, the varlen batch, torch's backends, two
# rounds) with the twin named too, then the inference verify (LSE).
GPU_DIR=.gpu/s37c source evidence/session35/scripts/common.sh
K="--kernel flash_decode_m16_n128_w8_s3_mbarrier --kernel flash_decode_m16_n64_w4_s4_mbarrier --kernel flash_decode_m16_n64_w4_s2_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier"
s 400 bench_decode $H bench --shapes decode --shape 1,8,2048,64 --shape 1,8,2048,128 --block-size 16,256 --varlen --peers torch $K --rounds 2 --json /tmp/j/bench_decode_h200.json
cp /tmp/l/bench_decode.log /tmp/j/bench_decode_h200.log
grep -A14 "speedup" /tmp/l/bench_decode.log | tail -15; grep -E "^note: (varlen|paged)" /tmp/l/bench_decode.log | tail -16
s 170 verify_inference $H verify --shapes splitkv,paged,varlen --lse --json /tmp/j/verify_inference_h200.json
tail -2 /tmp/l/verify_inference.log
pack 4
