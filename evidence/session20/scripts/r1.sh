# Session 20, call 1 (HEAD e67bda8's build, t0): three measurements that decide the session's work.
# 1. the peers' clock state: the d64/d128 shapes near 1.0x cuDNN with 500 ms warm-ups (the evidence method) and 3000 ms;
# 2. decode: does a block-per-SM imbalance cost? 32 vs 33 heads (256 vs 264 blocks for 264 slots);
# 3. FP8: e4m3 against fp16 on the fp8 set with today's kernels.
source .gpux/s20/common.sh
use t0
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv > /tmp/l/smi.log
S="--shape 2,8,2048,64 --shape 4,16,2048,64 --shape 4,16,2048,128"
K="--kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier"
s 120 clk500 $H bench $S $K --peers torch --iters 60 --json /tmp/j/clk500.json
s 150 clk3000 $H bench $S $K --peers torch --iters 60 --warmup-ms 3000 --json /tmp/j/clk3000.json
D="--kernel flash_decode_m16_n128_w8_s3_mbarrier"
s 90 dec $H bench --shape 1,32,1,32768,128 --shape 1,33,1,32768,128 --shape 8,32,1,8192,128 --shape 8,33,1,8192,128 $D --iters 60 --json /tmp/j/dec.json
s 60 dec_splits $H tune --splits --shape 1,32,1,32768,128 --split-counts 4,8,16,32 --json /tmp/j/dec_splits.json
s 150 fp8 $H bench --dtype e4m3 --shapes fp8 --iters 40 --json /tmp/j/fp8.json
pack 1
