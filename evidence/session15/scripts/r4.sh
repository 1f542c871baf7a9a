# Session 15, call 4: build t4 (the own output tile at head dim 128 only): verify, sanitizers, A/B against t0, ncu of the persistent and grid kernels.
rm -rf /tmp/l /tmp/j
B=t4 source .gpux/s15/common.sh
PS="--kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier"
s 200 verify_ps $H verify --shapes small,odd,edge,mission,long --lse --layout bhsd,bshd $PS --json /tmp/j/verify_ps_t4.json
s 100 verify_ps_gqa $H verify --shapes small,mission,long --heads-kv 2 --lse --layout bhsd,bshd $PS --json /tmp/j/verify_ps_gqa_t4.json
s 100 random_ps $H verify --random 150 $PS --json /tmp/j/random_ps_t4.json
for tool in memcheck racecheck synccheck; do s 120 san_$tool compute-sanitizer --tool $tool $H verify --quick $PS; done
GRID="--kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n176_s2_pp_ov_mbarrier"
SH="--shape 4,16,2048,128 --shape 2,16,4096,128 --shape 1,16,8192,128"
for b in t0 t4; do B=$b source .gpux/s15/common.sh; s 150 ps_${b} $H bench $SH $PS $GRID --json /tmp/j/ps_${b}.json; done
B=t4 source .gpux/s15/common.sh
P="profile-target --shape 1,16,8192,128 --dtype f16 --kernel"
XM=sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__issue_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum,smsp__inst_executed.sum,lts__t_sectors_srcunit_tex_op_read.sum,sm__warps_active.avg.pct_of_peak_sustained_active
for k in flash_ws_m128_n128_s2_pp_ov_ps_mbarrier flash_ws_m128_n128_s2_pp_ov_mbarrier; do
  s 60 ncux_$k ncu --clock-control none --launch-count 1 --csv --page raw --kernel-name ${k}_d128_f16 --metrics $XM $H $P $k
  s 120 ncus_$k ncu --clock-control none --launch-count 1 --kernel-name ${k}_d128_f16 --section WarpStateStats --section SchedulerStats --section SpeedOfLight --section LaunchStats $H $P $k
done
pack 4
