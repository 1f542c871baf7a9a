# Session 19, call 4: t2, head dim 64 between one and four waves of 128-row blocks: the persistent 192-row kernel (now with its
# tail split) against the persistent 128-row one the dispatch takes there, cuDNN in the same run; fp16 then bf16.
source .gpux/s19/common.sh
use t2
K="--kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier"
S="--shape 2,8,2048,64 --shape 1,16,2048,64 --shape 2,16,2048,64 --shape 1,8,4096,64 --shape 1,16,4096,64 --shape 3,16,2048,64 --shape 1,32,1024,64"
for dt in f16 bf16; do s 200 waves_$dt $H bench $S $K --dtype $dt --iters 60 --peers torch --json /tmp/j/waves_$dt.json; done
pack 4
