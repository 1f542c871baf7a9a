# Session 18, call 10: t4 (N = 8 registers of exponentials before the wait at head dim 128, not committed) against t3 (N = 16, committed), interleaved: head-dim-128 picks, fp16 twice, bf16 once; verify of t4's picks.
source .gpux/s18/common.sh
K="--kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier"
use t4
s 60 verify_t4 $H verify $K --shapes small,odd --lse --dtype f16,bf16 --json /tmp/j/verify_t4.json
for r in 1 2 3; do
  dt=f16; [ $r = 3 ] && dt=bf16
  for b in t3 t4; do
    use $b
    s 100 ab_${b}_$r $H bench --shape 4,16,2048,128 --shape 2,16,4096,128 --shape 1,16,8192,128 $K --dtype $dt --iters 60 --json /tmp/j/ab_${b}_$r.json
    s 100 abc_${b}_$r $H bench --shape 2,16,4096,128 --shape 1,16,16384,128 --causal $K --dtype $dt --iters 60 --json /tmp/j/abc_${b}_$r.json
  done
done
pack 10
