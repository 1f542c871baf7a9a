# Session 30, call 1 (H100): build s30a (v44: the early done count, the tail's part 0s on the
# lowest blocks, flash_ws's set-up before its wait for the launch before) against s29b (HEAD
# c1806ac): verify of split launches first, then ncu cycles (three rounds, alternated), the bench
# in call 2.
GPU_DIR=.gpu/s30a source evidence/session30/scripts/common.sh
mkdir -p /tmp/ga/cubin && xz -dc .gpu/s29b/host.xz > /tmp/ga/host && chmod +x /tmp/ga/host
xz -dc .gpu/s29b/kernels_sm_90a.cubin.xz > /tmp/ga/cubin/kernels_sm_90a.cubin && cp .gpu/s29b/kernels_sm_90a.ptx-fnv64 /tmp/ga/cubin/
A="env FLASHRS_CUBIN_DIR=/tmp/ga/cubin /tmp/ga/host"
K192=flash_ws_m192_n128_s2_pp_ov_ps_mbarrier; K128P=flash_ws_m128_n128_s2_pp_ov_ps_mbarrier
K128=flash_ws_m128_n128_s2_pp_ov_mbarrier; K256=flash_ws_m128_n80_s2_pp_ov_mbarrier
S64="--shape 1,133,192,4096,64 --shape 1,134,192,1152,64 --shape 2,8,2048,64 --shape 1,134,192,1100,64"
S128="--shape 1,133,128,4096,128 --shape 1,134,128,1100,128 --shape 1,133,128,1000,128"
for dt in f16 bf16; do
  s 200 verify_split_$dt $H verify --kernel $K192 --kernel $K128P --lse --dtype $dt --layout bhsd,bshd $S64 $S128 --json /tmp/j/verify_split_$dt.json
done
grep -q "^PASS" /tmp/l/verify_split_f16.log && grep -q "^PASS" /tmp/l/verify_split_bf16.log || { tail -30 /tmp/l/verify_split_*.log; pack 1; exit 1; }
M=gpu__time_duration.sum,sm__cycles_elapsed.max
prof() { local name=$1 host=$2 kernel=$3 shape=$4 d=$5; s 60 ncu_${name} ncu --clock-control none --launch-count 1 --kernel-name regex:"^${kernel}_d${d}_f16\$" --metrics $M --csv $host profile-target --shape $shape --kernel $kernel --dtype f16 ${6:-}; }
for r in 1 2 3; do
  for job in "$K192 2,8,2048,2048,64 64" "$K192 4,16,2048,2048,64 64" "$K128P 1,134,128,1100,128 128"; do
    set -- $job; tag=$(echo $1 | sed 's/flash_ws_//; s/_mbarrier//')_$(echo $2 | tr , x)
    prof a${r}_$tag "$A" $1 $2 $3; prof b${r}_$tag $H $1 $2 $3
  done
done
cd /tmp/l && for f in ncu_*.log; do printf "%-60s" $f; for m in sm__cycles_elapsed.max gpu__time_duration.sum; do grep "\"$m\"" $f | head -1 | awk -F'","' '{printf " %s", $NF}' | tr -d '"'; done; echo; done | tee /tmp/j/ncu_summary.txt; cd - >/dev/null
pack 1
