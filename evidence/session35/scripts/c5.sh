# Session 35, call 5 (H100): s35d = this tree (the item's `last` gone: the block's final turn
# hand-over and its wait for the copy engine after the item loop; the producer prefetching the
# next item's table entry into L1) against s34e (= HEAD c91261b's kernels), ABBA: the persistent
# picks at head dims 128 and 64 on dense shapes (causal too: a listed walk), the varlen batch
# non-causal and causal; then s35d's varlen timelines, verify of the varlen set and --quick.
GPU_DIR=.gpu/s35d source evidence/session35/scripts/common.sh
mkdir -p /tmp/g_s34e/cubin && xz -dc .gpu/s34e_slim/host.xz > /tmp/g_s34e/host && chmod +x /tmp/g_s34e/host
xz -dc .gpu/s34e_slim/kernels_sm_90a.cubin.xz > /tmp/g_s34e/cubin/kernels_sm_90a.cubin && cp .gpu/s34e_slim/kernels_sm_90a.ptx-fnv64 /tmp/g_s34e/cubin/
mkdir -p /tmp/g_s35d && ln -sf /tmp/g/host /tmp/g_s35d/host && ln -sfn /tmp/g/cubin /tmp/g_s35d/cubin
P="--kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --rounds 1"
D="bench --shape 4,16,2048,128 --shape 2,16,4096,128 --shape 1,16,8793,128 $P"
C="bench --causal --shape 4,16,2048,128 --shape 2,16,4096,128 $P"
S="bench --shape 4,16,2048,64 --shape 2,8,2048,64 --kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier --rounds 1"
V="bench --varlen --shape 1,16,128,128 $P"
i=0
r() { local v=$1 n=$2; shift 2; FLASHRS_CUBIN_DIR=/tmp/g_$v/cubin s 120 ${n}_$v /tmp/g_$v/host "$@" --json /tmp/j/${n}_$v.json; }
for v in s34e s35d s35d s34e; do i=$((i+1)); r $v dense$i $D; r $v causal$i $C; r $v d64_$i $S; r $v varlen$i $V; r $v varlencausal$i $V --causal; done
for f in /tmp/l/dense*.log /tmp/l/causal*.log /tmp/l/d64*.log; do echo "$(basename $f .log) $(grep -E '^flash_ws' $f | awk '{printf "%s %s | ", $2$3$4$5, $7}')"; done
for f in /tmp/l/varlen*.log; do echo "$(basename $f .log) $(grep -hE '^note: varlen' $f | grep -oE '(mbarrier_varlen [0-9.]+ us|bhsd\) [0-9.]+ us|takes [0-9.]+x)' | tr '\n' ' ')"; done
K="--kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier"
s 60 trace_varlen $H trace $K --varlen --json /tmp/j/trace_varlen.json
s 60 trace_8793 $H trace $K --shape 1,16,8793,128 --json /tmp/j/trace_8793.json
s 60 trace_causal $H trace $K --shape 2,16,4096,128 --causal --json /tmp/j/trace_causal.json
for n in trace_varlen trace_8793 trace_causal; do cat /tmp/l/$n.log; done
s 120 verify_varlen $H verify --shapes varlen --lse --json /tmp/j/verify_varlen.json
s 150 verify_quick $H verify --quick --lse --json /tmp/j/verify_quick.json
pack 5
