# Session 32, call 12 (H100): s32e, 250 bit-identical repeats of the three picks call 9 did not
# repeat (the 128-row persistent and grid kernels, head dim 256's).
GPU_DIR=.gpu/s32e source evidence/session32/scripts/common.sh
K128P=flash_ws_m128_n128_s2_pp_ov_ps_mbarrier; K128=flash_ws_m128_n128_s2_pp_ov_mbarrier
K80=flash_ws_m128_n80_s2_pp_ov_mbarrier
s 450 verify_repeat $H verify --kernel $K128P --kernel $K128 --kernel $K80 --repeat 250 --shapes small,odd --shape 2,16,2048,128 --json /tmp/j/verify_repeat.json
pack 12
