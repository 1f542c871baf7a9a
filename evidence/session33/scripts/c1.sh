# Session 33, call 1 (H100): s33a = the persistent flash_ws's varlen entry points at head dim 128
# (v48: a host table of items that carry their sequence's bounds; full 64-row groups leave by the
# copy engine, the last partial ones by row stores). verify of every varlen entry point, then the
# varlen batch (16 sequences of 1-4096, H=16, D=128) against the dense pick at the same useful
# work and the padded batch through cuDNN, grid twin beside the persistent one, both masks.
GPU_DIR=.gpu/s33a source evidence/session33/scripts/common.sh
s 240 verify_varlen $H verify --shapes varlen --lse --json /tmp/j/verify_varlen.json
K="--kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier"
for c in "" --causal; do
  n=varlen${c#--}
  s 150 $n $H bench --varlen $c --shape 1,16,128,128 $K --peers torch --rounds 2 --json /tmp/j/$n.json
done
grep -hE "^note: varlen" /tmp/l/varlen*.log
grep -hE "_varlen " /tmp/l/varlen*.log | awk '{print $1, $3, $5}'
pack 1
