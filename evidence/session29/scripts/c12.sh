# Session 29, call 12 (H100): memcheck, racecheck and synccheck of s29b's persistent picks on
# launches whose last round is split (the walk's slices, v43): (2,8,2048,64) in three slices,
# a head-dim-128 one in four.
GPU_DIR=.gpu/s29m source evidence/session29/scripts/common.sh
K192=flash_ws_m192_n128_s2_pp_ov_ps_mbarrier; K128P=flash_ws_m128_n128_s2_pp_ov_ps_mbarrier
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
for tool in memcheck racecheck synccheck; do s 170 san_split_$tool $CS --tool $tool --print-limit 20 $H verify --kernel $K192 --kernel $K128P --dtype f16 --masks none --lse --shape 2,8,2048,64 --shape 1,134,128,1100,128 --seed 7; done
pack 12
