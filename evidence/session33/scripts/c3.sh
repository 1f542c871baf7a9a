# Session 33, call 3 (H100): s33b (= s33c with the GPU test binaries): the varlen batch again,
# three rounds, non-causal and causal, the grid and persistent varlen kernels beside the dense
# ones and torch's backends; 1,000 random problems (+250 paged, +250 varlen); the `gpu` and
# `api_gpu` tests (the library's varlen calls now take the persistent kernel at head dim 128).
GPU_DIR=.gpu/s33b source evidence/session33/scripts/common.sh
K="--kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier"
for c in "" --causal; do
  n=varlen${c#--}
  s 200 $n $H bench --varlen $c --shape 1,16,128,128 $K --peers torch --rounds 3 --json /tmp/j/$n.json
done
grep -hE "^note: varlen" /tmp/l/varlen*.log
s 200 verify_random $H verify --random 1000 --json /tmp/j/verify_random.json
for t in gpu api_gpu; do s 200 test_$t /tmp/g/tests/$t --include-ignored --test-threads 1; done
pack 3
