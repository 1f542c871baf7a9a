# Session 12, call 5: the persistent twins against the grid at head dims 128 and 256 (t2), three interleaved rounds non-causal, two causal.
source .gpux/s12/common.sh
K="--kernel flash_ws_m128_n176_s2_pp_ov_mbarrier --kernel flash_ws_m128_n176_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n176_s2_ov_ps_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n80_s2_pp_ov_mbarrier --kernel flash_ws_m128_n80_s2_ov_ps_mbarrier"
P128="--shapes large --shape 2,16,4096,128 --shape 1,16,8192,128 --shape 2,16,4096,256"
C128="--shapes large --causal --shape 2,16,4096,128 --shape 1,16,16384,128"
for rep in 1 2 3; do
  s 100 ps128_$rep $H bench $K $P128 --iters 40 --json /tmp/j/ps128_$rep.json
  [ $rep != 3 ] && s 100 ps128c_$rep $H bench $K $C128 --iters 40 --json /tmp/j/ps128c_$rep.json
done
cd /tmp/l && tar czf $OUT/logs5.tgz ps128*.log; cd /tmp/j && tar czf $OUT/json5.tgz ps128*.json; ls $OUT
