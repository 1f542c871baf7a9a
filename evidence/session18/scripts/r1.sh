# Session 18, call 1: t1 (the overlapped loop waits for the last P V after 16 of the tile's exponentials and packs P beside the rest) against t0 (HEAD), interleaved; t1's verify of the flash_ws picks.
source .gpux/s18/common.sh
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv
use t1
K="--kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n80_s2_pp_ov_mbarrier"
s 200 verify_t1 $H verify $K --shapes small,odd,edge --lse --layout bhsd,bshd --dtype f16,bf16 --json /tmp/j/verify_t1.json
for r in 1 2; do
  for b in t0 t1; do
    use $b
    s 150 ab_${b}_$r $H bench --shapes std --shape 2,16,4096,256 $K --iters 60 --json /tmp/j/ab_${b}_$r.json
  done
done
use t1
s 100 verify_fp8_t1 $H verify --dtype e4m3 --shapes small,odd --lse --json /tmp/j/verify_fp8_t1.json
for b in t0 t1; do use $b; s 100 fp8_${b} $H bench --dtype e4m3 --iters 60 --json /tmp/j/fp8_${b}.json; done
pack 1
