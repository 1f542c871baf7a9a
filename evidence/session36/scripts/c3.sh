# Session 36, call 3 (H200): why our decode kernel reads K and V at 4.3 TB/s where cuDNN reads at
# 4.6 (c1, c2): Nsight Compute's launch, occupancy, memory and warp-state sections of one launch of
# the pick (flash_decode_m16_n128_w8_s3_mbarrier) and of cuDNN's decode kernel(s) (torch SDPA,
# cudnn_decode.py) at (8,32,1,8192,128) and (64,32,1,2048,128); s36b's binaries.
GPU_DIR=.gpu/s36b source evidence/session35/scripts/common.sh
SEC="--section LaunchStats --section Occupancy --section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis"
K=flash_decode_m16_n128_w8_s3_mbarrier
for shape in 8,32,1,8192,128 64,32,1,2048,128; do
  n=${shape//,/x}
  s 90 ncu_ours_$n ncu --clock-control none --launch-count 1 --kernel-name regex:"^${K}_d128_f16\$" $SEC --csv --page details $H profile-target --shape $shape --kernel $K --dtype f16
  IFS=, read -r b h sq sk d <<< "$shape"
  s 120 ncu_cudnn_$n ncu --clock-control none --nvtx --nvtx-include "prof/" $SEC --csv --page details python3 evidence/session36/scripts/cudnn_decode.py $b $h $h $sk $d
done
for f in /tmp/l/ncu_*.log; do echo "== $(basename $f)"; grep -E '"(Grid Size|Block Size|Registers Per Thread|Dynamic Shared Memory Per Block|Waves Per SM|Achieved Occupancy|DRAM Throughput|Memory Throughput|Duration|L2 Hit Rate|L1/TEX Hit Rate|Threads|Block Limit Shared Mem|Theoretical Occupancy|Mem Busy|Max Bandwidth|Issue Slots Busy|No Eligible|Active Warps Per Scheduler|Eligible Warps Per Scheduler|Warp Cycles Per Issued Instruction)"' $f | awk -F'","' '{printf "%s | %s | %s %s\n", $5, $(NF-2), $NF, $(NF-1)}' | tr -d '"' | head -40; done
pack 3
