# Session 21, call 5: where the e4m3 head-dim-128 pick's warps wait (t8): ncu warp states, scheduler and pipes, one launch.
source .gpux/s21/common.sh
use t8
s 200 ncu_fp8_states ncu --clock-control none --kernel-name regex:flash_ws_fp8_m128_n128_s2_pp_ov --launch-count 1 --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section InstructionStats --section SpeedOfLight $H bench --dtype e4m3 --shape 2,16,4096,128 --kernel flash_ws_fp8_m128_n128_s2_pp_ov_mbarrier --iters 1 --warmup 1 --warmup-ms 0 --calls-per-graph 1
s 200 ncu_fp16_states ncu --clock-control none --kernel-name regex:flash_ws_m192_n128_s2_pp_ov_ps_mbarrier_d64 --launch-count 1 --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section InstructionStats --section SpeedOfLight $H bench --shape 2,16,4096,64 --kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier --iters 1 --warmup 1 --warmup-ms 0 --calls-per-graph 1
pack 5
