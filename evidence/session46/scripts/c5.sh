# Session 46, call 5 (H200): an ablation, not for commit. s46c = HEAD with every softmax's
# exponential replaced by one FMA and one max (no `ex2`; the output is wrong, times only), to
# bound what an e4m3 P computed without the MUFU unit (its bits straight from the scaled score)
# could gain at head dim 128. Compared with HEAD's e4m3 pick in the same call (the fp16 rows of
# s46c are ablated too; the ratio is taken against HEAD's fp16 pick). (a) the pick's tile
# timelines; (b) bench alternated ABBA, causal apart.
GPU_DIR=.gpu/s46c source .gpu/s46c/common.sh
p() { pack 5 > /dev/null; }
for b in old; do
  mkdir -p /tmp/g$b/cubin; xz -dc .gpu/s46c/$b/host.xz > /tmp/g$b/host; chmod +x /tmp/g$b/host
  xz -dc .gpu/s46c/$b/kernels_sm_90a.cubin.xz > /tmp/g$b/cubin/kernels_sm_90a.cubin; cp .gpu/s46c/$b/kernels_sm_90a.ptx-fnv64 /tmp/g$b/cubin/
done
printf '#!/bin/bash\nb=$1; shift\nif [ $b = c ]; then exec %s "$@"; else FLASHRS_CUBIN_DIR=/tmp/g$b/cubin exec /tmp/g$b/host "$@"; fi\n' "$H" > /tmp/run; chmod +x /tmp/run
run=/tmp/run
PS=flash_ws_fp8_m128_n128_s2_pp_ov_ps_mbarrier
GR=flash_ws_fp8_m128_n128_s2_pp_ov_mbarrier
for b in old c; do s 60 trace_$b $run $b trace --dtype e4m3 --kernel $PS --shape 2,16,4096,128 --json /tmp/j/trace_$b.json; p; done
X="--dtype e4m3 --shape 2,16,4096,128 --shape 1,16,8192,128 --shape 4,32,2048,128 --iters 40 --kernel $PS"
C="--dtype e4m3 --shape 2,16,4096,128 --causal --iters 40 --kernel $PS"
i=0
for b in old c c old; do
  i=$((i+1)); s 150 bench${i}_$b $run $b bench $X --json /tmp/j/bench${i}_$b.json; p
  s 100 benchc${i}_$b $run $b bench $C --json /tmp/j/benchc${i}_$b.json; p
done
for b in old c; do echo "== trace $b"; sed -n 12,22p /tmp/l/trace_$b.log | cut -c1-130; done
for f in /tmp/l/bench*.log; do echo "== $f"; grep -E "^flash_ws" $f | cut -c1-120; done
