# Session 32, call 13 (H100): s32e, the dispatch rule's edges: two rounds of 256-row blocks at
# other shapes ((2,16,2048,64), (1,16,4096,64), bf16 (4,8,2048,64)) and three ((6,8,2048,64),
# 384 blocks), beside the 192-row persistent pick and cuDNN, two rounds.
GPU_DIR=.gpu/s32e source evidence/session32/scripts/common.sh
K="--kernel flash_ws_m256_n64_s3_pp_ov_mbarrier --kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier"
s 200 edges $H bench --shape 2,16,2048,64 --shape 1,16,4096,64 --shape 6,8,2048,64 --peers torch $K --rounds 2 --iters 40 --json /tmp/j/edges.json
s 100 edges_bf16 $H bench --shape 4,8,2048,64 --dtype bf16 --peers torch $K --rounds 2 --iters 40 --json /tmp/j/edges_bf16.json
grep -hE "^flash_ws|^torch_cudnn" /tmp/l/edges*.log
pack 13
