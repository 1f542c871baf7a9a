# Session 17, call 7: t2 (V waited before its P V, so that the softmax, the wait for the running P V and the packing of P share one basic block; causal head dim 128 dispatch to n128) against t1, interleaved; t2's verify of the changed kernels (default sets, both layouts, LSE) and random problems.
rm -rf /tmp/l /tmp/j
for b in t1 t2; do B=$b source .gpux/s17/common.sh; done
K="--kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n176_s2_pp_ov_mbarrier --kernel flash_ws_m128_n80_s2_pp_ov_mbarrier"
for r in 1 2; do for b in t1 t2; do
  export FLASHRS_CUBIN_DIR=/tmp/g/$b/cubin
  s 200 ab_${b}_r$r /tmp/g/$b/host bench --shape 4,16,2048,128 --shape 2,16,4096,128 --shape 1,16,8192,128 --shape 2,16,4096,64 --shape 2,16,4096,256 $K --iters 100 --json /tmp/j/ab_${b}_r$r.json
  s 200 abc_${b}_r$r /tmp/g/$b/host bench --shape 2,16,4096,128 --shape 1,16,16384,128 --causal --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n176_s2_pp_ov_mbarrier --iters 100 --json /tmp/j/abc_${b}_r$r.json
done; done
export FLASHRS_CUBIN_DIR=/tmp/g/t2/cubin
s 300 verify_t2 /tmp/g/t2/host verify --dtype f16,bf16 --layout bhsd,bshd --lse --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n176_s2_pp_ov_mbarrier --kernel flash_ws_m128_n80_s2_pp_ov_mbarrier --json /tmp/j/verify_t2.json
pack 7
