# Session 30, call 6 (H100): s30d (v45: the causal persistent flash_ws walks the host's item
# table, `causal_item_table`; its grid kernels are HEAD's): verify of the persistent kernels on causal
# problems (square and S_q != S_k, grouped heads, both layouts and dtypes, LSE), then ncu cycles
# of the causal picks (grid) and the persistent twins, then the causal bench, alternated.
GPU_DIR=.gpu/s30d source evidence/session30/scripts/common.sh
K192P=flash_ws_m192_n128_s2_pp_ov_ps_mbarrier; K128P=flash_ws_m128_n128_s2_pp_ov_ps_mbarrier
K128=flash_ws_m128_n128_s2_pp_ov_mbarrier; K192=flash_ws_m192_n128_s2_pp_ov_mbarrier
PS="--kernel $K192P --kernel $K128P"
s 200 verify_causal $H verify $PS --masks causal --lse --layout bhsd,bshd --shapes small,odd,edge --shape 2,16,4096,128 --shape 1,5,300,1000,128 --shape 2,6,1000,300,64 --shape 2,8,2048,64 --json /tmp/j/verify_causal.json
s 100 verify_causal_gqa $H verify $PS --masks causal --lse --heads-kv 2 --dtype bf16 --shapes small,mission --shape 2,16,2048,128 --json /tmp/j/verify_causal_gqa.json
grep -q "^PASS" /tmp/l/verify_causal.log && grep -q "^PASS" /tmp/l/verify_causal_gqa.log || { tail -30 /tmp/l/verify_causal*.log; pack 6; exit 1; }
M=gpu__time_duration.sum,sm__cycles_elapsed.max
prof() { local name=$1 host=$2 kernel=$3 shape=$4 d=$5; s 60 ncu_${name} ncu --clock-control none --launch-count 1 --kernel-name regex:"^${kernel}_d${d}_f16\$" --metrics $M --csv $host profile-target --shape $shape --kernel $kernel --dtype f16 --causal; }
for r in 1 2; do
  for job in "$K128 2,16,4096,4096,128 128" "$K128P 2,16,4096,4096,128 128" "$K192 4,16,2048,2048,64 64" "$K192P 4,16,2048,2048,64 64"; do
    set -- $job; tag=$(echo $1 | sed 's/flash_ws_//; s/_mbarrier//')_$(echo $2 | tr , x)
    prof b${r}_$tag $H $1 $2 $3
  done
done
cd /tmp/l && for f in ncu_*.log; do printf "%-60s" $f; for m in sm__cycles_elapsed.max gpu__time_duration.sum; do grep "\"$m\"" $f | head -1 | awk -F'","' '{printf " %s", $NF}' | tr -d '"'; done; echo; done | tee /tmp/j/ncu_summary.txt; cd - >/dev/null
B="bench --causal --iters 40 --kernel $K128 --kernel $K128P --kernel $K192 --kernel $K192P --shape 2,16,4096,128 --shape 1,16,16384,128 --shape 4,16,2048,128 --shape 2,16,4096,64 --shape 4,16,2048,64 --shape 2,8,2048,64"
s 250 bench_b1 $H $B --peers torch --json /tmp/j/bench_b1.json
s 150 bench_b2 $H $B --json /tmp/j/bench_b2.json
for f in /tmp/l/bench_*.log; do echo "## $f"; grep -E "^flash|^torch_cudnn" $f | awk '{print $1, $2,$3,$4,$5, $6, $7}' | head -40; done
pack 6
