# Session 30, call 10 (H100): compute-sanitizer's memcheck, racecheck, synccheck and initcheck over verify
# --quick of s30e's picks (v45: the causal persistent twins walk the host's item table; verify --quick has causal cases).
GPU_DIR=.gpu/s30e source evidence/session30/scripts/common.sh
K192=flash_ws_m192_n128_s2_pp_ov_ps_mbarrier; K128P=flash_ws_m128_n128_s2_pp_ov_ps_mbarrier
K128=flash_ws_m128_n128_s2_pp_ov_mbarrier; K256=flash_ws_m128_n80_s2_pp_ov_mbarrier
P="--kernel $K192 --kernel $K128P --kernel $K128 --kernel $K256"
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
for tool in memcheck racecheck synccheck initcheck; do s 140 san_$tool $CS --tool $tool --print-limit 20 $H verify --quick --seed 7 $P; done
pack 10
