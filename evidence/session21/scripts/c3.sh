# Session 21, call 3: the kept maximum's factor skipped (a predicated ex2) for e4m3 (t7) against the select (t5).
source .gpux/s21/common.sh
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
use t7
s 120 verify_fp8_t7 $H verify --dtype e4m3 --layout bhsd,bshd --lse --json /tmp/j/verify_fp8_t7.json
K="--kernel flash_ws_fp8_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_fp8_m128_n128_s2_pp_mbarrier --kernel flash_ws_fp8_m192_n96_s2_pp_ov_mbarrier"
for r in 1 2; do for b in t5 t7; do use $b
s 120 ab_${b}_$r $H bench --dtype e4m3 --shapes fp8 $K --iters 40 --json /tmp/j/ab_${b}_$r.json
done; done
use t7
V="verify --dtype e4m3 --shapes small --shape 1,4,333,128 --shape 2,2,100,257,128 --shape 1,2,64,130,256 --lse"
s 150 racecheck_t7 compute-sanitizer --tool racecheck $H $V $K
pack 3
