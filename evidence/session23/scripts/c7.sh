# Session 23, call 7: v30's bench A/B (t0 = HEAD's build, .gpu/s22; t1 = two Q buffers,
# .gpu/s23b): std, the persistent kernels named beside the picks, t0 and t1 alternated twice;
# then the e4m3 persistent kernel at head dim 128, t0 and t1.
GPU_DIR=.gpu/s23b source evidence/session23/scripts/common.sh
mkdir -p /tmp/g0/cubin
xz -dc .gpu/s22/host.xz > /tmp/g0/host; chmod +x /tmp/g0/host
xz -dc .gpu/s22/kernels_sm_90a.cubin.xz > /tmp/g0/cubin/kernels_sm_90a.cubin; cp .gpu/s22/kernels_sm_90a.ptx-fnv64 /tmp/g0/cubin/
M192=flash_ws_m192_n128_s2_pp_ov_ps_mbarrier; P128=flash_ws_m128_n128_s2_pp_ov_ps_mbarrier
B="bench --shapes std --iters 60 --kernel $M192 --kernel $P128"
for r in a b; do
  s 200 bench_t0$r env FLASHRS_CUBIN_DIR=/tmp/g0/cubin /tmp/g0/host $B --json /tmp/j/bench_t0$r.json
  s 200 bench_t1$r $H $B --json /tmp/j/bench_t1$r.json
done
F="bench --dtype e4m3 --shape 2,16,4096,128 --shape 1,16,8192,128 --iters 60 --kernel flash_ws_fp8_m128_n128_s2_pp_ov_ps_mbarrier"
s 150 bench_fp8_t0 env FLASHRS_CUBIN_DIR=/tmp/g0/cubin /tmp/g0/host $F --json /tmp/j/bench_fp8_t0.json
s 150 bench_fp8_t1 $H $F --json /tmp/j/bench_fp8_t1.json
pack 7
