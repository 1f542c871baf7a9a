set -u
mkdir -p /tmp/l /tmp/j
for b in t5; do mkdir -p /tmp/g/$b/cubin; xz -dc .gpux/s12/$b.host.xz > /tmp/g/$b/host; chmod +x /tmp/g/$b/host; xz -dc .gpux/s12/$b.cubin.xz > /tmp/g/$b/cubin/kernels_sm_90a.cubin; cp .gpux/s12/$b.fnv /tmp/g/$b/cubin/kernels_sm_90a.ptx-fnv64; done
s() { local t=$1 name=$2; shift 2; local t0=$(date +%s); timeout $t "$@" > /tmp/l/$name.log 2>&1; local rc=$?; echo "== $name rc=$rc $(( $(date +%s)-t0 ))s"; grep -E "^PASS|^FAIL|test result|ERROR SUMMARY|panicked|error:|FAILED|failed" /tmp/l/$name.log | tail -3; }
M3="--kernel flash_ws_m192_n128_s2_pp_ov_mbarrier --kernel flash_ws_m192_n128_s3_pp_ov_mbarrier"
PS="--kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier"
WS="--kernel flash_ws_m128_n176_s2_pp_ov_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n80_s2_pp_ov_mbarrier $M3"
OLD="--kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n192_s3_ov_mbarrier"
export FLASHRS_CUBIN_DIR=/tmp/g/t5/cubin; H=/tmp/g/t5/host
NS="--shapes large --shape 2,16,4096,64 --shape 2,8,2048,64 --shape 1,16,8192,64"
CS="--shapes large --causal --shape 2,16,4096,64 --shape 1,16,8192,64"
