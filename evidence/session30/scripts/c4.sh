# Session 30, call 4 (H100): the GPU test binaries of s30c (the api tests launch back to back, as
# dependents).
GPU_DIR=.gpu/s30c source evidence/session30/scripts/common.sh
K192=flash_ws_m192_n128_s2_pp_ov_ps_mbarrier; K128P=flash_ws_m128_n128_s2_pp_ov_ps_mbarrier
K128=flash_ws_m128_n128_s2_pp_ov_mbarrier; K256=flash_ws_m128_n80_s2_pp_ov_mbarrier
P="--kernel $K192 --kernel $K128P --kernel $K128 --kernel $K256"
s 300 test_gpu /tmp/g/tests/gpu --include-ignored --test-threads 1
s 100 test_api_gpu /tmp/g/tests/api_gpu --include-ignored --test-threads 1
s 60 test_fp8_gpu /tmp/g/tests/fp8_gpu --include-ignored --test-threads 1
pack 4
