# Session 41, call 4 (H200): s41c = s41b with 32 registers (not 16) of S taken speculatively and
# before the wait, for the e4m3 head-dim-128 kernels only (a probe, not committed). Bit-identity
# against s41b through `attend`; the FP8 set's e4m3 pick, s41b / s41c alternated twice; ncu cycles.
GPU_DIR=.gpu/s41c source evidence/session35/scripts/common.sh
p() { pack 4 > /dev/null; }
mkdir -p /tmp/g_old/cubin; xz -dc .gpu/s41b/host.xz > /tmp/g_old/host; chmod +x /tmp/g_old/host
xz -dc .gpu/s41b/kernels_sm_90a.cubin.xz > /tmp/g_old/cubin/kernels_sm_90a.cubin; cp .gpu/s41b/kernels_sm_90a.ptx-fnv64 /tmp/g_old/cubin/
mkdir -p /tmp/in128; python3 evidence/session41/scripts/mknpy.py /tmp/in128 2 8 2048 128 128
I="--q /tmp/in128/q.npy --k /tmp/in128/k.npy --v /tmp/in128/v.npy --dtype e4m3 --quantize"
for c in "" --causal; do for sc in "" "--scale 20"; do
  FLASHRS_CUBIN_DIR=/tmp/g_old/cubin /tmp/g_old/host attend $I $c $sc --out /tmp/j/o_old.npy --lse /tmp/j/l_old.npy > /dev/null 2>&1
  $H attend $I $c $sc --out /tmp/j/o_new.npy --lse /tmp/j/l_new.npy > /dev/null 2>&1
  if [ -s /tmp/j/o_new.npy ] && cmp -s /tmp/j/o_old.npy /tmp/j/o_new.npy && cmp -s /tmp/j/l_old.npy /tmp/j/l_new.npy; then r=IDENTICAL; else r=DIFFERENT; fi
  echo "same e4m3 $c $sc: $r" >> /tmp/l/same.log; rm -f /tmp/j/*.npy
done; done
cat /tmp/l/same.log
F="--dtype e4m3 --shapes fp8 --kernel flash_ws_fp8_m128_n128_s2_pp_ov_mbarrier --iters 40"
for r in 1 2; do
  FLASHRS_CUBIN_DIR=/tmp/g_old/cubin s 200 fp8_${r}_b /tmp/g_old/host bench $F --json /tmp/j/fp8_${r}_b.json
  s 200 fp8_${r}_c $H bench $F --json /tmp/j/fp8_${r}_c.json
  p
done
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
for v in b c; do
  if [ $v = b ]; then HH=/tmp/g_old/host; CD=/tmp/g_old/cubin; else HH=$H; CD=/tmp/g/cubin; fi
  FLASHRS_CUBIN_DIR=$CD s 150 ncu_$v $NCU --clock-control none --kernel-name regex:flash_ws_fp8_m128_n128_s2_pp_ov_mbarrier_d128 --launch-count 1 --section SpeedOfLight --section SchedulerStats $HH bench --dtype e4m3 --shape 2,16,4096,128 --kernel flash_ws_fp8_m128_n128_s2_pp_ov_mbarrier --iters 1 --warmup 1 --warmup-ms 0 --calls-per-graph 1
done
p
grep -E "Elapsed Cycles|SM Frequency|Issue Slots Busy" /tmp/l/ncu_*.log
for f in /tmp/l/fp8_*.log; do echo "== $f"; grep -E "^flash_ws_fp8.*pick" $f | awk "{print \$4,\$5,\$6,\$7,\$9,\$10,\$(NF-1)}"; done
