# Session 15, call 2: the varlen row-block list run head by head (t2) against session 14's build (t0): verify and A/B.
rm -rf /tmp/l /tmp/j
B=t2 source .gpux/s15/common.sh
s 150 verify_varlen $H verify --shapes varlen --lse --json /tmp/j/verify_varlen_t2.json
K="--kernel flash_ws_m128_n176_s2_pp_ov_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n128_s2_ov_mbarrier"
v() { B=$1 source .gpux/s15/common.sh; shift; local name=$1; shift; s 120 $name $H bench --varlen --shape 1,8,128,64 $K --json /tmp/j/$name.json "$@"; grep -E "^note: varlen" /tmp/l/$name.log | cut -c1-230; }
for r in 1 2 3; do for b in t0 t2; do v $b varlen_${b}_$r; done; done
for r in 1 2; do for b in t0 t2; do v $b varlenc_${b}_$r --causal; done; done
for b in t0 t2; do v $b varlen7_${b} --varlen-seed 7; v $b varlenc7_${b} --varlen-seed 7 --causal; done
pack 2
