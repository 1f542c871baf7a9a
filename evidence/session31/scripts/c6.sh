# Session 31, call 6 (H100): s31b's varlen batch (bench's case: 16 sequences of 1-4096, H=16,
# D=128) in ncu cycles (clock-independent), the grid twin against the persistent one with the
# host's item table, non-causal and causal, two rounds alternated.
GPU_DIR=.gpu/s31b source evidence/session31/scripts/common.sh
M=sm__cycles_elapsed.max,gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
prof() { local name=$1 kernel=$2; shift 2; s 90 ncu_${name} ncu --clock-control none --launch-skip 3 --launch-count 1 --kernel-name regex:"^${kernel}_d128_f16_varlen\$" --metrics $M --csv $H bench --varlen --shape 1,16,128,128 --kernel $kernel --iters 5 --warmup-ms 0 "$@"; }
for r in 1 2; do
  for c in "" --causal; do
    prof grid${c#--}_$r flash_ws_m128_n128_s2_pp_ov_mbarrier $c
    prof ps${c#--}_$r flash_ws_m128_n128_s2_pp_ov_ps_mbarrier $c
  done
done
cd /tmp/l && for f in ncu_*.log; do printf "%-24s" $f; for m in sm__cycles_elapsed.max gpu__time_duration.sum sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active; do grep "\"$m\"" $f | head -1 | awk -F'","' '{printf " %s", $NF}' | tr -d '"'; done; echo; done | tee /tmp/j/ncu_summary.txt; cd - >/dev/null
pack 6
