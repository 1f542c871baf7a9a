# Session 12, call 2: t1's sanitizers, a second bench round, ncu on the three-consumer kernel.
source .gpux/s12/common_t1.sh  # (as it ran: build t1, whose common.sh this is)
for tool in racecheck synccheck memcheck; do s 60 san_$tool compute-sanitizer --tool $tool $H verify --quick --seed 23 --kernel flash_ws_m192_n128_s2_pp_ov_mbarrier --kernel flash_ws_m192_n128_s2_ov_mbarrier; done
s 150 plain_2 $H bench $M3 $OLD $NS --peers torch --iters 40 --json /tmp/j/plain_2.json
s 120 causal_2 $H bench $M3 $OLD $CS --peers torch --iters 40 --json /tmp/j/causal_2.json
s 60 verify_gqa $H verify $M3 --heads-kv 2 --lse --layout bhsd,bshd --shapes small,mission,long --json /tmp/j/verify_gqa_m3.json
P="profile-target --shape 2,16,4096,4096,64 --dtype f16 --kernel"
XM=sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__issue_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active
for k in flash_ws_m192_n128_s2_pp_ov_mbarrier flash_ws_m128_n128_s2_pp_ov_mbarrier; do
  s 60 ncux_$k ncu --clock-control none --launch-count 1 --csv --page raw --kernel-name ${k}_d64_f16 --metrics $XM $H $P $k
  s 90 ncus_$k ncu --clock-control none --launch-count 1 --kernel-name ${k}_d64_f16 --section WarpStateStats --section ComputeWorkloadAnalysis --section SchedulerStats $H $P $k
done
s 90 ncu_m3 $H profile --kernel flash_ws_m192_n128_s2_pp_ov_mbarrier --shape 2,16,4096,64 --out /tmp/j/ncu_m192_n128_pp_ov_d64.json
cd /tmp/l && tar czf $OUT/logs2.tgz *.log; cd /tmp/j && tar czf $OUT/json2.tgz *.json; ls $OUT
