# Session 36, call 1 (H200: the lent GPU is now an H200, no longer an H100): s36a = HEAD 1268129's
# build (this session's first; no kernel change). The GPU's facts, a correctness pass of every
# variant (verify --quick, LSE), then issue #11's whole bench in one run as session 35's c6: the
# decode set + the two short prompts, paged at 16 and 256 keys per page, the varlen batch beside
# its dense and padded cases, torch's backends in the same run, two rounds.
GPU_DIR=.gpu/s36a source evidence/session35/scripts/common.sh
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,power.limit,temperature.gpu --format=csv | tee /tmp/l/gpu.log
s 90 verify_quick $H verify --quick --lse --json /tmp/j/verify_quick_h200.json
K="--kernel flash_decode_m16_n128_w8_s3_mbarrier --kernel flash_decode_m16_n64_w4_s4_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier"
s 480 bench_decode $H bench --shapes decode --shape 1,8,2048,64 --shape 1,8,2048,128 --block-size 16,256 --varlen --peers torch $K --rounds 2 --json /tmp/j/bench_decode_h200.json
cp /tmp/l/bench_decode.log /tmp/j/bench_decode_h200.log
grep -A14 "speedup" /tmp/l/bench_decode.log | tail -15; grep -E "^note" /tmp/l/bench_decode.log | tail -8
pack 1
