# Session 12, call 7: verify --repeat 250 over every default set for the four dispatch kernels of the committed tree (t2).
source .gpux/s12/common.sh
D="--kernel flash_ws_m128_n176_s2_pp_ov_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n80_s2_pp_ov_mbarrier --kernel flash_ws_m192_n128_s2_pp_ov_mbarrier"
s 560 repeat_all $H verify --repeat 250 $D --json /tmp/j/verify_repeat_all_h100.json
tail -5 /tmp/l/repeat_all.log
cd /tmp/l && tar czf $OUT/logs7.tgz repeat_all.log; cd /tmp/j && tar czf $OUT/json7.tgz verify_repeat_all_h100.json; ls $OUT
