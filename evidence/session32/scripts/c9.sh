# Session 32, call 9 (H100): s32e, 250 bit-identical repeats of the new pick (and the 192-row one
# beside it), and the three GPU test binaries.
GPU_DIR=.gpu/s32e source evidence/session32/scripts/common.sh
K256=flash_ws_m256_n64_s3_pp_ov_mbarrier; K192=flash_ws_m192_n128_s2_pp_ov_ps_mbarrier
s 300 verify_repeat $H verify --kernel $K256 --kernel $K192 --repeat 250 --shapes small,odd --shape 2,8,2048,64 --shape 4,8,2048,64 --json /tmp/j/verify_repeat.json
for t in gpu api_gpu fp8_gpu; do s 200 test_$t /tmp/g/tests/$t --test-threads 1; done
pack 9
