# Session 30, call 11 (H100): s30e (this tree): 500 random problems (the library's causal picks now
# persistent) and 20 bit-identical repeats of the causal persistent twins.
GPU_DIR=.gpu/s30e source evidence/session30/scripts/common.sh
s 200 verify_random $H verify --random 500 --json /tmp/j/verify_random.json
s 100 verify_repeat_causal $H verify --kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --masks causal --repeat 20 --shapes small,odd --shape 2,16,2048,128 --shape 4,16,2048,64 --json /tmp/j/verify_repeat_causal.json
pack 11
