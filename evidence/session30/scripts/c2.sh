# Session 30, call 2 (H100): s30b (s30a without the part 0s first: call 1 had s30a 2% slower in
# ncu at (2,8,2048,64)) against s29b: verify of split launches, ncu cycles (three rounds,
# alternated), then the bench, alternated, two rounds each, on the shapes v44 predicts for: the
# split (2,8,2048,64) and (4,16,2048,64), small grids, head dim 128.
GPU_DIR=.gpu/s30b source evidence/session30/scripts/common.sh
mkdir -p /tmp/ga/cubin && xz -dc .gpu/s29b/host.xz > /tmp/ga/host && chmod +x /tmp/ga/host
xz -dc .gpu/s29b/kernels_sm_90a.cubin.xz > /tmp/ga/cubin/kernels_sm_90a.cubin && cp .gpu/s29b/kernels_sm_90a.ptx-fnv64 /tmp/ga/cubin/
A="env FLASHRS_CUBIN_DIR=/tmp/ga/cubin /tmp/ga/host"
K192=flash_ws_m192_n128_s2_pp_ov_ps_mbarrier; K128P=flash_ws_m128_n128_s2_pp_ov_ps_mbarrier
K128=flash_ws_m128_n128_s2_pp_ov_mbarrier
S64="--shape 1,133,192,4096,64 --shape 2,8,2048,64 --shape 1,134,192,1100,64"
s 200 verify_split_f16 $H verify --kernel $K192 --kernel $K128P --lse --dtype f16 --layout bhsd,bshd $S64 --shape 1,134,128,1100,128 --json /tmp/j/verify_split_f16.json
grep -q "^PASS" /tmp/l/verify_split_f16.log || { tail -30 /tmp/l/verify_split_*.log; pack 2; exit 1; }
M=gpu__time_duration.sum,sm__cycles_elapsed.max
prof() { local name=$1 host=$2 kernel=$3 shape=$4 d=$5; s 60 ncu_${name} ncu --clock-control none --launch-count 1 --kernel-name regex:"^${kernel}_d${d}_f16\$" --metrics $M --csv $host profile-target --shape $shape --kernel $kernel --dtype f16 ${6:-}; }
for r in 1 2 3; do
  for job in "$K192 2,8,2048,2048,64 64" "$K192 4,16,2048,2048,64 64"; do
    set -- $job; tag=$(echo $1 | sed 's/flash_ws_//; s/_mbarrier//')_$(echo $2 | tr , x)
    prof a${r}_$tag "$A" $1 $2 $3; prof b${r}_$tag $H $1 $2 $3
  done
done
cd /tmp/l && for f in ncu_*.log; do printf "%-60s" $f; for m in sm__cycles_elapsed.max gpu__time_duration.sum; do grep "\"$m\"" $f | head -1 | awk -F'","' '{printf " %s", $NF}' | tr -d '"'; done; echo; done | tee /tmp/j/ncu_summary.txt; cd - >/dev/null
B="bench --iters 40 --kernel $K192 --kernel $K128P --kernel $K128 --shape 1,8,128,64 --shape 2,8,512,64 --shape 1,8,2048,64 --shape 2,8,2048,64 --shape 4,16,2048,64 --shape 4,16,2048,128"
s 200 bench_b1 $H $B --peers torch --json /tmp/j/bench_b1.json
s 120 bench_a1 $A $B --json /tmp/j/bench_a1.json
s 120 bench_b2 $H $B --json /tmp/j/bench_b2.json
s 120 bench_a2 $A $B --json /tmp/j/bench_a2.json
for f in /tmp/l/bench_*.log; do echo "## $f"; grep -E "^flash|^torch_cudnn" $f | awk '{print $1, $2,$3,$4,$5, $6, $7}' | head -40; done
pack 2
