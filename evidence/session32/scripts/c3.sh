# Session 32, call 3 (H100): s32c (consumers at 112 registers: c1-c2 hung in setmaxnreg.inc, which takes only what the producer gave back), four consumer warpgroups at head dim 64 (block_m 256, v47):
# verify the n64 variant and three-consumer n64 twin, then time them beside the
# pick and cuDNN at (2,8,2048,64) and neighbours, then ncu cycles of one launch.
GPU_DIR=.gpu/s32c source evidence/session32/scripts/common.sh
N64=flash_ws_m256_n64_s3_pp_ov_mbarrier
PICK=flash_ws_m192_n128_s2_pp_ov_ps_mbarrier
K="--kernel $N64 --kernel flash_ws_m192_n64_s3_pp_ov_mbarrier"
s 150 verify $H verify $K --shapes small,odd,edge --shape 2,8,2048,64 --shape 1,3,1000,777,64 --shape 2,4,300,64 --layout bhsd,bshd --lse
s 90 verify_varlen $H verify --kernel $N64 --shapes varlen --dtype f16
s 150 bench $H bench --shape 2,8,2048,64 --shape 4,16,2048,64 --shape 1,8,2048,64 --shape 2,16,4096,64 --peers torch --kernel $PICK --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier $K --rounds 2 --iters 60 --json /tmp/j/bench.json
grep -E "m256|m192|m128|cudnn" /tmp/l/bench.log | grep -v "^note" | tail -40
M=sm__cycles_elapsed.max,gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
prof() { local name=$1 kernel=$2; shift 2; s 60 ncu_${name} ncu --clock-control none --launch-skip 3 --launch-count 1 --kernel-name regex:"^${kernel}_d64_f16\$" --metrics $M --csv $H bench --kernel $kernel --iters 5 --warmup-ms 0 "$@"; }
for r in 1 2; do
  prof pick_$r $PICK --shape 2,8,2048,64
  prof n64_$r $N64 --shape 2,8,2048,64
done
cd /tmp/l && for f in ncu_*.log; do printf "%-24s" $f; for m in sm__cycles_elapsed.max gpu__time_duration.sum sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active; do grep "\"$m\"" $f | head -1 | awk -F'","' '{printf " %s", $NF}' | tr -d '"'; done; echo; done | tee /tmp/j/ncu_summary.txt; cd - >/dev/null
pack 3
