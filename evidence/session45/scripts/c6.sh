# Session 45, call 6 (H200): the committed tree (tile timelines, `trace --dtype e4m3`): the GPU
# test binaries (gpu, fp8_gpu, api_gpu), a quick verify, a bench of the small set (its rows
# count barriers through the counted twins, whose records grew), and traces that read the new
# record layout: fp16 varlen, e4m3 causal (tiles past a row's keys print as "-").
GPU_DIR=.gpu/s45i source .gpu/s45i/common.sh
p() { pack 6 > /dev/null; }
for t in /tmp/g/tests/*; do s 400 test_$(basename $t) $t --include-ignored --test-threads 1; p; done
s 200 verify_quick $H verify --quick --json /tmp/j/verify_quick.json; p
s 200 bench_small $H bench --shapes small --iters 5 --json /tmp/j/bench_small.json; p
s 60 trace_varlen $H trace --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --varlen --json /tmp/j/trace_varlen.json; p
s 60 trace_e4m3_causal $H trace --dtype e4m3 --kernel flash_ws_fp8_m128_n128_s2_pp_ov_ps_mbarrier --shape 2,16,4096,128 --causal --json /tmp/j/trace_e4m3_causal.json; p
grep -hE "^test result|^PASS|^FAIL|SUMMARY" /tmp/l/*.log | sort | uniq -c
sed -n 1,14p /tmp/l/trace_varlen.log | cut -c1-150; tail -6 /tmp/l/trace_e4m3_causal.log | cut -c1-150
grep -iE "barrier" /tmp/l/bench_small.log | head -5
