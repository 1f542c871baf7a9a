# Session 22, call 3: the FP8 bench in three rounds: the e4m3 pick, its non-overlapped twin and the
# persistent kernel at head dim 128, against our fp16 picks (call 2's build, whose head-dim-256
# persistent kernel failed its checks: V's descale was missing on its register output path).
source evidence/session22/scripts/common.sh
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
K="--kernel flash_ws_fp8_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_fp8_m128_n128_s2_pp_mbarrier --kernel flash_ws_fp8_m128_n128_s2_pp_ov_ps_mbarrier"
s 560 bench_fp8 $H bench --dtype e4m3 --shapes fp8 --rounds 3 --iters 40 $K --json /tmp/j/bench_fp8_h100.json
cp /tmp/l/bench_fp8.log /tmp/j/bench_fp8_h100.log
pack 3
