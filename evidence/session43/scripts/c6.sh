# Session 43, call 6 (H200): call 5's s43b runs found no binaries; s43b (= s42e, v59) and s43c
# (this tree) alternated twice on the two e4m3 head-dim-128 kernels at (2,16,4096,128) and
# (1,16,8192,128): does the reordered table's register allocation change their speed?
GPU_DIR=.gpu/s43c source .gpu/s43c/common.sh
mkdir -p /tmp/gc/cubin; xz -dc .gpu/s43b/host.xz > /tmp/gc/host; chmod +x /tmp/gc/host
xz -dc .gpu/s43b/kernels_sm_90a.cubin.xz > /tmp/gc/cubin/kernels_sm_90a.cubin; cp .gpu/s43b/kernels_sm_90a.ptx-fnv64 /tmp/gc/cubin/
K="--kernel flash_ws_fp8_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_fp8_m128_n128_s2_pp_ov_ps_mbarrier --shape 2,16,4096,128 --shape 1,16,8192,128 --iters 40"
for r in 1 2; do
FLASHRS_CUBIN_DIR=/tmp/gc/cubin s 120 old_$r /tmp/gc/host bench --dtype e4m3 $K --json /tmp/j/old_$r.json
s 120 new_$r $H bench --dtype e4m3 $K --json /tmp/j/new_$r.json
done
pack 6 > /dev/null
for f in old_1 new_1 old_2 new_2; do echo "== $f"; grep -E "^flash_ws_fp8" /tmp/l/$f.log | grep -v pick | awk '{print $1,$(NF-8),$(NF-3),$NF}' | sed 's/flash_ws_fp8_m128_n128_s2_pp_ov_//'; done
