# Session 26, call 2 (H100): s26a's per-item and per-tile costs of the persistent head-dim-64
# kernels, v30's method (ncu cycles of one launch): one round of 132 items at 8, 16 and 32 KV
# tiles, two rounds (264 items) at the same, and (2,8,2048,64) with and without the tail split.
GPU_DIR=.gpu/s26a source evidence/session26/scripts/common.sh
M=gpu__time_duration.sum,sm__cycles_elapsed.max,sm__cycles_active.avg
prof() { local name=$1 kernel=$2 shape=$3; s 60 ncu_${name} ncu --clock-control none --launch-count 1 --kernel-name regex:"^${kernel}_d64_" --metrics $M --csv $H profile-target --shape $shape --kernel $kernel --dtype f16; }
K192=flash_ws_m192_n128_s2_pp_ov_ps_mbarrier; K128P=flash_ws_m128_n128_s2_pp_ov_ps_mbarrier
for r in 1 2; do
  for sk in 1024 2048 4096; do
    prof r${r}_m192_h12_sk$sk $K192 1,12,2048,$sk,64; prof r${r}_m192_h24_sk$sk $K192 1,24,2048,$sk,64
    prof r${r}_m128_h12_sk$sk $K128P 1,12,1408,$sk,64; prof r${r}_m128_h24_sk$sk $K128P 1,24,1408,$sk,64
  done
  prof r${r}_m192_2x8_split $K192 2,8,2048,2048,64
  FLASHRS_TAIL_SPLIT=0 prof r${r}_m192_2x8_nosplit $K192 2,8,2048,2048,64
  prof r${r}_m128_2x8 $K128P 2,8,2048,2048,64
done
cd /tmp/l && for f in ncu_*.log; do printf "%-40s" $f; for m in sm__cycles_elapsed.max gpu__time_duration.sum; do grep "\"$m\"" $f | head -1 | awk -F'","' '{printf " %s", $NF}' | tr -d '"'; done; echo; done | tee /tmp/j/ncu_summary.txt; cd - >/dev/null
pack 2
