# Session 46, call 1 (H200): an ablation, not for commit. s46a = HEAD with the e4m3 head-dim-128
# kernels' O += P V reading A from Q's tile in shared memory (an SS product) instead of P's
# registers (RS); P is still computed and packed (folded by xor into a predicated shared store
# so that ptxas keeps it). Output wrong; times only. Tests whether the RS product's register
# reads slow the softmax beside it (session 45's hypothesis). (a) the pick's tile timelines at
# (2,16,4096,128) for both builds; (b) bench of the pick (with the fp16 pick), alternated ABBA.
GPU_DIR=.gpu/s46a source .gpu/s46a/common.sh
p() { pack 1 > /dev/null; }
for b in old; do
  mkdir -p /tmp/g$b/cubin; xz -dc .gpu/s46a/$b/host.xz > /tmp/g$b/host; chmod +x /tmp/g$b/host
  xz -dc .gpu/s46a/$b/kernels_sm_90a.cubin.xz > /tmp/g$b/cubin/kernels_sm_90a.cubin; cp .gpu/s46a/$b/kernels_sm_90a.ptx-fnv64 /tmp/g$b/cubin/
done
printf '#!/bin/bash\nb=$1; shift\nif [ $b = a ]; then exec %s "$@"; else FLASHRS_CUBIN_DIR=/tmp/g$b/cubin exec /tmp/g$b/host "$@"; fi\n' "$H" > /tmp/run; chmod +x /tmp/run
run=/tmp/run
PS=flash_ws_fp8_m128_n128_s2_pp_ov_ps_mbarrier
for b in old a; do s 60 trace_$b $run $b trace --dtype e4m3 --kernel $PS --shape 2,16,4096,128 --json /tmp/j/trace_$b.json; p; done
X="--dtype e4m3 --shape 2,16,4096,128 --shape 1,16,8192,128 --iters 40 --kernel $PS"
i=0
for b in old a a old; do
  i=$((i+1)); s 150 bench${i}_$b $run $b bench $X --json /tmp/j/bench${i}_$b.json; p
done
for b in old a; do echo "== trace $b"; sed -n 12,22p /tmp/l/trace_$b.log | cut -c1-130; done
for f in /tmp/l/bench_*.log; do echo "== $f"; grep -E "^flash_ws" $f | cut -c1-120; done
