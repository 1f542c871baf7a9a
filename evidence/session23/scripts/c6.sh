# Session 23, call 6: checks of v30 (build t1, .gpu/s23b: two Q buffers in the persistent
# flash_ws). verify on problems of 240 items (two rounds per block, so both Q buffers and the
# tail split run), both layouts and dtypes, LSE, grouped heads, e4m3; determinism; the GPU tests.
GPU_DIR=.gpu/s23b source evidence/session23/scripts/common.sh
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
P16="--kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n192_s3_ov_ps_mbarrier --kernel flash_ws_m128_n176_s2_pp_ov_ps_mbarrier"
MANY="--shape 1,40,1024,64 --shape 1,20,1500,128 --shape 2,9,1500,64 --shape 1,20,1000,700,128"
s 200 verify_many $H verify $P16 $MANY --shapes small --lse --layout bhsd,bshd --json /tmp/j/verify_many.json
s 150 verify_many_gqa $H verify $P16 --shape 1,40,1024,64 --shape 1,20,1500,128 --shapes small --heads-kv 4 --lse --layout bshd
s 150 verify_many_repeat $H verify $P16 --shape 1,40,1024,64 --shape 1,20,1500,128 --shapes small --repeat 20
s 150 verify_fp8_many $H verify --dtype e4m3 --kernel flash_ws_fp8_m128_n128_s2_pp_ov_ps_mbarrier --shape 1,20,1500,128 --shape 1,8,2200,128 --lse --layout bhsd,bshd
for t in gpu api_gpu fp8_gpu; do s 200 test_$t /tmp/g/tests/$t --include-ignored --test-threads=1; done
pack 6
