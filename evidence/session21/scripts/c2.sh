# Session 21, call 2: t5 = t4 + three-consumer e4m3 tiles (m192 n96, s2 and s3).
source .gpux/s21/common.sh
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
use t5
s 120 verify_fp8 $H verify --dtype e4m3 --layout bhsd,bshd --lse --json /tmp/j/verify_fp8_t5.json
[ -x $F ] && s 150 test_fp8 $F --include-ignored --test-threads=1
s 120 bench_fp8_t5a $H bench --dtype e4m3 --shapes fp8 --iters 40 --json /tmp/j/bench_fp8_t5a.json
s 120 bench_fp8_t5b $H bench --dtype e4m3 --shapes fp8 --iters 40 --json /tmp/j/bench_fp8_t5b.json
K="--kernel flash_ws_fp8_m192_n96_s2_pp_ov_mbarrier --kernel flash_ws_fp8_m128_n192_s2_pp_ov_mbarrier --kernel flash_ws_fp8_m128_n128_s2_pp_ov_mbarrier"
V="verify --dtype e4m3 --shapes small --shape 1,4,333,128 --shape 2,2,100,257,128 --shape 1,2,64,130,256 --lse"
s 150 memcheck_fp8 compute-sanitizer --tool memcheck $H $V $K --kernel flash_ws_fp8_m128_n128_s2_pp_ov_mbarrier
s 150 racecheck_fp8 compute-sanitizer --tool racecheck $H $V $K
s 150 synccheck_fp8 compute-sanitizer --tool synccheck $H $V $K
M=sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum
s 120 ncu_fp8 ncu --clock-control none --kernel-name regex:flash_ws_fp8 --launch-count 12 --metrics $M $H bench --dtype e4m3 --shape 2,16,4096,128 $K --iters 1 --warmup 1 --warmup-ms 0 --calls-per-graph 1
pack 2
