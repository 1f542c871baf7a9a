# Session 22, call 7: ncu of the e4m3 head-dim-128 grid pick and its persistent twin (u4), one
# launch each at (2,16,4096,128) and (1,16,8192,128), clocks untouched: where the persistent
# form's expected 3-6% went.
source evidence/session22/scripts/common.sh
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
N="ncu --clock-control none --launch-count 1 --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section LaunchStats --metrics sm__cycles_active.avg,sm__cycles_active.max,sm__cycles_elapsed.max,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active"
B="bench --dtype e4m3 --iters 1 --warmup 1 --warmup-ms 0 --calls-per-graph 1"
for shape in 2,16,4096,128 1,16,8192,128; do
  for k in flash_ws_fp8_m128_n128_s2_pp_ov_mbarrier flash_ws_fp8_m128_n128_s2_pp_ov_ps_mbarrier; do
    s 200 ncu_${k}_${shape//,/x} $N --kernel-name regex:"^${k}_d128" $H $B --shape $shape --kernel $k
  done
done
pack 7
