# Session 30, call 13 (H100): s30f = the final tree (0fdee25: the causal item table dealt once per
# variant, shape and grid, kept in the tensors): verify of the persistent twins on causal problems
# with repeats (the table reused by one tensor set), and the causal bench of the twin and the grid
# pick (graph replay: every replay reuses the table).
GPU_DIR=.gpu/s30f source evidence/session30/scripts/common.sh
PS="--kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier"
s 150 verify_causal $H verify $PS --masks causal --lse --dtype f16,bf16 --shapes small,odd --shape 2,16,2048,128 --shape 1,5,300,1000,128 --shape 4,16,2048,64 --json /tmp/j/verify_causal.json
s 100 verify_repeat $H verify $PS --masks causal --repeat 5 --shapes small --shape 2,16,2048,128 --json /tmp/j/verify_repeat.json
s 150 bench_causal $H bench --causal --iters 40 --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --shape 2,16,4096,128 --shape 4,16,2048,128 --json /tmp/j/bench_causal.json
grep -E "^flash" /tmp/l/bench_causal.log | awk '{print $1, $2$3$4$5, $6, $7}'
pack 13
