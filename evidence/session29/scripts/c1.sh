# Session 29, call 1 (H100): build s29a (v43: the persistent flash_ws's item walk by the host's
# reciprocals; flash_decode's split merge with one fence per block) against s28e (HEAD b7ec226):
# the verify of split launches (3, 4 and 8 slices, both layouts and dtypes, LSE) first, then
# traces, ncu cycles and the bench, alternated (the other checks, on s29b: c4.sh).
GPU_DIR=.gpu/s29a source evidence/session29/scripts/common.sh
mkdir -p /tmp/ga/cubin && xz -dc .gpu/s28e/host.xz > /tmp/ga/host && chmod +x /tmp/ga/host
xz -dc .gpu/s28e/kernels_sm_90a.cubin.xz > /tmp/ga/cubin/kernels_sm_90a.cubin && cp .gpu/s28e/kernels_sm_90a.ptx-fnv64 /tmp/ga/cubin/
A="env FLASHRS_CUBIN_DIR=/tmp/ga/cubin /tmp/ga/host"
K192=flash_ws_m192_n128_s2_pp_ov_ps_mbarrier; K128P=flash_ws_m128_n128_s2_pp_ov_ps_mbarrier
KD1=flash_decode_m16_n128_w8_s3_mbarrier; KD2=flash_decode_m16_n64_w4_s4_mbarrier
S64="--shape 1,133,192,4096,64 --shape 1,134,192,1152,64 --shape 2,8,2048,64 --shape 1,134,192,1100,64"
S128="--shape 1,133,128,4096,128 --shape 1,134,128,1100,128 --shape 1,133,128,1000,128"
for dt in f16 bf16; do
  s 200 verify_split_$dt $H verify --kernel $K192 --kernel $K128P --lse --dtype $dt --layout bhsd,bshd $S64 $S128 --json /tmp/j/verify_split_$dt.json
done
grep -q "^PASS" /tmp/l/verify_split_f16.log && grep -q "^PASS" /tmp/l/verify_split_bf16.log || { tail -30 /tmp/l/verify_split_*.log; pack 1; exit 1; }
for r in 1 2; do
  s 60 tra$r $A trace --kernel $K192 --shape 2,8,2048,64 --json /tmp/j/tra$r.json
  s 60 trb$r $H trace --kernel $K192 --shape 2,8,2048,64 --json /tmp/j/trb$r.json
  s 60 trc$r $A trace --kernel $K192 --shape 4,16,2048,64 --json /tmp/j/trc$r.json
  s 60 trd$r $H trace --kernel $K192 --shape 4,16,2048,64 --json /tmp/j/trd$r.json
done
M=gpu__time_duration.sum,sm__cycles_elapsed.max
prof() { local name=$1 host=$2 kernel=$3 shape=$4 d=$5; s 60 ncu_${name} ncu --clock-control none --launch-count 1 --kernel-name regex:"^${kernel}_d${d}_f16\$" --metrics $M --csv $host profile-target --shape $shape --kernel $kernel --dtype f16; }
for r in 1 2 3; do
  for job in "$K192 2,8,2048,2048,64 64" "$K192 4,16,2048,2048,64 64" "$K128P 4,16,2048,2048,128 128" "$K128P 1,133,128,4096,128 128"; do
    set -- $job; tag=$(echo $1 | sed 's/flash_ws_//; s/_mbarrier//')_$(echo $2 | tr , x)
    prof a${r}_$tag "$A" $1 $2 $3; prof b${r}_$tag $H $1 $2 $3
  done
done
cd /tmp/l && for f in ncu_*.log; do printf "%-60s" $f; for m in sm__cycles_elapsed.max gpu__time_duration.sum; do grep "\"$m\"" $f | head -1 | awk -F'","' '{printf " %s", $NF}' | tr -d '"'; done; echo; done | tee /tmp/j/ncu_summary.txt; cd - >/dev/null
B="bench --shape 2,8,2048,64 --shape 4,16,2048,64 --shape 2,16,4096,128 --iters 60 --kernel $K192 --kernel $K128P"
s 200 bench_b1 $H $B --peers torch --json /tmp/j/bench_b1.json
s 150 bench_a1 $A $B --json /tmp/j/bench_a1.json
s 150 bench_b2 $H $B --peers torch --json /tmp/j/bench_b2.json
s 150 bench_a2 $A $B --json /tmp/j/bench_a2.json
for f in /tmp/l/tr*.log; do echo "## $f"; sed -n 3,8p $f; done
for f in /tmp/l/bench_*.log; do echo "## $f"; grep -E "^ *\[" $f | grep -E "m192|m128_n128_s2_pp_ov_ps|cudnn" | head -6; done
pack 1
