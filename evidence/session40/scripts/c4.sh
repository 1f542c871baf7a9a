# Session 40, call 4 (H200): s38a (this tree's kernels). Where the e4m3 head-dim-128 kernel's
# warps wait, per SASS instruction, for issue #12: ncu's source counters (warp stall samples per
# instruction) and warp states of one launch at (2,16,4096,128), the e4m3 grid pick and the fp16
# grid kernel of the same tiles, clocks untouched. The source pages are exported as CSV.
GPU_DIR=.gpu/s38a source evidence/session35/scripts/common.sh
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
SEC="--section SourceCounters --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section InstructionStats --section SpeedOfLight"
s 200 ncu_fp8 $NCU --clock-control none --kernel-name regex:flash_ws_fp8_m128_n128_s2_pp_ov_mbarrier_d128 --launch-count 1 $SEC -o /tmp/j/fp8 $H bench --dtype e4m3 --shape 2,16,4096,128 --kernel flash_ws_fp8_m128_n128_s2_pp_ov_mbarrier --iters 1 --warmup 1 --warmup-ms 0 --calls-per-graph 1
s 200 ncu_f16 $NCU --clock-control none --kernel-name regex:"^flash_ws_m128_n128_s2_pp_ov_mbarrier_d128_f16\$" --launch-count 1 $SEC -o /tmp/j/f16 $H profile-target --shape 2,16,4096,128 --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --dtype f16
for r in fp8 f16; do
  $NCU -i /tmp/j/$r.ncu-rep --page details > /tmp/l/${r}_details.log 2>&1
  $NCU -i /tmp/j/$r.ncu-rep --page source --csv --print-source sass > /tmp/j/${r}_source.csv 2>/tmp/l/${r}_source_err.log
  ls -la /tmp/j/${r}_source.csv; head -c 600 /tmp/j/${r}_source.csv; echo
done
grep -E "Elapsed Cycles|Duration|Issue Slots Busy|No Eligible|Eligible Warps|Warp Cycles Per Issued" /tmp/l/*_details.log
pack 4
