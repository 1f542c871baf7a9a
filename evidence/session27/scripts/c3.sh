# Session 27, call 3 (H100): where the tail split's time goes, with the binaries of calls 1-2
# (s27a = v40, s26b = HEAD 9c71252): ncu cycles of one launch of the three-consumer persistent
# kernel at (1,12,2048,64) (132 items: one full round, no tail), (1,4,2048,64) (44 items: a
# launch that is only a tail, split in 3 or, with FLASHRS_TAIL_SPLIT=0, not) and (2,8,2048,64)
# (132 whole items then the same tail), each build, two rounds. (As run, it turned out that a
# launch of fewer items than SMs is never split: its grid is the items; (1,4,768,2048,64), meant
# to be split in 8, was not split either.)
GPU_DIR=.gpu/s27a source evidence/session27/scripts/common.sh
mkdir -p /tmp/ga/cubin && xz -dc .gpu/s26b/host.xz > /tmp/ga/host && chmod +x /tmp/ga/host
xz -dc .gpu/s26b/kernels_sm_90a.cubin.xz > /tmp/ga/cubin/kernels_sm_90a.cubin && cp .gpu/s26b/kernels_sm_90a.ptx-fnv64 /tmp/ga/cubin/
A="env FLASHRS_CUBIN_DIR=/tmp/ga/cubin /tmp/ga/host"
K192=flash_ws_m192_n128_s2_pp_ov_ps_mbarrier
M=gpu__time_duration.sum,sm__cycles_elapsed.max,sm__cycles_active.avg
prof() { local name=$1 host=$2 shape=$3; s 60 ncu_${name} ncu --clock-control none --launch-count 1 --kernel-name regex:"^${K192}_d64_" --metrics $M --csv $host profile-target --shape $shape --kernel $K192 --dtype f16; }
for r in 1 2; do
  for shape in 1,12,2048,2048,64 1,4,2048,2048,64 2,8,2048,2048,64 1,4,768,2048,64; do
    tag=$(echo $shape | tr , x)
    prof a${r}_$tag "$A" $shape; prof n${r}_$tag $H $shape
    prof n${r}_nosplit_$tag "env FLASHRS_TAIL_SPLIT=0 $H" $shape
  done
done
cd /tmp/l && for f in ncu_*.log; do printf "%-50s" $f; for m in sm__cycles_elapsed.max gpu__time_duration.sum; do grep "\"$m\"" $f | head -1 | awk -F'","' '{printf " %s", $NF}' | tr -d '"'; done; echo; done | tee /tmp/j/ncu_summary.txt; cd - >/dev/null
pack 3
