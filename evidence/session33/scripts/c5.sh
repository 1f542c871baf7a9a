# Session 33, call 5 (H100): s33d (this tree): the four sanitizers on the persistent kernel's
# varlen set, and memcheck and racecheck over verify --quick of the five picks (every flash_ws
# epilogue's address arithmetic moved with the closure inlined by demand).
GPU_DIR=.gpu/s33d source evidence/session33/scripts/common.sh
PS=flash_ws_m128_n128_s2_pp_ov_ps_mbarrier
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
for tool in memcheck racecheck synccheck initcheck; do
  s 60 san_varlen_$tool $CS --tool $tool --print-limit 20 $H verify --shapes varlen --kernel $PS --lse --seed 7
done
P="--kernel flash_ws_m256_n64_s3_pp_ov_mbarrier --kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier --kernel $PS --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n80_s2_pp_ov_mbarrier"
for tool in memcheck racecheck; do s 150 san_picks_$tool $CS --tool $tool --print-limit 20 $H verify --quick --seed 7 $P; done
pack 5
