# Session 16, call 9: ncu of the persistent pick and the grid n176 kernel at (2,16,4096,128) and (1,16,8192,128) (t3): time, tensor pipe, per-SM spread of active cycles and instructions.
rm -rf /tmp/l /tmp/j
B=t3 source .gpux/s16b/common.sh
M=gpu__time_duration.sum,sm__cycles_active.min,sm__cycles_active.max,sm__cycles_active.avg,sm__inst_executed.min,sm__inst_executed.max,sm__inst_executed.avg,sm__inst_executed.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,lts__t_sector_hit_rate.pct,dram__bytes_read.sum
for shape in 2,16,4096,128 1,16,8192,128; do for k in flash_ws_m128_n128_s2_pp_ov_ps_mbarrier flash_ws_m128_n176_s2_pp_ov_mbarrier flash_ws_m128_n176_s2_ov_mbarrier; do
  s 120 ncu_${k}_${shape//,/_} ncu --clock-control none --launch-count 1 --kernel-name ${k}_d128_f16 --metrics $M --csv $H profile-target --shape $shape --dtype f16 --kernel $k
done; done
pack 9
