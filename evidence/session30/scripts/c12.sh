# Session 30, call 12 (H100): ncu's tensor-pipe figure (issue #10's ">= 70%") of this tree's kernels
# (s30e's cubin, fnv 871c1859d375f759), one launch each, clocks untouched: the head-dim-128 pick
# non-causal and, causal, the grid pick against its persistent twin on the item table (v45);
# head dims 64 and 256.
GPU_DIR=.gpu/s30e source evidence/session30/scripts/common.sh
M=sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__cycles_elapsed.max,gpu__time_duration.sum
prof() { local name=$1 kernel=$2 shape=$3 d=$4; s 90 ncu_${name} ncu --clock-control none --launch-count 1 --kernel-name regex:"^${kernel}_d${d}_f16\$" --metrics $M --csv $H profile-target --shape $shape --kernel $kernel --dtype f16 ${5:-}; }
prof d128_ps_2x16x4096 flash_ws_m128_n128_s2_pp_ov_ps_mbarrier 2,16,4096,4096,128 128
prof d128_ps_1x16x8192 flash_ws_m128_n128_s2_pp_ov_ps_mbarrier 1,16,8192,8192,128 128
prof d128_grid_causal flash_ws_m128_n128_s2_pp_ov_mbarrier 2,16,4096,4096,128 128 --causal
prof d128_ps_causal flash_ws_m128_n128_s2_pp_ov_ps_mbarrier 2,16,4096,4096,128 128 --causal
prof d64_ps_2x16x4096 flash_ws_m192_n128_s2_pp_ov_ps_mbarrier 2,16,4096,4096,64 64
prof d256_2x16x4096 flash_ws_m128_n80_s2_pp_ov_mbarrier 2,16,4096,4096,256 256
cd /tmp/l && for f in ncu_*.log; do printf "%-32s" $f; for m in sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active sm__cycles_elapsed.max gpu__time_duration.sum; do grep "\"$m\"" $f | head -1 | awk -F'","' '{printf " %s", $NF}' | tr -d '"'; done; echo; done | tee /tmp/j/ncu_summary.txt; cd - >/dev/null
pack 12
