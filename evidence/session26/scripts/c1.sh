# Session 26, call 1 (H100): build s26a (v38: the overlapped loop holds the ping-pong turn only
# while it issues the item's first S = Q K^T and last P V, as inside the loop) against s25e
# (HEAD 2072532's kernels): verify --quick with LSE (every variant) and 100 random problems on
# s26a; ncu cycles of one launch per kernel and shape, alternated; the bench of the picks,
# alternated, cuDNN in the first round.
GPU_DIR=.gpu/s26a source evidence/session26/scripts/common.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,driver_version --format=csv | tee /tmp/j/gpu.txt
mkdir -p /tmp/ga/cubin && xz -dc .gpu/s25e/host.xz > /tmp/ga/host && chmod +x /tmp/ga/host
xz -dc .gpu/s25e/kernels_sm_90a.cubin.xz > /tmp/ga/cubin/kernels_sm_90a.cubin && cp .gpu/s25e/kernels_sm_90a.ptx-fnv64 /tmp/ga/cubin/
A="env FLASHRS_CUBIN_DIR=/tmp/ga/cubin /tmp/ga/host"
s 300 verify_quick $H verify --quick --lse --json /tmp/j/verify_quick.json
s 150 verify_random $H verify --random 100 --json /tmp/j/verify_random.json
M=gpu__time_duration.sum,sm__cycles_elapsed.max,sm__cycles_active.avg
prof() { local name=$1 host=$2 kernel=$3 shape=$4 d=$5; s 60 ncu_${name} ncu --clock-control none --launch-count 1 --kernel-name regex:"^${kernel}_d${d}_" --metrics $M --csv $host profile-target --shape $shape --kernel $kernel --dtype f16; }
K192=flash_ws_m192_n128_s2_pp_ov_ps_mbarrier; K128P=flash_ws_m128_n128_s2_pp_ov_ps_mbarrier
K128=flash_ws_m128_n128_s2_pp_ov_mbarrier; K256=flash_ws_m128_n80_s2_pp_ov_mbarrier
for r in 1 2; do
  for job in "$K192 2,8,2048,2048,64 64" "$K192 4,16,2048,2048,64 64" "$K128P 2,8,2048,2048,64 64" \
             "$K128P 4,16,2048,2048,128 128" "$K128 1,16,8192,8192,128 128" "$K256 2,16,4096,4096,256 256"; do
    set -- $job; tag=$(echo $1 | sed 's/flash_ws_//; s/_mbarrier//')_$(echo $2 | tr , x)
    prof a${r}_$tag "$A" $1 $2 $3; prof n${r}_$tag $H $1 $2 $3
  done
done
cd /tmp/l && for f in ncu_*.log; do printf "%-60s" $f; for m in sm__cycles_elapsed.max gpu__time_duration.sum; do grep "\"$m\"" $f | head -1 | awk -F'","' '{printf " %s", $NF}' | tr -d '"'; done; echo; done | tee /tmp/j/ncu_summary.txt; cd - >/dev/null
B="bench --shape 2,8,2048,64 --shape 4,16,2048,64 --shape 4,16,2048,128 --shape 1,16,8192,128 --shape 2,16,4096,256 --iters 60 --kernel $K192 --kernel $K128P --kernel $K128 --kernel $K256"
s 300 bench_n1 $H $B --peers torch --json /tmp/j/bench_n1.json
s 200 bench_a1 $A $B --json /tmp/j/bench_a1.json
s 200 bench_n2 $H $B --json /tmp/j/bench_n2.json
s 200 bench_a2 $A $B --json /tmp/j/bench_a2.json
pack 1
