# Session 31, call 5 (H100): s31b = the persistent flash_ws's varlen entry points (a host table of
# (query head, row block) items per launch, each item's sequence found on the device); kernels of
# every other entry point unchanged (PTX entries compared with s31a's). verify of every varlen
# entry point (the persistent twins included; both dtypes, LSE, grouped heads in the set), then
# the varlen batch (16 sequences of 1-4096) against the dense kernel, grid twin against the
# persistent one, non-causal and causal (H=16, D=128: bench's varlen case).
GPU_DIR=.gpu/s31b source evidence/session31/scripts/common.sh
s 240 verify_varlen $H verify --shapes varlen --lse --json /tmp/j/verify_varlen.json
K128="--kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier"
for c in "" --causal; do
  n=varlen${c#--}
  s 100 ${n}_d128 $H bench --varlen $c --shape 1,16,128,128 $K128 --rounds 2 --json /tmp/j/${n}_d128.json
done
grep -hE "^note: varlen|varlen  " /tmp/l/varlen*.log | head -40
grep -hE "_varlen " /tmp/l/varlen*.log | awk '{print $1, $3, $5}' | head -40
pack 5
