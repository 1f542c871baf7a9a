# Session 38, call 7 (H200): where the persistent walk's block loses 1.6% when it does the grid's
# own work (one item per block at (33,4,1,8192,128), c4): Nsight Compute's launch, occupancy,
# memory and warp-state sections of one launch of the walk and of the grid pick, s38d's binaries.
GPU_DIR=.gpu/s38d source evidence/session35/scripts/common.sh
SEC="--section LaunchStats --section Occupancy --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats"
for K in flash_decode_m16_n128_w8_s3_ps_mbarrier flash_decode_m16_n128_w8_s3_mbarrier; do
  s 100 ncu_$K ncu --clock-control none --launch-count 1 --kernel-name regex:"^${K}_d128_f16\$" $SEC --csv --page details $H profile-target --shape 33,4,1,8192,128 --kernel $K --dtype f16
done
for f in /tmp/l/ncu_*.log; do echo "== $(basename $f)"; grep -E '"(Grid Size|Registers Per Thread|Duration|DRAM Throughput|L2 Hit Rate|Mem Busy|Issue Slots Busy|No Eligible|Warp Cycles Per Issued Instruction|Stall [A-Za-z ]+)"' $f | awk -F'","' '{printf "%s | %s %s\n", $(NF-2), $NF, $(NF-1)}' | tr -d '"' | head -40; done
pack 7
