# Session 34, call 5 (H100): s34b = s34a + `flash_ws_fp8_m128_n128_s2_pp_ov_vr_mbarrier` (V read
# in its own rows, each tile transposed in shared memory by the producer warpgroup's three idle
# warps; no `fp8_transpose_v` pass). Its e4m3 verify (both layouts, LSE, grouped heads), the
# sanitizers on its small set, the fp8_gpu tests, then the FP8 bench: the pick (V transposed
# before) and the new variant beside our fp16 kernels, two rounds.
GPU_DIR=.gpu/s34b source evidence/session34/scripts/common.sh
VR=flash_ws_fp8_m128_n128_s2_pp_ov_vr_mbarrier
PK=flash_ws_fp8_m128_n128_s2_pp_ov_mbarrier
s 150 verify_vr $H verify --dtype e4m3 --kernel $VR --layout bhsd,bshd --lse --json /tmp/j/verify_vr.json
grep -E "FAIL|PASS" /tmp/l/verify_vr.log | head -5
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
for tool in memcheck racecheck synccheck; do
  s 90 san_vr_$tool $CS --tool $tool --print-limit 20 $H verify --dtype e4m3 --kernel $VR --shapes small --lse --seed 7
done
s 120 test_fp8_gpu /tmp/g/tests/fp8_gpu --include-ignored --test-threads 1
s 300 bench_fp8 $H bench --dtype e4m3 --kernel $PK --kernel $VR --rounds 2 --json /tmp/j/bench_fp8.json
grep -B2 -A12 "speedup" /tmp/l/bench_fp8.log | tail -30
pack 5
