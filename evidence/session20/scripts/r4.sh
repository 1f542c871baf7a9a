# Session 20, call 4: the checks call 2 left undone for t1: --repeat 250 over every variant (call 2's ran past its
# 60 s limit), and the sanitizers on a split decode shape and the persistent picks (call 2 passed a bad --heads-kv).
source .gpux/s20/common.sh
use t1
s 280 repeat $H verify --repeat 250 --shapes small,odd,splitkv --shape 1,45,559,1157,64 --json /tmp/j/verify_repeat_t1.json
SD="--shape 1,8,3,5000,128 --shape 2,4,1,3001,64 --kernel flash_decode_m16_n128_w8_s3_mbarrier --kernel flash_decode_m16_n128_w8_s3_light"
PS="--shape 1,45,559,1157,64 --kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier"
for tool in memcheck racecheck synccheck; do s 60 san_dec_$tool compute-sanitizer --tool $tool $H verify --quick --seed 20 $SD; done
for tool in memcheck racecheck; do s 60 san_ps_$tool compute-sanitizer --tool $tool $H verify --quick --seed 20 $PS; done
pack 4
