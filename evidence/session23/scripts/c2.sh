# Session 23, call 2: the fixed costs of the head-dim-64 persistent kernels (HEAD's build), by ncu
# cycles of one launch each (clocks untouched): single-round problems with 8, 16 and 32 KV tiles
# per item (slope = cost per tile, intercept = the fixed cost of a launch and an item), one
# round of split items only, and (2,8,2048,64) with and without the tail split; cuDNN beside.
source evidence/session23/scripts/common.sh
M=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__cycles_elapsed.max,sm__cycles_active.avg,sm__cycles_active.max,smsp__inst_executed.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
M192=flash_ws_m192_n128_s2_pp_ov_ps_mbarrier; P128=flash_ws_m128_n128_s2_pp_ov_ps_mbarrier
prof() { local name=$1 k=$2 shape=$3; shift 3; s 60 ncu_${name} env "$@" ncu --clock-control none --launch-count 1 --kernel-name regex:"^${k}_d64_f16" --metrics $M --csv $H profile-target --shape $shape --dtype f16 --kernel $k; }
for sk in 1024 2048 4096; do
  prof m192_1x11x2048x${sk} $M192 1,11,2048,$sk,64
  prof m128_1x8x2048x${sk} $P128 1,8,2048,$sk,64
done
prof m192_1x4x2048x2048 $M192 1,4,2048,2048,64
prof m192_1x4x2048x2048_nosplit $M192 1,4,2048,2048,64 FLASHRS_TAIL_SPLIT=0
prof m192_2x8x2048x2048 $M192 2,8,2048,2048,64
prof m192_2x8x2048x2048_nosplit $M192 2,8,2048,2048,64 FLASHRS_TAIL_SPLIT=0
prof m192_1x8x2048x2048 $M192 1,8,2048,2048,64
prof m128_2x8x2048x2048 $P128 2,8,2048,2048,64
for sk in 1024 4096; do
  s 150 ncu_cudnn_1x8x2048x$sk ncu --clock-control none --kernel-name regex:"fprop|sdpa|flash|fmha" --launch-skip 3 --launch-count 1 --metrics $M --csv python3 host/peers/attention_peers.py "{\"dtype\":\"float16\",\"backends\":[\"cudnn\"],\"shapes\":[[1,8,2048,$sk,64]],\"causal\":false,\"calls\":2,\"warmup\":1,\"replays\":2}"
done
s 150 ncu_cudnn_1x8x2048x2048 ncu --clock-control none --kernel-name regex:"fprop|sdpa|flash|fmha" --launch-skip 3 --launch-count 1 --metrics $M --csv python3 host/peers/attention_peers.py "{\"dtype\":\"float16\",\"backends\":[\"cudnn\"],\"shapes\":[[1,8,2048,2048,64]],\"causal\":false,\"calls\":2,\"warmup\":1,\"replays\":2}"
cd /tmp/l && for f in ncu_*.log; do printf "%-40s" $f; for m in sm__cycles_elapsed.max sm__cycles_active.avg gpu__time_duration.sum; do grep "\"$m\"" $f | head -1 | awk -F'","' '{printf " %s", $NF}' | tr -d '"'; done; echo; done | tee /tmp/j/summary.txt; cd - >/dev/null
pack 2
