# Session 15, call 6: the persistent item's ring, rows and tile count made warp-uniform (t5) against t4: verify, synccheck, A/B.
rm -rf /tmp/l /tmp/j
B=t5 source .gpux/s15/common.sh
PS="--kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier"
s 200 verify_ps $H verify --shapes small,odd,edge,mission,long --lse --layout bhsd,bshd $PS --json /tmp/j/verify_ps_t5.json
s 100 random_ps $H verify --random 100 $PS --json /tmp/j/random_ps_t5.json
for tool in synccheck racecheck; do s 120 san_$tool compute-sanitizer --tool $tool $H verify --quick $PS; done
GRID="--kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n176_s2_pp_ov_mbarrier"
SH="--shape 4,16,2048,128 --shape 2,16,4096,128 --shape 1,16,8192,128"
for r in 1 2 3; do for b in t4 t5; do B=$b source .gpux/s15/common.sh; s 150 ps_${b}_$r $H bench $SH $PS $GRID --json /tmp/j/ps_${b}_$r.json; done; done
pack 6
