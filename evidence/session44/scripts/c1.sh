# Session 44, call 1 (H200): s44a = this tree with v61, the row sums by the tensor cores (`_ts`
# twins of the two e4m3 head-dim-128 kernels: V's tiles followed by 8 rows of ones, O += P V as
# n136). (a) verify of the twins with LSE, at the usual scale and at 1.0 (maxima move often);
# (b) the twins against their plain kernels in one process, both orders, on the FP8 set;
# (c) the accuracy study of the twin and the pick.
GPU_DIR=.gpu/s44a source .gpu/s44a/common.sh
p() { pack 1 > /dev/null; }
PS=flash_ws_fp8_m128_n128_s2_pp_ov_ps_mbarrier; TS=flash_ws_fp8_m128_n128_s2_pp_ov_ps_ts_mbarrier
GR=flash_ws_fp8_m128_n128_s2_pp_ov_mbarrier; GT=flash_ws_fp8_m128_n128_s2_pp_ov_ts_mbarrier
s 200 verify_ts $H verify --dtype e4m3 --lse --kernel $TS --kernel $GT --json /tmp/j/verify_ts.json; p
s 100 verify_ts_scale $H verify --dtype e4m3 --lse --scale 1.0 --kernel $TS --kernel $GT --json /tmp/j/verify_ts_scale.json; p
for r in 1 2; do
  s 150 ab_$r $H bench --dtype e4m3 --shapes fp8 --iters 40 --kernel $PS --kernel $TS --kernel $GR --kernel $GT --json /tmp/j/ab_$r.json; p
  s 150 ba_$r $H bench --dtype e4m3 --shapes fp8 --iters 40 --kernel $TS --kernel $PS --kernel $GT --kernel $GR --json /tmp/j/ba_$r.json; p
done
s 120 rmse $H verify --dtype e4m3 --rmse --kernel $PS --kernel $TS --json /tmp/j/rmse.json; p
grep -hE "^test result|^PASS|^FAIL|SUMMARY" /tmp/l/*.log | sort | uniq -c
for f in ab_1 ba_1 ab_2 ba_2; do echo "== $f"; grep -E "^flash_ws_fp8" /tmp/l/$f.log | awk '{print $1,$2,$3,$4,$5,$6,$7,$8,$9,$10}' | sed 's/flash_ws_fp8_m128_n128_s2_pp_ov_//'; done
tail -30 /tmp/l/rmse.log
