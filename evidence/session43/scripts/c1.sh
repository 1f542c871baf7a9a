# Session 43, call 1 (H200): s43a = v59 + trial twins with a share of the exponentials on the FMA
# pipe (`fma_exp2` = k of every 8 column tiles, `arch::exp2_by_polynomial`): e4m3 pick fx2/fx3,
# the 16-bit head-dim-64 pick (m192 persistent) fx2/fx3, the head-dim-128 pick fx1.
# (a) verify of the new twins (e4m3 with LSE; f16/bf16 sets with LSE); (b) benches, pick and
# twins in the same process, twice; (c) ncu of the e4m3 pick and fx2: cycles and pipe use.
GPU_DIR=.gpu/s43a source evidence/session35/scripts/common.sh
p() { pack 1 > /dev/null; }
F8=flash_ws_fp8_m128_n128_s2_pp_ov_mbarrier
F8X2=flash_ws_fp8_m128_n128_s2_pp_ov_fx2_mbarrier
F8X3=flash_ws_fp8_m128_n128_s2_pp_ov_fx3_mbarrier
W64=flash_ws_m192_n128_s2_pp_ov_ps_mbarrier
W128=flash_ws_m128_n128_s2_pp_ov_ps_mbarrier
s 200 verify_fp8 $H verify --dtype e4m3 --lse --kernel $F8X2 --kernel $F8X3 --json /tmp/j/verify_fp8.json
s 200 verify_16 $H verify --lse --shapes small,mission,long,odd,edge --kernel ${W64/_mbarrier/_fx2_mbarrier} --kernel ${W64/_mbarrier/_fx3_mbarrier} --kernel ${W128/_mbarrier/_fx1_mbarrier} --json /tmp/j/verify_16.json
p
for r in 1 2; do
  s 150 fp8_$r $H bench --dtype e4m3 --shapes fp8 --iters 40 --kernel $F8 --kernel $F8X2 --kernel $F8X3 --json /tmp/j/fp8_$r.json
  s 150 hd64_$r $H bench --shape 2,16,4096,64 --shape 1,16,8192,64 --shape 4,16,2048,64 --iters 40 --kernel $W64 --kernel ${W64/_mbarrier/_fx2_mbarrier} --kernel ${W64/_mbarrier/_fx3_mbarrier} --json /tmp/j/hd64_$r.json
  s 150 hd128_$r $H bench --shape 2,16,4096,128 --shape 1,16,8192,128 --iters 40 --kernel $W128 --kernel ${W128/_mbarrier/_fx1_mbarrier} --json /tmp/j/hd128_$r.json
  p
done
s 150 hd64_causal $H bench --shape 2,16,4096,64 --causal --iters 40 --kernel $W64 --kernel ${W64/_mbarrier/_fx2_mbarrier} --kernel ${W64/_mbarrier/_fx3_mbarrier} --json /tmp/j/hd64_causal.json
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
for k in $F8 $F8X2; do
  s 150 ncu_$k $NCU --clock-control none --kernel-name regex:${k}_d128 --launch-count 1 --section SpeedOfLight --section SchedulerStats --section ComputeWorkloadAnalysis --metrics sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active $H bench --dtype e4m3 --shape 2,16,4096,128 --kernel $k --iters 1 --warmup 1 --warmup-ms 0 --calls-per-graph 1
done
p
grep -hE "Elapsed Cycles|SM Frequency|pipe_|Issued Warp" /tmp/l/ncu_*.log
for f in /tmp/l/fp8_*.log /tmp/l/hd*.log; do echo "== $f"; grep -E "^flash" $f | awk '{print $1,$2,$3,$4,$5,$6,$7,$8,$9,$10}' | cut -c1-150; done
