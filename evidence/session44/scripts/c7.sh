# Session 44, call 7 (H200): s44d (HEAD's kernels for the e4m3 pick). Where the e4m3 head-dim-128
# pick's warps wait after v57-v60, per SASS instruction (as session 40's c4 did for the grid
# kernel): ncu's source counters, warp states and pipe use of one launch at (2,16,4096,128),
# clocks untouched; the source page exported as CSV.
GPU_DIR=.gpu/s44d source .gpu/s44d/common.sh
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
SEC="--section SourceCounters --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section InstructionStats --section SpeedOfLight"
PS=flash_ws_fp8_m128_n128_s2_pp_ov_ps_mbarrier
s 240 ncu_fp8 $NCU --clock-control none --kernel-name regex:"^${PS}_d128_bf16\$" --launch-count 1 $SEC -o /tmp/j/fp8ps $H bench --dtype e4m3 --shape 2,16,4096,128 --kernel $PS --iters 1 --warmup 1 --warmup-ms 0 --calls-per-graph 1
$NCU -i /tmp/j/fp8ps.ncu-rep --page details > /tmp/l/fp8ps_details.log 2>&1
$NCU -i /tmp/j/fp8ps.ncu-rep --page source --csv --print-source sass > /tmp/j/fp8ps_source.csv 2>/tmp/l/fp8ps_source_err.log
ls -la /tmp/j/fp8ps_source.csv
grep -E "Elapsed Cycles|Duration|Issue Slots Busy|No Eligible|Eligible Warps|Warp Cycles Per Issued|Pipe" /tmp/l/fp8ps_details.log | head -30
pack 7
