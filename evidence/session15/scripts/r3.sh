# Session 15, call 3: persistent flash_ws with O through its own shared-memory tile (t3) against session 14's build (t0): verify and A/B.
rm -rf /tmp/l /tmp/j
B=t3 source .gpux/s15/common.sh
PS="--kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n192_s3_ov_ps_mbarrier"
s 240 verify_ps $H verify --shapes small,odd,edge,long --lse --layout bhsd,bshd $PS --json /tmp/j/verify_ps_t3.json
GRID="--kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m192_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n176_s2_pp_ov_mbarrier"
SH="--shape 4,16,2048,64 --shape 2,16,4096,64 --shape 1,16,8192,64 --shape 4,16,2048,128 --shape 2,16,4096,128 --shape 1,16,8192,128"
for r in 1 2; do for b in t0 t3; do
  B=$b source .gpux/s15/common.sh
  s 150 ps_${b}_$r $H bench $SH $PS $GRID --json /tmp/j/ps_${b}_$r.json
done; done
pack 3
