# Session 41, call 2 (H200): s41b = s38a + v57 as kept: the speculative exponentials for e4m3 at
# head dim 128 with 128-key tiles only (every other kernel's PTX the same instruction for
# instruction). (a) bit-identical outputs and LSEs against s38a through `attend` (e4m3 pick, causal
# and not, a scale that moves maxima often; the fp16 pick); (b) verify: the e4m3 sets with LSE,
# --quick --lse; racecheck and synccheck of the e4m3 pick; (c) A/B s38a / s41b alternated: the FP8
# set twice, the std set's fp16 picks once; (d) ncu cycles of the e4m3 pick, old and new.
GPU_DIR=.gpu/s41b source evidence/session35/scripts/common.sh
p() { pack 2 > /dev/null; }
mkdir -p /tmp/g_old/cubin; xz -dc .gpu/s38a/host.xz > /tmp/g_old/host; chmod +x /tmp/g_old/host
xz -dc .gpu/s38a/kernels_sm_90a.cubin.xz > /tmp/g_old/cubin/kernels_sm_90a.cubin; cp .gpu/s38a/kernels_sm_90a.ptx-fnv64 /tmp/g_old/cubin/
for d in 128; do mkdir -p /tmp/in$d; python3 evidence/session41/scripts/mknpy.py /tmp/in$d 2 8 2048 $d $d; done
same() { # name, then attend arguments (without --out/--lse)
  local name=$1; shift
  FLASHRS_CUBIN_DIR=/tmp/g_old/cubin timeout 60 /tmp/g_old/host attend "$@" --out /tmp/j/${name}_old.npy --lse /tmp/j/${name}_old_lse.npy > /tmp/l/same_${name}_old.log 2>&1
  timeout 60 $H attend "$@" --out /tmp/j/${name}_new.npy --lse /tmp/j/${name}_new_lse.npy > /tmp/l/same_${name}_new.log 2>&1
  if [ -s /tmp/j/${name}_new.npy ] && cmp -s /tmp/j/${name}_old.npy /tmp/j/${name}_new.npy && cmp -s /tmp/j/${name}_old_lse.npy /tmp/j/${name}_new_lse.npy; then echo "same $name: IDENTICAL"; else echo "same $name: DIFFERENT"; fi >> /tmp/l/same.log
  rm -f /tmp/j/${name}_*.npy
}
I="--q /tmp/in128/q.npy --k /tmp/in128/k.npy --v /tmp/in128/v.npy"
for c in "" --causal; do for sc in "" "--scale 2" "--scale 20"; do
  tag=$(echo "x$c$sc" | tr -d ' -')
  same e4m3_$tag $I $c $sc --dtype e4m3 --quantize
  same e4m3_ps_$tag $I $c $sc --dtype e4m3 --quantize --kernel flash_ws_fp8_m128_n128_s2_pp_ov_ps_mbarrier
  same f16_$tag $I $c $sc --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier
done; done
cat /tmp/l/same.log; p
s 200 verify_fp8 $H verify --dtype e4m3 --lse --json /tmp/j/verify_fp8.json; p
s 100 verify_fp8_logit $H verify --dtype e4m3 --shapes odd --logit-scale 8 --json /tmp/j/verify_fp8_logit.json; p
s 240 verify_quick $H verify --quick --lse --json /tmp/j/verify_quick.json; p
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
for tool in racecheck synccheck; do
  s 120 san_$tool $CS --tool $tool --print-limit 20 $H verify --dtype e4m3 --shapes odd --kernel flash_ws_fp8_m128_n128_s2_pp_ov_mbarrier --seed 7; p
done
ab() { # name, then bench arguments
  local name=$1; shift
  FLASHRS_CUBIN_DIR=/tmp/g_old/cubin s 200 ${name}_old /tmp/g_old/host bench "$@" --json /tmp/j/${name}_old.json
  s 200 ${name}_new $H bench "$@" --json /tmp/j/${name}_new.json
  p
}
F="--dtype e4m3 --shapes fp8 --kernel flash_ws_fp8_m128_n128_s2_pp_ov_mbarrier --iters 40"
ab fp8a $F
ab fp8b $F
ab std --shapes std --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --iters 40
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
for v in old new; do
  if [ $v = old ]; then HH=/tmp/g_old/host; CD=/tmp/g_old/cubin; else HH=$H; CD=/tmp/g/cubin; fi
  FLASHRS_CUBIN_DIR=$CD s 150 ncu_$v $NCU --clock-control none --kernel-name regex:flash_ws_fp8_m128_n128_s2_pp_ov_mbarrier_d128 --launch-count 1 --section SpeedOfLight --section ComputeWorkloadAnalysis --section SchedulerStats $HH bench --dtype e4m3 --shape 2,16,4096,128 --kernel flash_ws_fp8_m128_n128_s2_pp_ov_mbarrier --iters 1 --warmup 1 --warmup-ms 0 --calls-per-graph 1
done
p
grep -E "Elapsed Cycles|Duration|SM Frequency|Issue Slots Busy|Executed Ipc A" /tmp/l/ncu_*.log
for f in /tmp/l/fp8*.log /tmp/l/std*.log; do echo "== $f"; grep -E "^flash_ws" $f | awk "{print \$1,\$2,\$3,\$4,\$5,\$6,\$7,\$8,\$9,\$10,\$(NF-1)}" | head -30; done
for f in /tmp/l/verify*.log /tmp/l/san*.log; do echo "$(basename $f): $(grep -E '^PASS|^FAIL|ERROR SUMMARY|RACECHECK SUMMARY' $f | tail -1)"; done
