# Session 20, call 3: t0 (HEAD e67bda8) against t1 (decode merge in batches; max chains started from registers),
# interleaved: the decode set with flash_decode's copy-engine variant and cuDNN; the head-dim-128/64 picks.
source .gpux/s20/common.sh
use t0; H0=$H; C0=$FLASHRS_CUBIN_DIR
use t1; H1=$H; C1=$FLASHRS_CUBIN_DIR
D="--shapes decode --kernel flash_decode_m16_n128_w8_s3_mbarrier --iters 60"
P="--shape 4,16,2048,128 --shape 2,16,4096,128 --shape 1,16,8192,128 --shape 4,16,2048,64 --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier --iters 60"
for r in 1 2; do
  FLASHRS_CUBIN_DIR=$C0 s 100 dec_t0_$r $H0 bench $D --peers torch --json /tmp/j/dec_t0_$r.json
  FLASHRS_CUBIN_DIR=$C1 s 100 dec_t1_$r $H1 bench $D --peers torch --json /tmp/j/dec_t1_$r.json
done
s 60 dec_splits_g1 $H1 tune --splits --shape 1,32,1,32768,128 --heads-kv 8 --split-counts 8,16,32,64 --json /tmp/j/dec_splits_g1_t1.json
for r in 1 2; do
  FLASHRS_CUBIN_DIR=$C0 s 60 pick_t0_$r $H0 bench $P --json /tmp/j/pick_t0_$r.json
  FLASHRS_CUBIN_DIR=$C1 s 60 pick_t1_$r $H1 bench $P --json /tmp/j/pick_t1_$r.json
done
pack 3
