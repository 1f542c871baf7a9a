# Session 28, call 1 (build s28a: HEAD's kernels plus the instrumented twins' item timelines):
# `host trace` (new) of the persistent picks: where a block's items' cycles go; the GPU tests;
# the bench of (2,8,2048,64) against torch's backends.
GPU_DIR=.gpu/s28a source evidence/session28/scripts/common.sh
K192=flash_ws_m192_n128_s2_pp_ov_ps_mbarrier
K128=flash_ws_m128_n128_s2_pp_ov_ps_mbarrier
for sh in 2,8,2048,64 1,12,2048,64 2,12,2048,64 4,16,2048,64 1,12,2048,3072,64; do
  s 60 tr192_${sh//,/x} $H trace --kernel $K192 --shape $sh --json /tmp/j/tr192_${sh//,/x}.json
done
FLASHRS_TAIL_SPLIT=0 s 60 tr192_2x8x2048x64_nosplit $H trace --kernel $K192 --shape 2,8,2048,64 --json /tmp/j/tr192_2x8x2048x64_nosplit.json
s 60 tr192_2x8x2048x64_again $H trace --kernel $K192 --shape 2,8,2048,64 --json /tmp/j/tr192_2x8x2048x64_again.json
s 60 tr128_2x8x2048x64 $H trace --kernel $K128 --shape 2,8,2048,64 --json /tmp/j/tr128_2x8x2048x64.json
s 60 tr128_4x16x2048x128 $H trace --kernel $K128 --shape 4,16,2048,128 --json /tmp/j/tr128_4x16x2048x128.json
s 400 gpu_tests /tmp/g/tests/gpu --test-threads 1
s 240 bench $H bench --shape 2,8,2048,64 --peers torch --rounds 3 --json /tmp/j/bench_2x8x2048x64.json
for f in /tmp/l/tr*.log; do echo "## $f"; cat $f; done
grep -A12 "summary\|ours /" /tmp/l/bench.log | tail -15
pack 1
