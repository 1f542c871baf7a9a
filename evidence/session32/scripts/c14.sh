# Session 32, call 14 (H100): s32f = this tree + an experimental persistent twin of the 256-row
# kernel (`m256_n64_s3_pp_ov_ps`, producer/consumers 32/112, no spills): verify (split tails
# included), then bench beside the grid twin, the 192-row pick and cuDNN at one to four rounds.
GPU_DIR=.gpu/s32f source evidence/session32/scripts/common.sh
PS=flash_ws_m256_n64_s3_pp_ov_ps_mbarrier
s 120 verify $H verify --kernel $PS --shapes small,odd,edge --shape 2,8,2048,64 --shape 4,16,2048,64 --shape 1,134,512,64 --layout bhsd,bshd --lse
s 200 bench $H bench --shape 2,8,2048,64 --shape 6,8,2048,64 --shape 4,16,2048,64 --shape 2,16,4096,64 --peers torch --kernel $PS --kernel flash_ws_m256_n64_s3_pp_ov_mbarrier --kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier --rounds 2 --iters 40 --json /tmp/j/bench.json
grep -hE "^flash_ws|^torch_cudnn" /tmp/l/bench.log
pack 14
