# Session 46, call 2 (H200): v64 attempt, every consumer's S before any consumer's P V. s46b =
# HEAD with the e4m3 head-dim-128 overlapped loop taking two turns per tile at the tensor cores
# (S(t) issued, turn passed; then P V(t-1) issued, turn passed), so that the tensor cores run
# c0's S, c1's S, c0's P V, c1's P V instead of c0's S and P V, then c1's. Only the e4m3
# head-dim-128 ping-pong kernels change. (a) verify of the pick and the grid twin with LSE;
# (b) the pick's tile timelines at (2,16,4096,128) for both builds; (c) bench alternated ABBA,
# causal apart.
GPU_DIR=.gpu/s46b source .gpu/s46b/common.sh
p() { pack 2 > /dev/null; }
for b in old; do
  mkdir -p /tmp/g$b/cubin; xz -dc .gpu/s46b/$b/host.xz > /tmp/g$b/host; chmod +x /tmp/g$b/host
  xz -dc .gpu/s46b/$b/kernels_sm_90a.cubin.xz > /tmp/g$b/cubin/kernels_sm_90a.cubin; cp .gpu/s46b/$b/kernels_sm_90a.ptx-fnv64 /tmp/g$b/cubin/
done
printf '#!/bin/bash\nb=$1; shift\nif [ $b = b ]; then exec %s "$@"; else FLASHRS_CUBIN_DIR=/tmp/g$b/cubin exec /tmp/g$b/host "$@"; fi\n' "$H" > /tmp/run; chmod +x /tmp/run
run=/tmp/run
PS=flash_ws_fp8_m128_n128_s2_pp_ov_ps_mbarrier
GR=flash_ws_fp8_m128_n128_s2_pp_ov_mbarrier
s 200 verify_ps $run b verify --dtype e4m3 --lse --kernel $PS --json /tmp/j/verify_ps.json; p
s 200 verify_gr $run b verify --dtype e4m3 --lse --kernel $GR --json /tmp/j/verify_gr.json; p
for b in old b; do s 60 trace_$b $run $b trace --dtype e4m3 --kernel $PS --shape 2,16,4096,128 --json /tmp/j/trace_$b.json; p; done
X="--dtype e4m3 --shape 2,16,4096,128 --shape 1,16,8192,128 --shape 4,32,2048,128 --iters 40 --kernel $PS"
C="--dtype e4m3 --shape 2,16,4096,128 --causal --iters 40 --kernel $PS"
i=0
for b in old b b old; do
  i=$((i+1)); s 150 bench${i}_$b $run $b bench $X --json /tmp/j/bench${i}_$b.json; p
  s 100 benchc${i}_$b $run $b bench $C --json /tmp/j/benchc${i}_$b.json; p
done
grep -hE "^PASS|^FAIL" /tmp/l/verify*.log | sort | uniq -c
for b in old b; do echo "== trace $b"; sed -n 12,22p /tmp/l/trace_$b.log | cut -c1-130; done
for f in /tmp/l/bench*.log; do echo "== $f"; grep -E "^flash_ws" $f | cut -c1-120; done
