# Session 37, call 1 (H200): where a paged cache of small pages loses (0.84-0.93x the contiguous
# pick at 16 keys per page in session 36's c7). HEAD's build (s36e): the decode set on pages of 16,
# 32, 64 and 256 keys for the pick and the two shared-SM twins (one round, no peers): if the cost
# is per box (32 boxes of 2 KB per 128-key tile at 16 keys), 32-key pages should recover half of
# it. Then Nsight Compute on one launch of the pick at (64,32,1,2048,128), contiguous and on
# 16- and 256-key pages.
GPU_DIR=.gpu/s36e source evidence/session35/scripts/common.sh
K=flash_decode_m16_n128_w8_s3_mbarrier
KS="--kernel $K --kernel flash_decode_m16_n64_w4_s3_mbarrier --kernel flash_decode_m16_n64_w4_s2_mbarrier"
s 300 bench_pages $H bench --shapes decode --block-size 16,32,64,256 $KS --rounds 1 --json /tmp/j/bench_pages.json
grep -E "^flash_decode" /tmp/l/bench_pages.log | sed -E 's/ +/ /g' | cut -d' ' -f1-10
SEC="--section LaunchStats --section Occupancy --section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section SchedulerStats"
s 90 ncu_contig ncu --clock-control none --launch-count 1 --kernel-name regex:"^${K}_d128_f16\$" $SEC --csv --page details $H profile-target --shape 64,32,1,2048,128 --kernel $K --dtype f16
for bs in 16 256; do
  s 150 ncu_paged$bs ncu --clock-control none --launch-count 1 --kernel-name regex:"^${K}_d128_f16_paged\$" $SEC --csv --page details $H bench --shape 64,32,1,2048,128 --block-size $bs --kernel $K --rounds 1
done
for f in /tmp/l/ncu_*.log; do echo "== $(basename $f)"; grep -E '"(Grid Size|Registers Per Thread|DRAM Throughput|Memory Throughput|Duration|L2 Hit Rate|L1/TEX Hit Rate|Mem Busy|Max Bandwidth|Issue Slots Busy|No Eligible|Eligible Warps Per Scheduler|Warp Cycles Per Issued Instruction)"' $f | awk -F'","' '{printf "%s | %s | %s %s\n", $5, $(NF-2), $NF, $(NF-1)}' | tr -d '"' | head -30; done
pack 1
