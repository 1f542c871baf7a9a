# Session 46, call 4 (H200): s46base = this tree's build (acacb55's kernels and host, PTX fnv
# e1677a006fca279a). Issue #12's checks on this tree: verify of every e4m3 variant on its shape
# sets (grouped heads included), both layouts, both masks, LSE (`verify_fp8_h200.json`); the RMSE
# study; memcheck, racecheck and synccheck of the two head-dim picks (the persistent head-dim-128
# kernel and the grid kernel at 256) on a small e4m3 problem with a partial tile, both masks.
GPU_DIR=.gpu/s46base source .gpu/s46base/common.sh
p() { pack 4 > /dev/null; }
s 300 verify_fp8 $H verify --dtype e4m3 --layout bhsd,bshd --lse --json /tmp/j/verify_fp8_h200.json; p
s 120 rmse $H verify --dtype e4m3 --rmse --json /tmp/j/rmse_fp8_h200.json; p
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
K="--kernel flash_ws_fp8_m128_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_fp8_m128_n128_s2_pp_ov_mbarrier"
for tool in memcheck racecheck synccheck; do
  s 120 san_$tool $CS --tool $tool --print-limit 20 $H verify --dtype e4m3 --shapes small --shape 1,4,700,128 --shape 1,2,333,256 --seed 7 --lse $K; p
done
grep -hE "^PASS|^FAIL|ERROR SUMMARY|RACECHECK SUMMARY|SYNCCHECK SUMMARY" /tmp/l/*.log
tail -25 /tmp/l/rmse.log | cut -c1-150
