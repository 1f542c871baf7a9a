# Session 42, call 1 (H200): v57 with more of S exponentiated speculatively before the wait for the
# last P V (e4m3, head dim 128): s41c = 32 registers (the tree), s42a = 48, s42b = 64 (all of S).
# (a) verify of the e4m3 sets with LSE, and at scale 1.0 (maxima move often: the recompute path),
# for s42a and s42b; (b) the FP8 set's e4m3 pick, c / a / b alternated twice; (c) ncu cycles.
GPU_DIR=.gpu/s42a source evidence/session35/scripts/common.sh
p() { pack 1 > /dev/null; }
unpack() { # tag dir
  mkdir -p $2/cubin; xz -dc .gpu/$1/host.xz > $2/host; chmod +x $2/host
  xz -dc .gpu/$1/kernels_sm_90a.cubin.xz > $2/cubin/kernels_sm_90a.cubin; cp .gpu/$1/kernels_sm_90a.ptx-fnv64 $2/cubin/
}
unpack s41c /tmp/gc; unpack s42a /tmp/ga; unpack s42b /tmp/gb
run() { # build-letter step-seconds name args...
  local b=$1 t=$2 n=$3; shift 3
  FLASHRS_CUBIN_DIR=/tmp/g$b/cubin s $t $n /tmp/g$b/host "$@"
}
for b in a b; do
  run $b 200 verify_fp8_$b verify --dtype e4m3 --lse --json /tmp/j/verify_fp8_$b.json
  run $b 100 verify_fp8_scale_$b verify --dtype e4m3 --lse --scale 1.0 --json /tmp/j/verify_fp8_scale_$b.json
done
p
F="--dtype e4m3 --shapes fp8 --iters 40"
for r in 1 2; do for b in c a b; do
  run $b 200 fp8_${r}_$b bench $F --json /tmp/j/fp8_${r}_$b.json
done; p; done
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
for b in c a b; do
  FLASHRS_CUBIN_DIR=/tmp/g$b/cubin s 150 ncu_$b $NCU --clock-control none --kernel-name regex:flash_ws_fp8_m128_n128_s2_pp_ov_mbarrier_d128 --launch-count 1 --section SpeedOfLight --section SchedulerStats /tmp/g$b/host bench --dtype e4m3 --shape 2,16,4096,128 --kernel flash_ws_fp8_m128_n128_s2_pp_ov_mbarrier --iters 1 --warmup 1 --warmup-ms 0 --calls-per-graph 1
done
p
grep -E "Elapsed Cycles|SM Frequency|Issue Slots Busy" /tmp/l/ncu_*.log
for f in /tmp/l/fp8_*.log; do echo "== $f"; grep -E "^flash_ws_fp8.*pick" $f | awk "{print \$4,\$5,\$6,\$7,\$9,\$10,\$(NF-1)}"; done
