# Session 26, call 3 (H100): s26b = this tree (v38; kernels as s26a's): the GPU test binaries,
# verify of the picks (every set, both layouts, LSE), grouped heads, e4m3 verify, 200 random
# problems, and memcheck, racecheck and synccheck over verify --quick of the picks.
GPU_DIR=.gpu/s26b source evidence/session26/scripts/common.sh
K192=flash_ws_m192_n128_s2_pp_ov_ps_mbarrier; K128P=flash_ws_m128_n128_s2_pp_ov_ps_mbarrier
K128=flash_ws_m128_n128_s2_pp_ov_mbarrier; K256=flash_ws_m128_n80_s2_pp_ov_mbarrier
P="--kernel $K192 --kernel $K128P --kernel $K128 --kernel $K256"
for t in gpu api_gpu fp8_gpu; do s 300 test_$t /tmp/g/tests/$t --include-ignored --test-threads=1; done
s 300 verify_picks $H verify $P --lse --layout bhsd,bshd --shapes small,mission,long,odd,edge --shape 2,8,2048,64 --shape 3,8,1000,64 --json /tmp/j/verify_picks.json
s 200 verify_gqa $H verify $P --heads-kv 2 --lse --dtype bf16 --shapes small,mission,long --shape 2,8,2048,64 --shape 3,8,1000,128 --json /tmp/j/verify_gqa.json
s 150 verify_fp8 $H verify --dtype e4m3 --lse --json /tmp/j/verify_fp8.json
s 250 verify_random $H verify --random 200 --json /tmp/j/verify_random.json
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
for tool in memcheck racecheck synccheck; do s 300 san_$tool $CS --tool $tool --print-limit 20 $H verify --quick --seed 7 $P; done
pack 3
