# Session 28, call 7: checks of this tree's build (s28c, v41): the three GPU test binaries (the
# ignored GPU tests included), verify --quick with LSE of every variant, grouped heads in bf16,
# 100 random problems, e4m3 verify, and racecheck/synccheck/memcheck of split launches.
GPU_DIR=.gpu/s28c source evidence/session28/scripts/common.sh
for t in gpu api_gpu fp8_gpu; do s 300 test_$t /tmp/g/tests/$t --include-ignored --test-threads=1; done
s 200 verify_quick $H verify --quick --lse --json /tmp/j/verify_quick.json
s 150 verify_gqa $H verify --heads-kv 2 --lse --dtype bf16 --shapes small --shape 2,8,2048,64 --shape 1,133,128,4096,128 --json /tmp/j/verify_gqa.json
s 200 verify_random $H verify --random 100 --json /tmp/j/verify_random.json
s 120 verify_fp8 $H verify --dtype e4m3 --lse --shape 1,136,128,4096,128 --json /tmp/j/verify_fp8.json
K192=flash_ws_m192_n128_s2_pp_ov_ps_mbarrier; K128P=flash_ws_m128_n128_s2_pp_ov_ps_mbarrier
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
for tool in memcheck racecheck synccheck; do
  s 200 san_$tool $CS --tool $tool --print-limit 20 $H verify --seed 7 --kernel $K192 --kernel $K128P --dtype f16 --shapes small --shape 1,134,192,1152,64 --shape 1,134,128,1100,128
done
pack 7
