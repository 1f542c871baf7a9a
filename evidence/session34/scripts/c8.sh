# Session 34, call 8 (H100): s34e = this tree (PTX fnv f8cc76013d907621: s34c's kernels with the
# producer warpgroup's roles in a function of their own, which moves an instruction or two of
# every flash_ws producer's set-up; the vr variant experimental). The e4m3 verify of every FP8
# variant and the pick (the e4m3 tensors now carry a fifth map) and of the vr variant by name,
# verify --quick of every variant and of the varlen set, the gpu, api_gpu and fp8_gpu tests; then
# s34a against s34e on the picks at four shapes, alternated, two runs each.
GPU_DIR=.gpu/s34e source evidence/session34/scripts/common.sh
s 150 verify_fp8 $H verify --dtype e4m3 --layout bhsd,bshd --lse --json /tmp/j/verify_fp8.json
s 60 verify_vr $H verify --dtype e4m3 --kernel flash_ws_fp8_m128_n128_s2_pp_ov_vr_mbarrier --lse
s 150 verify_quick $H verify --quick --lse --json /tmp/j/verify_quick.json
s 120 verify_varlen $H verify --shapes varlen --lse --json /tmp/j/verify_varlen.json
for t in gpu api_gpu fp8_gpu; do s 120 test_$t /tmp/g/tests/$t --include-ignored --test-threads 1; done
mkdir -p /tmp/ga/cubin && xz -dc .gpu/s34a_slim/host.xz > /tmp/ga/host && chmod +x /tmp/ga/host
xz -dc .gpu/s34a_slim/kernels_sm_90a.cubin.xz > /tmp/ga/cubin/kernels_sm_90a.cubin && cp .gpu/s34a_slim/kernels_sm_90a.ptx-fnv64 /tmp/ga/cubin/
B="bench --shape 4,16,2048,128 --shape 2,16,4096,128 --shape 4,16,2048,64 --shape 2,8,2048,64 --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m256_n64_s3_pp_ov_mbarrier"
for r in 1 2; do
  FLASHRS_CUBIN_DIR=/tmp/ga/cubin s 120 ab_s34a_$r /tmp/ga/host $B --json /tmp/j/ab_s34a_$r.json
  s 120 ab_s34e_$r $H $B --json /tmp/j/ab_s34e_$r.json
done
pack 8
