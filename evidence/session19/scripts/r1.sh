# Session 19, call 1: the persistent flash_ws's tail split (t1): its GPU test, verify of the head-dim-64 picks,
# then split on / off (FLASHRS_TAIL_SPLIT) interleaved at head dim 64, cuDNN in the second round; sanitizers on a split shape.
source .gpux/s19/common.sh
use t1
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv > /tmp/l/smi.log
s 200 gputest_split $T --ignored --exact persistent_tail_split_matches_the_reference --test-threads 1
K="--kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier"
s 90 verify_d64 $H verify $K --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --shapes small,odd,large --lse --dtype f16,bf16 --json /tmp/j/verify_d64.json
S="--shape 4,16,2048,64 --shape 2,16,4096,64 --shape 1,16,8192,64"
for r in 1 2; do
  P=""; [ $r = 2 ] && P="--peers torch"
  for sw in 0 1; do
    FLASHRS_TAIL_SPLIT=$sw s 120 ab_s${sw}_$r $H bench $S $K --iters 60 $P --json /tmp/j/ab_s${sw}_$r.json
  done
done
SH="--shape 1,45,559,1157,64"
s 120 memcheck compute-sanitizer --tool memcheck $H verify $K --shapes small $SH --lse --dtype f16
s 120 racecheck compute-sanitizer --tool racecheck $H verify $K --shapes small $SH --dtype f16
s 120 synccheck compute-sanitizer --tool synccheck $H verify $K --shapes small $SH --dtype f16
pack 1
