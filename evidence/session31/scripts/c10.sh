# Session 31, call 10 (H100): s31a, (2,8,2048,64) alone, the library's pick against torch's
# backends, five rounds in each dtype: how close the tie with cuDNN is.
GPU_DIR=.gpu/s31a source evidence/session31/scripts/common.sh
for DT in f16 bf16; do
  s 150 bench_2x8_$DT $H bench --shape 2,8,2048,64 --dtype $DT --peers torch --kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier --rounds 5 --iters 60 --json /tmp/j/bench_2x8_$DT.json
  grep -A1 "speedup" /tmp/l/bench_2x8_$DT.log | tail -1
done
pack 10
