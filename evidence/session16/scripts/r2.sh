# Session 16, call 2: more A/B rounds t4 vs t1: head dims 128 (non-causal, causal), 64 and 256.
rm -rf /tmp/l /tmp/j
K128="--kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n176_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n176_s2_pp_ov_mbarrier"
SH128="--shape 4,16,2048,128 --shape 2,16,4096,128 --shape 1,16,8192,128"
K64="--kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n192_s3_ov_ps_mbarrier --kernel flash_ws_m192_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier"
SH64="--shape 4,16,2048,64 --shape 2,16,4096,64 --shape 1,16,8192,64"
K256="--kernel flash_ws_m128_n80_s2_ov_ps_mbarrier --kernel flash_ws_m128_n80_s2_pp_ov_mbarrier --kernel flash_ws_m128_n80_s2_ov_mbarrier"
for r in 2 3 4; do for b in t4 t1; do
  B=$b source .gpux/s16/common.sh
  s 100 ab128_${b}_$r $H bench $SH128 $K128 --json /tmp/j/ab128_${b}_$r.json
  s 100 ab64_${b}_$r $H bench $SH64 $K64 --json /tmp/j/ab64_${b}_$r.json
  s 100 abc_${b}_$r $H bench --shape 2,16,4096,128 --shape 1,16,16384,128 --causal $K128 --json /tmp/j/abc_${b}_$r.json
  s 100 ab256_${b}_$r $H bench --shape 2,16,4096,256 --shape 1,16,8192,256 $K256 --json /tmp/j/ab256_${b}_$r.json
done; done
pack 2
