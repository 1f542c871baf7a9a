# Session 18, call 2: where the overlapped loop waits for the last P V: after all 64 exponentials of a 128-key tile (t0, HEAD), after 16 (t1), after 32 (t2); interleaved, fp16 twice, bf16 once.
source .gpux/s18/common.sh
K="--kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n80_s2_pp_ov_mbarrier"
use t2
s 100 verify_t2 $H verify $K --shapes small,odd --lse --dtype f16,bf16 --json /tmp/j/verify_t2.json
for r in 1 2; do
  for b in t0 t1 t2; do
    use $b
    s 150 ab_${b}_$r $H bench --shapes std --shape 2,16,4096,256 $K --iters 60 --json /tmp/j/ab_${b}_$r.json
  done
done
for b in t0 t1 t2; do
  use $b
  s 150 abbf_${b}_1 $H bench --shapes std --shape 2,16,4096,256 $K --iters 60 --dtype bf16 --json /tmp/j/abbf_${b}_1.json
done
pack 2
