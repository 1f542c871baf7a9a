# Session 44, call 4 (H200): s44d = HEAD + two experimental e4m3 head-dim-128 variants without
# ping-pong turns (persistent and grid; every other kernel's SASS identical to HEAD's). Verify of
# both with LSE, then the pick and both twins in one process, both orders, twice.
GPU_DIR=.gpu/s44d source .gpu/s44d/common.sh
p() { pack 4 > /dev/null; }
PS=flash_ws_fp8_m128_n128_s2_pp_ov_ps_mbarrier; NP=flash_ws_fp8_m128_n128_s2_ov_ps_mbarrier
NG=flash_ws_fp8_m128_n128_s2_ov_mbarrier
s 200 verify $H verify --dtype e4m3 --lse --kernel $NP --kernel $NG --json /tmp/j/verify.json; p
X="--shapes fp8 --shape 4,32,2048,128 --iters 40"
for r in 1 2; do
  s 150 ab_$r $H bench --dtype e4m3 $X --kernel $PS --kernel $NP --kernel $NG --json /tmp/j/ab_$r.json; p
  s 150 ba_$r $H bench --dtype e4m3 $X --kernel $NG --kernel $NP --kernel $PS --json /tmp/j/ba_$r.json; p
done
grep -hE "^test result|^PASS|^FAIL|SUMMARY" /tmp/l/*.log | sort | uniq -c
for f in ab_1 ba_1 ab_2 ba_2; do echo "== $f"; grep -E "^flash_ws" /tmp/l/$f.log | grep -v "256\]" | awk '{print $1,$2,$4,$5,$6,$7,$8,$9,$(NF-2),$NF}' | sed 's/flash_ws_fp8_m128_n128_s2_//'; done
