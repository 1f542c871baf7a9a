# Session 27, call 2 (H100): the checks of s27a (v40) on split launches: the GPU tests, verify
# (both layouts, LSE) and --repeat of shapes whose last round is split (2 to 8 slices, head dims
# 64 and 128, S_q != S_k), 100 random problems, memcheck/racecheck/synccheck of split launches.
GPU_DIR=.gpu/s27a source evidence/session27/scripts/common.sh
K192=flash_ws_m192_n128_s2_pp_ov_ps_mbarrier; K128P=flash_ws_m128_n128_s2_pp_ov_ps_mbarrier
K128=flash_ws_m128_n128_s2_pp_ov_mbarrier; K256=flash_ws_m128_n80_s2_pp_ov_mbarrier
SPLIT="--shape 2,8,2048,64 --shape 4,16,2048,64 --shape 1,3,700,64 --shape 1,4,1024,128 --shape 1,7,1000,1500,64 --shape 1,1,192,4096,64 --shape 1,2,256,2048,128"
s 200 test_gpu /tmp/g/tests/gpu --include-ignored --test-threads=1
s 300 verify_split $H verify --kernel $K192 --kernel $K128P --lse --layout bhsd,bshd --shapes small,odd $SPLIT --json /tmp/j/verify_split.json
s 200 repeat_split $H verify --kernel $K192 --kernel $K128P --repeat 20 --shapes small $SPLIT --json /tmp/j/repeat_split.json
s 150 verify_random $H verify --random 100 --json /tmp/j/verify_random.json
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
for tool in memcheck racecheck synccheck; do s 200 san_$tool $CS --tool $tool --print-limit 20 $H verify --seed 7 --kernel $K192 --kernel $K128P --dtype f16 --shapes small --shape 1,3,700,64 --shape 1,1,192,4096,64 --shape 1,2,256,2048,128; done
pack 2
