# Session 45, call 5 (H200): s45h = HEAD (e2e9664, the tile timelines) + the e4m3 head-dim-128
# consumers handing the ping-pong turn on once their tile's S has landed, after the release of
# K's slot (`schedule::turn_hand_over`; checked in the SASS: the BAR.ARV follows the
# WARPGROUP.DEPBAR). HEAD's binaries travel in .gpu/s45h/old. (a) verify of the pick with LSE;
# (b) both picks' tile timelines; (c) the picks alternated, twice, causal apart.
GPU_DIR=.gpu/s45h source .gpu/s45h/common.sh
p() { pack 5 > /dev/null; }
mkdir -p /tmp/gold/cubin; xz -dc .gpu/s45h/old/host.xz > /tmp/gold/host; chmod +x /tmp/gold/host
xz -dc .gpu/s45h/old/kernels_sm_90a.cubin.xz > /tmp/gold/cubin/kernels_sm_90a.cubin; cp .gpu/s45h/old/kernels_sm_90a.ptx-fnv64 /tmp/gold/cubin/
printf '#!/bin/bash\nb=$1; shift\nif [ $b = new ]; then exec %s "$@"; else FLASHRS_CUBIN_DIR=/tmp/gold/cubin exec /tmp/gold/host "$@"; fi\n' "$H" > /tmp/run; chmod +x /tmp/run
run=/tmp/run
PS=flash_ws_fp8_m128_n128_s2_pp_ov_ps_mbarrier
s 200 verify_new $run new verify --dtype e4m3 --lse --kernel $PS --json /tmp/j/verify_new.json; p
for b in old new; do s 60 trace_$b $run $b trace --dtype e4m3 --kernel $PS --shape 2,16,4096,128 --json /tmp/j/trace_$b.json; p; done
X="--dtype e4m3 --shape 2,16,4096,128 --shape 1,16,8192,128 --shape 4,32,2048,128 --iters 40 --kernel $PS"
C="--dtype e4m3 --shape 2,16,4096,128 --causal --iters 40 --kernel $PS"
for b in old new new old; do
  s 150 bench_$b $run $b bench $X --json /tmp/j/bench_${b}_$(date +%s).json; p
  s 100 benchc_$b $run $b bench $C --json /tmp/j/benchc_${b}_$(date +%s).json; p
done
grep -hE "^test result|^PASS|^FAIL|SUMMARY" /tmp/l/*.log | sort | uniq -c
for b in old new; do echo "== trace $b"; sed -n 12,18p /tmp/l/trace_$b.log | cut -c1-140; done
