# Session 22, call 1: the persistent e4m3 kernels' checks (call 2 benches them).
source evidence/session22/scripts/common.sh
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
PS="--kernel flash_ws_fp8_m128_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_fp8_m128_n128_s2_pp_ps_mbarrier"
s 200 test_fp8 /tmp/g/tests/fp8_gpu --include-ignored --test-threads=1
s 200 verify_fp8 $H verify --dtype e4m3 --layout bhsd,bshd --lse --json /tmp/j/verify_fp8_h100.json
# Shapes of more items than SMs: several items per block and a split last round (d128, d256, GQA, bshd).
V="verify --dtype e4m3 --shape 1,8,2200,128 --shape 1,8,2200,256 --shape 3,6,1500,128 --shape 2,8,2048,256 --heads-kv 2 --lse"
s 200 verify_ps $H $V --layout bhsd,bshd $PS --json /tmp/j/verify_fp8_ps.json
s 150 verify_ps_nosplit env FLASHRS_TAIL_SPLIT=0 $H $V $PS
# The 16-bit persistent path after the workspace helper's move (split at these shapes).
s 150 verify_16_ps $H verify --shape 2,16,4096,64 --shape 1,8,2200,128 --lse --kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier
SV="verify --dtype e4m3 --shape 1,8,2200,128 --shape 1,8,2200,256 --shape 1,3,333,128 --lse"
for tool in memcheck racecheck synccheck; do s 200 ${tool}_ps compute-sanitizer --tool $tool $H $SV $PS; done
pack 1
