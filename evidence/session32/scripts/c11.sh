# Session 32, call 11 (H100): s32e (this tree's kernels), compute-sanitizer's memcheck, racecheck,
# synccheck and initcheck over verify --quick of the five picks (every flash_ws kernel's epilogue
# barriers were renumbered by v47's fourth turn).
GPU_DIR=.gpu/s32e source evidence/session32/scripts/common.sh
K256=flash_ws_m256_n64_s3_pp_ov_mbarrier; K192=flash_ws_m192_n128_s2_pp_ov_ps_mbarrier
K128P=flash_ws_m128_n128_s2_pp_ov_ps_mbarrier; K128=flash_ws_m128_n128_s2_pp_ov_mbarrier
K80=flash_ws_m128_n80_s2_pp_ov_mbarrier
P="--kernel $K256 --kernel $K192 --kernel $K128P --kernel $K128 --kernel $K80"
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
for tool in memcheck racecheck synccheck initcheck; do s 140 san_$tool $CS --tool $tool --print-limit 20 $H verify --quick --seed 7 $P; done
pack 11
