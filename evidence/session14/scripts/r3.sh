# Session 14, call 3: varlen O through shared memory and 16-byte row stores (build t2) against t1, interleaved; its correctness.
W="--kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n176_s2_pp_ov_mbarrier --kernel flash_ws_m128_n128_s2_ov_mbarrier"
for round in 1 2; do for b in t1 t2; do
B=$b source .gpux/s14/common.sh
s 120 varlen_${b}_$round $H bench --varlen --shape 1,16,128,128 $W --json /tmp/j/varlen_${b}_$round.json
done; done
B=t2 source .gpux/s14/common.sh
s 200 verify $H verify --shapes small,odd,varlen --lse --layout bhsd,bshd $W --json /tmp/j/verify_varlen_t2.json
s 150 random $H verify --random 300 --json /tmp/j/random_t2.json
for tool in memcheck racecheck synccheck; do s 150 san_$tool compute-sanitizer --tool $tool $H verify --quick --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier; done
grep -E "^note: varlen" /tmp/l/varlen_t*.log
pack 3
