# Session 15, call 1: the varlen row-block list (t1) against session 14's build (t0): verify and A/B.
rm -rf /tmp/l /tmp/j
B=t1 source .gpux/s15/common.sh
s 150 verify_varlen $H verify --shapes varlen --lse --json /tmp/j/verify_varlen_t1.json
K="--kernel flash_ws_m128_n176_s2_pp_ov_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n128_s2_ov_mbarrier"
for r in 1 2; do for b in t0 t1; do
  B=$b source .gpux/s15/common.sh
  s 120 varlen_${b}_$r $H bench --varlen --shape 1,8,128,64 $K --json /tmp/j/varlen_${b}_$r.json; grep -E "^note: varlen" /tmp/l/varlen_${b}_$r.log | cut -c1-220
done; done
for b in t0 t1; do
  B=$b source .gpux/s15/common.sh
  s 120 varlenc_${b} $H bench --varlen --causal --shape 1,8,128,64 $K --json /tmp/j/varlenc_${b}.json; grep -E "^note: varlen" /tmp/l/varlenc_${b}.log | cut -c1-220
done
pack 1
