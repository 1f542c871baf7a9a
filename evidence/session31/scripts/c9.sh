# Session 31, call 9 (H100): s31a, 250 bit-identical repeats of the four picks (small and odd sets,
# both masks, a split shape and a causal shape of several items per persistent block).
GPU_DIR=.gpu/s31a source evidence/session31/scripts/common.sh
K192=flash_ws_m192_n128_s2_pp_ov_ps_mbarrier; K128P=flash_ws_m128_n128_s2_pp_ov_ps_mbarrier
K128=flash_ws_m128_n128_s2_pp_ov_mbarrier; K256=flash_ws_m128_n80_s2_pp_ov_mbarrier
P="--kernel $K192 --kernel $K128P --kernel $K128 --kernel $K256"
s 400 verify_repeat $H verify $P --repeat 250 --shapes small,odd --shape 2,8,2048,64 --shape 2,16,2048,128 --json /tmp/j/verify_repeat.json
pack 9
