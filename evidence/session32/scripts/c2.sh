# Session 32, call 2 (H100): s32b, why the 256-row kernels failed in c1 (a hang in verify,
# "unspecified launch failure" elsewhere): each suspect variant alone on one small shape, under
# compute-sanitizer memcheck, then verify, each with a short timeout.
GPU_DIR=.gpu/s32b source evidence/session32/scripts/common.sh
for v in flash_ws_m128_n64_s3_pp_ov_mbarrier flash_ws_m192_n64_s3_pp_ov_mbarrier flash_ws_m256_n64_s3_pp_ov_mbarrier flash_ws_m256_n128_s2_pp_mbarrier; do
  s 40 verify_$v $H verify --kernel $v --shape 1,1,256,64 --shape 2,4,1000,64 --dtype f16 --masks none
  tail -4 /tmp/l/verify_$v.log
  s 60 memcheck_$v compute-sanitizer --tool memcheck $H verify --kernel $v --shape 1,1,256,64 --dtype f16 --masks none
  grep -E "Invalid|ERROR SUMMARY|at 0x|by thread|Error" /tmp/l/memcheck_$v.log | head -6
done
pack 2
