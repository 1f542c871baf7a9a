# Session 42, call 2 (H200): s42c = s41c + S in two halves for e4m3 at head dim 128 (each half of the
# keys its own wgmma group; the speculative exponentials of the first half start while the second
# is computed). (a) verify of the e4m3 sets with LSE, the same at scale 1.0, racecheck and
# synccheck of the grid and persistent e4m3 picks; (b) the FP8 set, s41c / s42c alternated twice;
# (c) ncu cycles of the e4m3 pick, both builds.
GPU_DIR=.gpu/s42c source evidence/session35/scripts/common.sh
p() { pack 2 > /dev/null; }
unpack() { # tag dir
  mkdir -p $2/cubin; xz -dc .gpu/$1/host.xz > $2/host; chmod +x $2/host
  xz -dc .gpu/$1/kernels_sm_90a.cubin.xz > $2/cubin/kernels_sm_90a.cubin; cp .gpu/$1/kernels_sm_90a.ptx-fnv64 $2/cubin/
}
unpack s41c /tmp/gc
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
  s 200 fp8_${r}_s $H bench $F --json /tmp/j/fp8_${r}_s.json
  p
done
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
N="--clock-control none --kernel-name regex:flash_ws_fp8_m128_n128_s2_pp_ov_mbarrier_d128 --launch-count 1 --section SpeedOfLight --section SchedulerStats"
B="bench --dtype e4m3 --shape 2,16,4096,128 --kernel flash_ws_fp8_m128_n128_s2_pp_ov_mbarrier --iters 1 --warmup 1 --warmup-ms 0 --calls-per-graph 1"
FLASHRS_CUBIN_DIR=/tmp/gc/cubin s 150 ncu_c $NCU $N /tmp/gc/host $B
s 150 ncu_s $NCU $N $H $B
p
grep -E "Elapsed Cycles|SM Frequency" /tmp/l/ncu_*.log
for f in /tmp/l/fp8_*.log; do echo "== $f"; grep -E "^flash_ws_fp8.*pick" $f | awk "{print \$4,\$5,\$6,\$7,\$9,\$10,\$(NF-1)}"; done
grep -h "ERROR SUMMARY\|RACECHECK SUMMARY" /tmp/l/san_*.log
