# Session 45, call 4 (H200): s45f = HEAD's kernels with the tile timelines in six points (the
# softmax's part before the wait for V and the last P V, and that wait, apart). Production kernels'
# SASS identical to HEAD's. Traces of the e4m3 head-dim-128 pick and the fp16 head-dim-128 pick.
GPU_DIR=.gpu/s45f source .gpu/s45f/common.sh
p() { pack 4 > /dev/null; }
PS=flash_ws_fp8_m128_n128_s2_pp_ov_ps_mbarrier; F16=flash_ws_m128_n128_s2_pp_ov_ps_mbarrier
s 60 e4m3_4096 $H trace --dtype e4m3 --kernel $PS --shape 2,16,4096,128 --json /tmp/j/e4m3_4096.json; p
s 60 e4m3_8192 $H trace --dtype e4m3 --kernel $PS --shape 1,16,8192,128 --json /tmp/j/e4m3_8192.json; p
s 60 e4m3_4096_causal $H trace --dtype e4m3 --kernel $PS --shape 2,16,4096,128 --causal --json /tmp/j/e4m3_4096_causal.json; p
s 60 f16_4096 $H trace --kernel $F16 --shape 2,16,4096,128 --json /tmp/j/f16_4096.json; p
s 60 e4m3_4096b $H trace --dtype e4m3 --kernel $PS --shape 2,16,4096,128 --json /tmp/j/e4m3_4096b.json; p
for f in e4m3_4096 f16_4096; do echo "== $f"; sed -n 12,24p /tmp/l/$f.log | cut -c1-150; done
