# Session 43, call 5 (H200): s43c (this tree) against s43b (= s42e, v59): the api_gpu, fp8_gpu and
# gpu tests on s43c (call 4's test binaries embedded an older PTX than the cubin); the FP8 set with
# the two e4m3 head-dim-128 kernels, s43b then s43c; then issue #12's set on s43c, two rounds
# (`evidence/bench_fp8_h200.json`).
GPU_DIR=.gpu/s43c source .gpu/s43c/common.sh
p() { pack 5 > /dev/null; }
s 90 test_api_gpu /tmp/g/tests/api_gpu --include-ignored --test-threads 1; p
s 90 test_fp8_gpu /tmp/g/tests/fp8_gpu --include-ignored --test-threads 1; p
s 150 test_gpu /tmp/g/tests/gpu --include-ignored --test-threads 1; p
mkdir -p /tmp/gc/cubin; xz -dc .gpu/s43b/host.xz > /tmp/gc/host; chmod +x /tmp/gc/host
xz -dc .gpu/s43b/kernels_sm_90a.cubin.xz > /tmp/gc/cubin/kernels_sm_90a.cubin; cp .gpu/s43b/kernels_sm_90a.ptx-fnv64 /tmp/gc/cubin/
K="--kernel flash_ws_fp8_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_fp8_m128_n128_s2_pp_ov_ps_mbarrier"
FLASHRS_CUBIN_DIR=/tmp/gc/cubin s 120 fp8_old /tmp/gc/host bench --dtype e4m3 --shapes fp8 --iters 40 $K --json /tmp/j/fp8_old.json; p
s 120 fp8_new $H bench --dtype e4m3 --shapes fp8 --iters 40 $K --json /tmp/j/fp8_new.json; p
s 240 bench_fp8 $H bench --dtype e4m3 --shapes fp8 --rounds 2 --iters 40 $K --json /tmp/j/bench_fp8_h200.json
cp /tmp/l/bench_fp8.log /tmp/j/bench_fp8_h200.log
p
grep -hE "^test result|^PASS|^FAIL|SUMMARY" /tmp/l/*.log
for f in fp8_old fp8_new bench_fp8; do echo "== $f"; grep -E "^flash" /tmp/l/$f.log | awk '{print $1,$2,$(NF-8),$(NF-7),$(NF-6),$(NF-3),$(NF-2),$(NF-1),$NF}' | sed 's/flash_ws_fp8_m128_n128_s2_pp_ov_//'; done
