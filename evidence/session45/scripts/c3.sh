# Session 45, call 3 (H200): where the e4m3 head-dim-128 pick's consumer passes the ping-pong turn.
# s45c (.gpu/s45e/old) = HEAD's kernels with the tile timelines (turn passed once the products are
# issued); s45d (.gpu/s45e/d) = passed once the tile's S has landed; s45e = passed once the
# speculative exponentials (the 32 before the wait for the last P V) are issued. Only the e4m3
# head-dim-128 128-key kernels change. (a) verify of both picks with LSE; (b) their tile
# timelines at (2,16,4096,128); (c) the three builds' picks alternated, twice, causal apart.
GPU_DIR=.gpu/s45e source .gpu/s45e/common.sh
p() { pack 3 > /dev/null; }
for b in old d; do
  mkdir -p /tmp/g$b/cubin; xz -dc .gpu/s45e/$b/host.xz > /tmp/g$b/host; chmod +x /tmp/g$b/host
  xz -dc .gpu/s45e/$b/kernels_sm_90a.cubin.xz > /tmp/g$b/cubin/kernels_sm_90a.cubin; cp .gpu/s45e/$b/kernels_sm_90a.ptx-fnv64 /tmp/g$b/cubin/
done
# `run B ARGS`: build B's host (e: this folder's) with its cubins (a script, so that `timeout` runs it).
printf '#!/bin/bash\nb=$1; shift\nif [ $b = e ]; then exec %s "$@"; else FLASHRS_CUBIN_DIR=/tmp/g$b/cubin exec /tmp/g$b/host "$@"; fi\n' "$H" > /tmp/run; chmod +x /tmp/run
run=/tmp/run
PS=flash_ws_fp8_m128_n128_s2_pp_ov_ps_mbarrier
s 200 verify_e $run e verify --dtype e4m3 --lse --kernel $PS --json /tmp/j/verify_e.json; p
s 200 verify_d $run d verify --dtype e4m3 --lse --kernel $PS --json /tmp/j/verify_d.json; p
for b in old d e; do s 60 trace_$b $run $b trace --dtype e4m3 --kernel $PS --shape 2,16,4096,128 --json /tmp/j/trace_$b.json; p; done
X="--dtype e4m3 --shape 2,16,4096,128 --shape 1,16,8192,128 --shape 4,32,2048,128 --iters 40 --kernel $PS"
C="--dtype e4m3 --shape 2,16,4096,128 --causal --iters 40 --kernel $PS"
for b in old d e e d old; do
  s 150 bench_$b $run $b bench $X --json /tmp/j/bench_${b}_$(date +%s).json; p
  s 100 benchc_$b $run $b bench $C --json /tmp/j/benchc_${b}_$(date +%s).json; p
done
grep -hE "^test result|^PASS|^FAIL|SUMMARY" /tmp/l/*.log | sort | uniq -c
for b in old d e; do echo "== trace $b"; sed -n 12,20p /tmp/l/trace_$b.log | cut -c1-130; done
