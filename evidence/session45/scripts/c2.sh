# Session 45, call 2 (H200): s45c = HEAD's kernels + per-tile timelines in the instrumented twins
# (`launch::record::TILES_AT`: the first two consumers' turn, issue, S landed, P packed for the
# first 32 KV tiles of a block's first item) and `host trace --dtype e4m3`. Production kernels'
# PTX identical to HEAD's (only the `_counted` twins differ).
GPU_DIR=.gpu/s45c source .gpu/s45c/common.sh
p() { pack 2 > /dev/null; }
PS=flash_ws_fp8_m128_n128_s2_pp_ov_ps_mbarrier; GR=flash_ws_fp8_m128_n128_s2_pp_ov_mbarrier
F16=flash_ws_m128_n128_s2_pp_ov_ps_mbarrier
s 60 e4m3_ps_4096 $H trace --dtype e4m3 --kernel $PS --shape 2,16,4096,128 --json /tmp/j/e4m3_ps_4096.json; p
s 60 e4m3_ps_8192 $H trace --dtype e4m3 --kernel $PS --shape 1,16,8192,128 --json /tmp/j/e4m3_ps_8192.json; p
s 60 e4m3_grid_4096 $H trace --dtype e4m3 --kernel $GR --shape 2,16,4096,128 --json /tmp/j/e4m3_grid_4096.json; p
s 60 e4m3_ps_256 $H trace --dtype e4m3 --kernel $GR --shape 2,16,4096,256 --json /tmp/j/e4m3_grid_256.json; p
s 60 f16_ps_4096 $H trace --dtype f16 --kernel $F16 --shape 2,16,4096,128 --json /tmp/j/f16_ps_4096.json; p
s 60 e4m3_ps_4096b $H trace --dtype e4m3 --kernel $PS --shape 2,16,4096,128 --json /tmp/j/e4m3_ps_4096b.json; p
for f in e4m3_ps_4096 f16_ps_4096; do echo "== $f"; sed -n 1,60p /tmp/l/$f.log | cut -c1-130; done
