# Session 11, call 7: c6's correctness evidence (verify every set, MQA + LSE, 1000 random, repeat 250, e4m3), the four sanitizers, ncu on the dispatch picks.
set -u
mkdir -p /tmp/l /tmp/j
b=c6; mkdir -p /tmp/g/$b/cubin; xz -dc .gpux/s11/$b.host.xz > /tmp/g/$b/host; chmod +x /tmp/g/$b/host; xz -dc .gpux/s11/$b.cubin.xz > /tmp/g/$b/cubin/kernels_sm_90a.cubin; cp .gpux/s11/$b.fnv /tmp/g/$b/cubin/kernels_sm_90a.ptx-fnv64
export FLASHRS_CUBIN_DIR=/tmp/g/c6/cubin
H=/tmp/g/c6/host
s() { local t=$1 name=$2; shift 2; local t0=$(date +%s); timeout $t "$@" > /tmp/l/$name.log 2>&1; local rc=$?; echo "== $name rc=$rc $(( $(date +%s)-t0 ))s"; grep -E "^PASS|^FAIL|test result|ERROR SUMMARY|RACECHECK SUMMARY|panicked|error:|FAILED|failed|verdict" /tmp/l/$name.log | tail -3; }
s 90 verify_mqa $H verify --heads-kv 1 --lse --shapes small,mission,long --json /tmp/j/verify_mqa_lse_h100.json
s 120 random $H verify --random 1000 --json /tmp/j/verify_random_h100.json
s 120 repeat $H verify --repeat 250 --kernel flash_ws_m128_n176_s2_pp_ov_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n192_s3_ov_mbarrier --kernel flash_ws_m128_n80_s2_pp_ov_mbarrier --json /tmp/j/verify_repeat_h100.json
s 60 logit $H verify --logit-scale 40 --shapes long,edge --lse --json /tmp/j/verify_logit_lse_h100.json
s 60 fp8 $H verify --dtype e4m3 --json /tmp/j/verify_fp8_h100.json
for tool in memcheck racecheck synccheck initcheck; do s 60 san_$tool compute-sanitizer --tool $tool $H verify --quick --seed 23 --kernel flash_ws_m128_n176_s2_pp_ov_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n192_s3_ov_mbarrier --kernel flash_ws_m128_n80_s2_pp_ov_mbarrier; done
s 90 ncu_d128 $H profile --kernel flash_ws_m128_n176_s2_pp_ov_mbarrier --shape 2,16,4096,128 --out /tmp/j/ncu_n176_pp_ov_d128.json
s 90 ncu_d128c $H profile --kernel flash_ws_m128_n176_s2_pp_ov_mbarrier --shape 2,16,4096,128 --causal --out /tmp/j/ncu_n176_pp_ov_d128_causal.json
s 90 ncu_d64 $H profile --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --shape 2,16,4096,64 --out /tmp/j/ncu_n128_pp_ov_d64.json
cd /tmp/l && tar czf $OUT/logs7.tgz *.log; cd /tmp/j && tar czf $OUT/json7.tgz *.json; ls $OUT
