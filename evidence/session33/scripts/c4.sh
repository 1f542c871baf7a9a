# Session 33, call 4 (H100): s33d = this tree (v48 + the epilogue's closure inlined by demand, which
# moves a few address instructions in every flash_ws kernel's epilogue) against s32e (session
# 32's README build, PTX e3105cdfc9d3aae9): the five picks on the std set, s32e then s33d, two
# rounds each; verify --quick of every variant and of the varlen set; the varlen batch once more;
# the `gpu` and `api_gpu` tests.
GPU_DIR=.gpu/s33d source evidence/session33/scripts/common.sh
mkdir -p /tmp/g32/cubin; xz -dc .gpu/s32e/host.xz > /tmp/g32/host; chmod +x /tmp/g32/host
xz -dc .gpu/s32e/kernels_sm_90a.cubin.xz > /tmp/g32/cubin/kernels_sm_90a.cubin; cp .gpu/s32e/kernels_sm_90a.ptx-fnv64 /tmp/g32/cubin/
P="--kernel flash_ws_m256_n64_s3_pp_ov_mbarrier --kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n80_s2_pp_ov_mbarrier"
FLASHRS_CUBIN_DIR=/tmp/g32/cubin s 150 ab_s32e /tmp/g32/host bench --shapes std $P --rounds 2 --iters 40 --json /tmp/j/ab_s32e.json
s 150 ab_s33d $H bench --shapes std $P --rounds 2 --iters 40 --json /tmp/j/ab_s33d.json
s 120 verify_quick $H verify --quick --lse --json /tmp/j/verify_quick.json
s 100 verify_varlen $H verify --shapes varlen --lse --json /tmp/j/verify_varlen.json
s 100 varlen $H bench --varlen --shape 1,16,128,128 --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --rounds 2 --json /tmp/j/varlen.json
grep -hE "^note: varlen" /tmp/l/varlen.log
for t in gpu api_gpu; do s 120 test_$t /tmp/g/tests/$t --include-ignored --test-threads 1; done
pack 4
