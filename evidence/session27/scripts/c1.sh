# Session 27, call 1 (H100): build s27a (v40: the tail split's last slice keeps its own partial
# result in registers and reads the others' slots in one batch; a slice's count comes before
# its publication) against s26b (HEAD 9c71252's kernels): ncu cycles of one launch per kernel
# and shape, alternated; the bench of the picks, alternated, cuDNN in the first round.
GPU_DIR=.gpu/s27a source evidence/session27/scripts/common.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,driver_version --format=csv | tee /tmp/j/gpu.txt
mkdir -p /tmp/ga/cubin && xz -dc .gpu/s26b/host.xz > /tmp/ga/host && chmod +x /tmp/ga/host
xz -dc .gpu/s26b/kernels_sm_90a.cubin.xz > /tmp/ga/cubin/kernels_sm_90a.cubin && cp .gpu/s26b/kernels_sm_90a.ptx-fnv64 /tmp/ga/cubin/
A="env FLASHRS_CUBIN_DIR=/tmp/ga/cubin /tmp/ga/host"
K192=flash_ws_m192_n128_s2_pp_ov_ps_mbarrier; K128P=flash_ws_m128_n128_s2_pp_ov_ps_mbarrier
K128=flash_ws_m128_n128_s2_pp_ov_mbarrier; K256=flash_ws_m128_n80_s2_pp_ov_mbarrier
# A first check that a split launch finishes and is right; stop here if not.
s 90 sanity $H verify --kernel $K192 --kernel $K128P --dtype f16 --shapes small --shape 1,3,700,64 --shape 1,2,256,2048,128
grep -q "^PASS" /tmp/l/sanity.log || { pack 1; exit 1; }
M=gpu__time_duration.sum,sm__cycles_elapsed.max,sm__cycles_active.avg
prof() { local name=$1 host=$2 kernel=$3 shape=$4 d=$5; s 60 ncu_${name} ncu --clock-control none --launch-count 1 --kernel-name regex:"^${kernel}_d${d}_" --metrics $M --csv $host profile-target --shape $shape --kernel $kernel --dtype f16; }
for r in 1 2 3; do
  for job in "$K192 2,8,2048,2048,64 64" "$K192 4,16,2048,2048,64 64" "$K128P 2,8,2048,2048,64 64"; do
    set -- $job; tag=$(echo $1 | sed 's/flash_ws_//; s/_mbarrier//')_$(echo $2 | tr , x)
    prof a${r}_$tag "$A" $1 $2 $3; prof n${r}_$tag $H $1 $2 $3
  done
done
cd /tmp/l && for f in ncu_*.log; do printf "%-60s" $f; for m in sm__cycles_elapsed.max gpu__time_duration.sum; do grep "\"$m\"" $f | head -1 | awk -F'","' '{printf " %s", $NF}' | tr -d '"'; done; echo; done | tee /tmp/j/ncu_summary.txt; cd - >/dev/null
B="bench --shape 2,8,2048,64 --shape 4,16,2048,64 --shape 4,16,2048,128 --iters 60 --kernel $K192 --kernel $K128P --kernel $K128"
s 200 bench_n1 $H $B --peers torch --json /tmp/j/bench_n1.json
s 150 bench_a1 $A $B --json /tmp/j/bench_a1.json
s 150 bench_n2 $H $B --json /tmp/j/bench_n2.json
s 150 bench_a2 $A $B --json /tmp/j/bench_a2.json
pack 1
