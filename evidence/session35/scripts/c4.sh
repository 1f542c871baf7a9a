# Session 35, call 4 (H100): s35c = HEAD's kernels (s34e's cubin, PTX fnv f8cc76013d907621) with
# `trace --varlen`: the persistent pick's item timelines on the varlen batch (non-causal and
# causal) beside the dense shapes (1,16,8793,128), its same-work twin, and (2,16,4096,128).
GPU_DIR=.gpu/s35c source evidence/session35/scripts/common.sh
K="--kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier"
s 60 trace_varlen $H trace $K --varlen --json /tmp/j/trace_varlen.json
s 60 trace_varlen_causal $H trace $K --varlen --causal --json /tmp/j/trace_varlen_causal.json
s 60 trace_8793 $H trace $K --shape 1,16,8793,128 --json /tmp/j/trace_8793.json
s 60 trace_4096 $H trace $K --shape 2,16,4096,128 --json /tmp/j/trace_4096.json
for n in trace_varlen trace_varlen_causal trace_8793 trace_4096; do cat /tmp/l/$n.log; done
pack 4
