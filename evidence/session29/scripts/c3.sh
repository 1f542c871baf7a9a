# Session 29, call 3 (H100): build s29b (s29a, and every mbarrier wait's first look a
# `test_wait`, which never suspends: ptxas had moved s29a's first `try_wait` of the V wait above
# the head-dim-64 softmax) against s28e (HEAD b7ec226): the verify of split launches first, then
# ncu cycles of the picks (three rounds, alternated) and the bench, alternated.
GPU_DIR=.gpu/s29b source evidence/session29/scripts/common.sh
mkdir -p /tmp/ga/cubin && xz -dc .gpu/s28e/host.xz > /tmp/ga/host && chmod +x /tmp/ga/host
xz -dc .gpu/s28e/kernels_sm_90a.cubin.xz > /tmp/ga/cubin/kernels_sm_90a.cubin && cp .gpu/s28e/kernels_sm_90a.ptx-fnv64 /tmp/ga/cubin/
A="env FLASHRS_CUBIN_DIR=/tmp/ga/cubin /tmp/ga/host"
K192=flash_ws_m192_n128_s2_pp_ov_ps_mbarrier; K128P=flash_ws_m128_n128_s2_pp_ov_ps_mbarrier
K128=flash_ws_m128_n128_s2_pp_ov_mbarrier; K256=flash_ws_m128_n80_s2_pp_ov_mbarrier
S64="--shape 1,133,192,4096,64 --shape 1,134,192,1152,64 --shape 2,8,2048,64 --shape 1,134,192,1100,64"
S128="--shape 1,133,128,4096,128 --shape 1,134,128,1100,128 --shape 1,133,128,1000,128"
[ -n "${SKIPV:-}" ] || for dt in f16 bf16; do
  s 200 verify_split_$dt $H verify --kernel $K192 --kernel $K128P --lse --dtype $dt --layout bhsd,bshd $S64 $S128 --json /tmp/j/verify_split_$dt.json
done
if [ -z "${SKIPV:-}" ]; then grep -q "^PASS" /tmp/l/verify_split_f16.log && grep -q "^PASS" /tmp/l/verify_split_bf16.log || { tail -30 /tmp/l/verify_split_*.log; pack 3; exit 1; }; fi
M=gpu__time_duration.sum,sm__cycles_elapsed.max
prof() { local name=$1 host=$2 kernel=$3 shape=$4 d=$5; s 60 ncu_${name} ncu --clock-control none --launch-count 1 --kernel-name regex:"^${kernel}_d${d}_f16\$" --metrics $M --csv $host profile-target --shape $shape --kernel $kernel --dtype f16 ${6:-}; }
for r in 1 2 3; do
  for job in "$K192 2,8,2048,2048,64 64" "$K192 4,16,2048,2048,64 64" "$K128P 4,16,2048,2048,128 128" "$K128 1,16,8192,8192,128 128" "$K256 2,16,4096,4096,256 256"; do
    set -- $job; tag=$(echo $1 | sed 's/flash_ws_//; s/_mbarrier//')_$(echo $2 | tr , x)
    prof a${r}_$tag "$A" $1 $2 $3; prof b${r}_$tag $H $1 $2 $3
  done
  prof a${r}_causal "$A" $K128P 2,16,4096,4096,128 128 --causal; prof b${r}_causal $H $K128P 2,16,4096,4096,128 128 --causal
done
cd /tmp/l && for f in ncu_*.log; do printf "%-60s" $f; for m in sm__cycles_elapsed.max gpu__time_duration.sum; do grep "\"$m\"" $f | head -1 | awk -F'","' '{printf " %s", $NF}' | tr -d '"'; done; echo; done | tee /tmp/j/ncu_summary.txt; cd - >/dev/null
B="bench --shapes std --iters 40 --kernel $K192 --kernel $K128P --kernel $K128"
s 250 bench_b1 $H $B --peers torch --json /tmp/j/bench_b1.json
s 150 bench_a1 $A $B --json /tmp/j/bench_a1.json
for f in /tmp/l/bench_*.log; do echo "## $f"; grep -E "^flash|^torch_cudnn" $f | awk '{print $1, $2,$3,$4,$5, $6, $7}' | head -40; done
pack 3
