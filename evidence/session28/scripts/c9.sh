# Session 28, call 9 (H100): build s28e (as s28d, but the parts other than 0 write their slots at
# once, under the done count's round trip, as before s28d; part 0 only once it knows it does not
# merge) against s28c (v41's counts): checks first (verify of split launches in 3, 4 and 8 slices, both layouts and
# dtypes, LSE; --repeat bit-identical; e4m3 split in 8), then
# traces, ncu cycles and the bench, alternated.
GPU_DIR=.gpu/s28e source evidence/session28/scripts/common.sh
mkdir -p /tmp/ga/cubin && xz -dc .gpu/s28c/host.xz > /tmp/ga/host && chmod +x /tmp/ga/host
xz -dc .gpu/s28c/kernels_sm_90a.cubin.xz > /tmp/ga/cubin/kernels_sm_90a.cubin && cp .gpu/s28c/kernels_sm_90a.ptx-fnv64 /tmp/ga/cubin/
A="env FLASHRS_CUBIN_DIR=/tmp/ga/cubin /tmp/ga/host"
K192=flash_ws_m192_n128_s2_pp_ov_ps_mbarrier; K128P=flash_ws_m128_n128_s2_pp_ov_ps_mbarrier
S64="--shape 1,133,192,4096,64 --shape 1,134,192,1152,64 --shape 2,8,2048,64 --shape 1,134,192,1100,64"
S128="--shape 1,133,128,4096,128 --shape 1,134,128,1100,128 --shape 1,133,128,1000,128"
for dt in f16 bf16; do
  s 200 verify_split_$dt $H verify --kernel $K192 --kernel $K128P --lse --dtype $dt --layout bhsd,bshd $S64 $S128 --json /tmp/j/verify_split_$dt.json
done
grep -q "^PASS" /tmp/l/verify_split_f16.log && grep -q "^PASS" /tmp/l/verify_split_bf16.log || { tail -30 /tmp/l/verify_split_*.log; pack 9; exit 1; }
s 200 repeat_split $H verify --kernel $K192 --kernel $K128P --repeat 10 --shapes small $S64 $S128 --json /tmp/j/repeat_split.json
s 120 verify_fp8 $H verify --dtype e4m3 --lse --shape 1,136,128,4096,128 --json /tmp/j/verify_fp8.json
for r in 1 2; do
  s 60 tra$r $A trace --kernel $K192 --shape 2,8,2048,64 --json /tmp/j/tra$r.json
  s 60 tre$r $H trace --kernel $K192 --shape 2,8,2048,64 --json /tmp/j/tre$r.json
done
M=gpu__time_duration.sum,sm__cycles_elapsed.max
prof() { local name=$1 host=$2 kernel=$3 shape=$4 d=$5; s 60 ncu_${name} ncu --clock-control none --launch-count 1 --kernel-name regex:"^${kernel}_d${d}_f16\$" --metrics $M --csv $host profile-target --shape $shape --kernel $kernel --dtype f16; }
for r in 1 2 3; do
  for job in "$K192 2,8,2048,2048,64 64" "$K192 4,16,2048,2048,64 64" "$K128P 1,134,128,1100,128 128" "$K128P 1,133,128,4096,128 128"; do
    set -- $job; tag=$(echo $1 | sed 's/flash_ws_//; s/_mbarrier//')_$(echo $2 | tr , x)
    prof a${r}_$tag "$A" $1 $2 $3; prof e${r}_$tag $H $1 $2 $3
  done
done
cd /tmp/l && for f in ncu_*.log; do printf "%-60s" $f; for m in sm__cycles_elapsed.max gpu__time_duration.sum; do grep "\"$m\"" $f | head -1 | awk -F'","' '{printf " %s", $NF}' | tr -d '"'; done; echo; done | tee /tmp/j/ncu_summary.txt; cd - >/dev/null
B="bench --shape 2,8,2048,64 --shape 4,16,2048,64 --iters 60 --kernel $K192"
s 200 bench_e1 $H $B --peers torch --json /tmp/j/bench_e1.json
s 150 bench_a1 $A $B --json /tmp/j/bench_a1.json
s 150 bench_e2 $H $B --peers torch --json /tmp/j/bench_e2.json
s 150 bench_a2 $A $B --json /tmp/j/bench_a2.json
for f in /tmp/l/tr*.log; do echo "## $f"; sed -n 3,6p $f; done
for f in /tmp/l/bench_*.log; do echo "## $f"; grep -E "^ *\[" $f | grep -E "m192|cudnn" | head -4; done
pack 9
