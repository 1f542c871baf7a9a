# Session 42, call 4 (H200): s42d = s41c + the speculative softmax's keep-or-move decision by one
# warp vote on each thread's own maxima (no quad exchange, no factor computed, when no row of the
# warp moves its maximum), e4m3 at head dim 128. (a) bit-identical outputs and LSEs against s41c
# through `attend` (causal and not, scales 1/sqrt(D) and 20); (b) verify of the e4m3 sets with
# LSE, the same at scale 1.0, racecheck and synccheck of the grid and persistent e4m3 picks;
# (c) the FP8 set, s41c / s42d alternated twice; (d) ncu cycles of the e4m3 pick, both builds.
GPU_DIR=.gpu/s42d source evidence/session35/scripts/common.sh
p() { pack 4 > /dev/null; }
mkdir -p /tmp/gc/cubin; xz -dc .gpu/s41c/host.xz > /tmp/gc/host; chmod +x /tmp/gc/host
xz -dc .gpu/s41c/kernels_sm_90a.cubin.xz > /tmp/gc/cubin/kernels_sm_90a.cubin; cp .gpu/s41c/kernels_sm_90a.ptx-fnv64 /tmp/gc/cubin/
mkdir -p /tmp/in128; python3 evidence/session41/scripts/mknpy.py /tmp/in128 2 8 2048 128 128
I="--q /tmp/in128/q.npy --k /tmp/in128/k.npy --v /tmp/in128/v.npy --dtype e4m3 --quantize"
for k in flash_ws_fp8_m128_n128_s2_pp_ov_mbarrier flash_ws_fp8_m128_n128_s2_pp_ov_ps_mbarrier; do
for c in "" --causal; do for sc in "" "--scale 20"; do
  FLASHRS_CUBIN_DIR=/tmp/gc/cubin /tmp/gc/host attend $I --kernel $k $c $sc --out /tmp/j/o_old.npy --lse /tmp/j/l_old.npy > /dev/null 2>&1
  $H attend $I --kernel $k $c $sc --out /tmp/j/o_new.npy --lse /tmp/j/l_new.npy > /dev/null 2>&1
  if [ -s /tmp/j/o_new.npy ] && cmp -s /tmp/j/o_old.npy /tmp/j/o_new.npy && cmp -s /tmp/j/l_old.npy /tmp/j/l_new.npy; then r=IDENTICAL; else r=DIFFERENT; fi
  echo "same $k $c $sc: $r" >> /tmp/l/same.log; rm -f /tmp/j/*.npy
done; done; done
cat /tmp/l/same.log
s 200 verify_fp8 $H verify --dtype e4m3 --lse --json /tmp/j/verify_fp8.json
s 100 verify_fp8_scale $H verify --dtype e4m3 --lse --scale 1.0 --json /tmp/j/verify_fp8_scale.json
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
for tool in racecheck synccheck; do
  s 120 san_$tool $CS --tool $tool --print-limit 20 $H verify --dtype e4m3 --shapes odd --kernel flash_ws_fp8_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_fp8_m128_n128_s2_pp_ov_ps_mbarrier --seed 7
done
p
F="--dtype e4m3 --shapes fp8 --iters 40"
for r in 1 2; do
  FLASHRS_CUBIN_DIR=/tmp/gc/cubin s 200 fp8_${r}_c /tmp/gc/host bench $F --json /tmp/j/fp8_${r}_c.json
  s 200 fp8_${r}_d $H bench $F --json /tmp/j/fp8_${r}_d.json
  p
done
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
N="--clock-control none --kernel-name regex:flash_ws_fp8_m128_n128_s2_pp_ov_mbarrier_d128 --launch-count 1 --section SpeedOfLight --section SchedulerStats"
B="bench --dtype e4m3 --shape 2,16,4096,128 --kernel flash_ws_fp8_m128_n128_s2_pp_ov_mbarrier --iters 1 --warmup 1 --warmup-ms 0 --calls-per-graph 1"
FLASHRS_CUBIN_DIR=/tmp/gc/cubin s 150 ncu_c $NCU $N /tmp/gc/host $B
s 150 ncu_d $NCU $N $H $B
p
grep -E "Elapsed Cycles|SM Frequency|Issued Warp" /tmp/l/ncu_*.log
for f in /tmp/l/fp8_*.log; do echo "== $f"; grep -E "^flash_ws_fp8.*pick" $f | awk "{print \$4,\$5,\$6,\$7,\$9,\$10,\$(NF-1)}"; done
grep -h "ERROR SUMMARY\|RACECHECK SUMMARY" /tmp/l/san_*.log
