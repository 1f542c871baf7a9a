# Session 42, call 3 (H200): every e4m3 variant at head dim 128 on s41c (the tree, v57 on 32
# registers), to see whether the 128-key two-stage pick still leads now that v57 changed its
# softmax: the three-stage twin, the persistent one, 192-key tiles, three consumers, the serial
# loop; the FP8 set's head-dim-128 shapes, two rounds.
GPU_DIR=.gpu/s41c source evidence/session35/scripts/common.sh
K=""
for v in m128_n128_s2_pp_ov m128_n128_s3_pp_ov m128_n128_s2_pp_ov_ps m128_n192_s2_pp_ov m192_n96_s2_pp_ov m128_n128_s2_pp; do
  K="$K --kernel flash_ws_fp8_${v}_mbarrier"
done
for r in 1 2; do
  s 300 all_$r $H bench --dtype e4m3 --shape 2,16,4096,128 --shape 1,16,8192,128 $K --iters 40 --json /tmp/j/all_$r.json
  s 200 causal_$r $H bench --dtype e4m3 --shape 2,16,4096,128 --causal $K --iters 40 --json /tmp/j/causal_$r.json
done
pack 3 > /dev/null
for f in /tmp/l/all_*.log /tmp/l/causal_*.log; do echo "== $f"; grep -E "^flash_ws" $f | awk "{print \$1,\$2,\$3,\$4,\$5,\$6,\$7,\$9,\$(NF-1),\$NF}"; done
