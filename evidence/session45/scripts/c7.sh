# Session 45, call 7 (H200): an ablation, not for commit. s45j = HEAD with the e4m3 head-dim-128
# kernels issuing no P V at all (`attend` returns at once; S waited with wait_group 0), so
# that no accumulator traffic of P V runs beside the softmax (`session45/s45_ablation_no_pv.patch`;
# the output is wrong, only times count). The pick's tile timelines at (2,16,4096,128) and
# (1,16,8192,128), and its bench against the fp16 pick in the same run.
GPU_DIR=.gpu/s45j source .gpu/s45j/common.sh
p() { pack 7 > /dev/null; }
PS=flash_ws_fp8_m128_n128_s2_pp_ov_ps_mbarrier
s 60 trace_4096 $H trace --dtype e4m3 --kernel $PS --shape 2,16,4096,128 --json /tmp/j/trace_4096.json; p
s 60 trace_8192 $H trace --dtype e4m3 --kernel $PS --shape 1,16,8192,128 --json /tmp/j/trace_8192.json; p
s 150 bench $H bench --dtype e4m3 --shape 2,16,4096,128 --shape 1,16,8192,128 --iters 40 --kernel $PS --json /tmp/j/bench.json; p
for f in trace_4096; do sed -n 12,20p /tmp/l/$f.log | cut -c1-140; done
grep -E "^flash_ws" /tmp/l/bench.log | cut -c1-140
