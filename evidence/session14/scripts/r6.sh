# Session 14, call 6: the varlen ratio again, focused (three variants) and in the full set (build t2).
B=t2 source .gpux/s14/common.sh
rm -f /tmp/l/*.log /tmp/j/*.json
W="--kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n176_s2_pp_ov_mbarrier --kernel flash_ws_m128_n128_s2_ov_mbarrier"
s 120 varlen_focused_1 $H bench --varlen --shape 1,16,128,128 $W --peers torch --json /tmp/j/varlen_focused_1.json
s 150 varlen_full $H bench --varlen --shapes small --peers torch --json /tmp/j/varlen_full.json
s 120 varlen_focused_2 $H bench --varlen --shape 1,16,128,128 $W --peers torch --json /tmp/j/varlen_focused_2.json
grep -E "^note: varlen" /tmp/l/varlen_*.log
pack 6
