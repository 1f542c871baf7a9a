# Session 16, call 3: t2 (persistent producer 40 / consumers 232 registers, no spills at n128) : verify, sanitizers, A/B against t1, and a sweep of non-causal shapes persistent vs grid for the dispatch.
rm -rf /tmp/l /tmp/j
B=t2 source .gpux/s16/common.sh
PS="--kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n176_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n176_s2_ov_ps_mbarrier --kernel flash_ws_m128_n192_s3_ov_ps_mbarrier --kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n80_s2_ov_ps_mbarrier"
s 200 verify_ps $H verify --shapes small,odd,edge,mission,long --lse --layout bhsd,bshd $PS --json /tmp/j/verify_ps_t2.json
s 100 verify_ps_gqa $H verify --shapes small,odd,edge --heads-kv 2 --lse $PS --json /tmp/j/verify_ps_gqa_t2.json
s 120 random_ps $H verify --random 150 $PS --json /tmp/j/random_ps_t2.json
for tool in memcheck synccheck racecheck; do s 90 san_$tool compute-sanitizer --tool $tool $H verify --quick --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier; done
K128="--kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n176_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n176_s2_pp_ov_mbarrier"
SH128="--shape 4,16,2048,128 --shape 2,16,4096,128 --shape 1,16,8192,128"
for r in 1 2; do for b in t1 t2; do
  B=$b source .gpux/s16/common.sh
  s 100 ab128_${b}_$r $H bench $SH128 $K128 --json /tmp/j/ab128_${b}_$r.json
done; done
B=t2 source .gpux/s16/common.sh
SW128="--shape 8,16,1024,128 --shape 16,16,1024,128 --shape 2,16,2048,128 --shape 8,16,2048,128 --shape 4,32,2048,128 --shape 4,16,4096,128 --shape 2,16,8192,128"
SW64="--shape 2,8,2048,64 --shape 8,16,1024,64 --shape 16,16,1024,64 --shape 8,16,2048,64 --shape 4,16,4096,64 --shape 2,16,8192,64"
K64="--kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m192_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier"
for r in 1 2; do
  s 150 sw128_$r $H bench $SW128 $K128 --json /tmp/j/sw128_$r.json
  s 150 sw64_$r $H bench $SW64 $K64 --json /tmp/j/sw64_$r.json
done
pack 3
