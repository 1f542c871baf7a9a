# Session 29, call 5 (H100): more checks of s29b (v43): flash_decode's split, paged and varlen
# sets (its merge's fences changed; call 4's decode verify ran out of time on the large decode
# set), the api_gpu and fp8_gpu tests; then (2,8,2048,64) and (4,16,2048,64) in bf16 beside
# cuDNN, two rounds.
GPU_DIR=.gpu/s29b source evidence/session29/scripts/common.sh
KD1=flash_decode_m16_n128_w8_s3_mbarrier; KD2=flash_decode_m16_n64_w4_s4_mbarrier
DEC="--kernel $KD1 --kernel $KD2 --kernel flash_decode_m16_n64_w4_s3_light"
s 200 verify_dec $H verify --shapes small,splitkv --lse --layout bhsd,bshd $DEC --json /tmp/j/verify_dec.json
s 200 verify_dec_paged $H verify --shapes paged,varlen --lse $DEC --json /tmp/j/verify_dec_paged.json
for t in api_gpu fp8_gpu; do s 200 test_$t /tmp/g/tests/$t --include-ignored --test-threads=1; done
s 150 bench_bf16 $H bench --shape 2,8,2048,64 --shape 4,16,2048,64 --dtype bf16 --peers torch --rounds 2 --iters 60 --kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier --json /tmp/j/bench_bf16.json
grep -E "^flash_ws|^torch_cudnn" /tmp/l/bench_bf16.log | awk '{print $1,$2,$3,$4,$5,$6,$7,$8}'
grep -A8 "speedup" /tmp/l/bench_bf16.log | tail -8
pack 5
