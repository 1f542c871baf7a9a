# Session 16, call 1: persistent flash_ws with the item loop warp-converged (t1) against session 15's build (t4): verify, sanitizers, one A/B round.
rm -rf /tmp/l /tmp/j
B=t1 source .gpux/s16/common.sh
PS="--kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n176_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n176_s2_ov_ps_mbarrier --kernel flash_ws_m128_n192_s3_ov_ps_mbarrier --kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n80_s2_ov_ps_mbarrier"
s 200 verify_ps $H verify --shapes small,odd,edge,long --lse --layout bhsd,bshd $PS --json /tmp/j/verify_ps_t1.json
s 90 random_ps $H verify --random 60 $PS --json /tmp/j/random_ps_t1.json
for tool in synccheck racecheck; do s 60 san_$tool compute-sanitizer --tool $tool $H verify --quick --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n176_s2_pp_ov_ps_mbarrier; done
K128="--kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n176_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n176_s2_pp_ov_mbarrier"
SH128="--shape 4,16,2048,128 --shape 2,16,4096,128 --shape 1,16,8192,128"
for b in t4 t1; do
  B=$b source .gpux/s16/common.sh
  s 100 ab128_${b}_1 $H bench $SH128 $K128 --json /tmp/j/ab128_${b}_1.json
done
pack 1
