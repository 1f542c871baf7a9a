# Session 30, call 9 (H100): the GPU test binaries of s30e (this tree's kernels; `api_gpu` goes through the
# library's dispatch, which now takes the persistent twins for causal problems), then verify of
# those twins on long causal problems (both dtypes, LSE) and of the varlen set (the grid twins).
GPU_DIR=.gpu/s30e source evidence/session30/scripts/common.sh
s 300 test_gpu /tmp/g/tests/gpu --include-ignored --test-threads 1
s 100 test_api_gpu /tmp/g/tests/api_gpu --include-ignored --test-threads 1
s 60 test_fp8_gpu /tmp/g/tests/fp8_gpu --include-ignored --test-threads 1
s 150 verify_causal_long $H verify --kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --masks causal --lse --shapes mission,long --shape 4,16,2048,64 --shape 1,16,8192,128 --json /tmp/j/verify_causal_long.json
s 100 verify_varlen $H verify --shapes varlen --lse --json /tmp/j/verify_varlen.json
pack 9
