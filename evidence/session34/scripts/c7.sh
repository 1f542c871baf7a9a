# Session 34, call 7 (H100): s34d = s34c with the transposing warps' `transpose_tile` call left
# out (guarded by `problem.seq_q == 12345`, never true here; a probe build, not committed): the
# variant's results are wrong, its time is the rest of its design (the V rows' copy, the barrier
# hand-over, the 40/232 registers) without the transposes.
GPU_DIR=.gpu/s34d source evidence/session34/scripts/common.sh
s 200 bench_skip $H bench --dtype e4m3 --kernel flash_ws_fp8_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_fp8_m128_n128_s2_pp_ov_vr_mbarrier --shape 2,16,4096,128 --shape 1,16,8192,128 --json /tmp/j/bench_skip.json
pack 7
