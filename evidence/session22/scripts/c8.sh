# Session 22, call 8: u5 = u4 + `tail_split::slices` taking more slices than blocks in the last
# round where that shortens it (at 1,024 items on 132 SMs: 5 slices each). Verify at shapes of
# 1,024 items (16-bit persistent picks and the persistent e4m3 kernel), then A/B benches with the
# split on and off (FLASHRS_TAIL_SPLIT=0), alternating, two rounds each.
source evidence/session22/scripts/common.sh
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
S="--shape 4,16,2048,128 --shape 2,16,4096,128"
s 200 verify_16 $H verify $S --lse --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier --json /tmp/j/verify_16_split5.json
s 150 verify_fp8 $H verify --dtype e4m3 --shape 2,16,4096,128 --lse --kernel flash_ws_fp8_m128_n128_s2_pp_ov_ps_mbarrier --json /tmp/j/verify_fp8_split5.json
B="bench --shape 4,16,2048,128 --shape 2,16,4096,128 --shape 1,16,8192,128 --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --rounds 2 --iters 40"
F="bench --dtype e4m3 --shape 2,16,4096,128 --shape 1,16,8192,128 --kernel flash_ws_fp8_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_fp8_m128_n128_s2_pp_ov_ps_mbarrier --rounds 2 --iters 40"
for i in 1 2; do
  s 150 bench16_on_$i $H $B --json /tmp/j/bench16_on_$i.json
  s 150 bench16_off_$i env FLASHRS_TAIL_SPLIT=0 $H $B --json /tmp/j/bench16_off_$i.json
done
for i in 1 2; do
  s 150 bench8_on_$i $H $F --json /tmp/j/bench8_on_$i.json
  s 150 bench8_off_$i env FLASHRS_TAIL_SPLIT=0 $H $F --json /tmp/j/bench8_off_$i.json
done
pack 8
