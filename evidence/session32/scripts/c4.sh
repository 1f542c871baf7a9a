# Session 32, call 4 (H100): s32d (m256_n64_s3 listed and picked where 256-row blocks make one
# round of at least three quarters of the SMs). 1. Survey of where it wins: one-round shapes of
# 88-128 blocks, S_q != S_k, two rounds, causal; the s2/s4 ring depths; cuDNN beside.
# 2. Its checks: verify of every default set (both layouts and dtypes, LSE), grouped heads,
# 300 random problems of it, 100 bit-identical repeats, the four compute-sanitizer tools.
GPU_DIR=.gpu/s32d source evidence/session32/scripts/common.sh
N=flash_ws_m256_n64_s3_pp_ov_mbarrier
K="--kernel $N --kernel flash_ws_m256_n64_s2_pp_ov_mbarrier --kernel flash_ws_m256_n64_s4_pp_ov_mbarrier --kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier"
SH="--shape 2,8,2048,64 --shape 1,8,4096,64 --shape 1,32,1024,64 --shape 2,7,2048,64 --shape 1,13,2048,64 --shape 1,12,2048,64 --shape 1,11,2048,64 --shape 2,8,2000,64 --shape 2,8,2048,4096,64 --shape 4,8,2048,64"
s 240 survey $H bench $SH --peers torch $K --rounds 2 --iters 40 --json /tmp/j/survey.json
s 60 survey_causal $H bench --shape 2,8,2048,64 --causal --peers torch $K --iters 40 --json /tmp/j/survey_causal.json
s 60 survey_bf16 $H bench --shape 2,8,2048,64 --dtype bf16 --peers torch $K --rounds 2 --iters 40 --json /tmp/j/survey_bf16.json
grep -A14 "speedup" /tmp/l/survey.log | tail -13
s 240 verify $H verify --kernel $N --lse --layout bhsd,bshd --shape 2,8,2048,64 --shape 3,8,1000,64 --shape 1,5,777,1500,64 --json /tmp/j/verify.json
s 100 verify_gqa $H verify --kernel $N --heads-kv 2 --lse --dtype bf16 --shapes small,mission,long --shape 2,8,2048,64 --json /tmp/j/verify_gqa.json
s 150 verify_random $H verify --kernel $N --random 300 --json /tmp/j/verify_random.json
s 150 verify_repeat $H verify --kernel $N --repeat 100 --shapes small,odd --shape 2,8,2048,64 --json /tmp/j/verify_repeat.json
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
for tool in memcheck racecheck synccheck initcheck; do s 100 san_$tool $CS --tool $tool --print-limit 20 $H verify --quick --seed 7 --kernel $N; done
pack 4
