# Session 45, call 8 (H200): the final tree (e694b17, PTX fnv e1677a006fca279a: the counted
# twins' recorders from one helper; production SASS identical to HEAD's): verify --quick (every
# barrier count, through the counted twins), the small bench set, and the e4m3 pick's trace.
GPU_DIR=.gpu/s45k source .gpu/s45k/common.sh
p() { pack 8 > /dev/null; }
s 200 verify_quick $H verify --quick --json /tmp/j/verify_quick.json; p
s 200 bench_small $H bench --shapes small --iters 5 --json /tmp/j/bench_small.json; p
s 60 trace_e4m3 $H trace --dtype e4m3 --kernel flash_ws_fp8_m128_n128_s2_pp_ov_ps_mbarrier --shape 2,16,4096,128 --json /tmp/j/trace_e4m3.json; p
s 60 trace_f16 $H trace --kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier --shape 2,8,2048,64 --json /tmp/j/trace_f16.json; p
grep -hE "^test result|^PASS|^FAIL|SUMMARY" /tmp/l/*.log | sort | uniq -c
sed -n 12,18p /tmp/l/trace_e4m3.log | cut -c1-140
