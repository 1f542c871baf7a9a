# Session 21, call 1: the fast V transpose and the n192 e4m3 tile (t4) against session 20's t3.
source .gpux/s21/common.sh
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
use t4
s 120 verify_fp8 $H verify --dtype e4m3 --layout bhsd,bshd --lse --json /tmp/j/verify_fp8_t4.json
[ -x $F ] && s 150 test_fp8 $F --include-ignored --test-threads=1
s 120 bench_fp8_t4a $H bench --dtype e4m3 --shapes fp8 --iters 40 --json /tmp/j/bench_fp8_t4a.json
use t3
s 120 bench_fp8_t3 $H bench --dtype e4m3 --shapes fp8 --iters 40 --json /tmp/j/bench_fp8_t3.json
use t4
s 120 bench_fp8_t4b $H bench --dtype e4m3 --shapes fp8 --iters 40 --json /tmp/j/bench_fp8_t4b.json
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum
for b in t3 t4; do use $b
s 90 ncu_transpose_$b ncu --clock-control none --kernel-name regex:fp8_transpose --launch-count 4 --metrics $M $H bench --dtype e4m3 --shape 2,16,4096,128 --shape 2,16,4096,256 --kernel flash_ws_fp8_m128_n128_s2_pp_ov_mbarrier --iters 1 --warmup 1 --warmup-ms 0 --calls-per-graph 1
done
use t4
s 150 memcheck_fp8 compute-sanitizer --tool memcheck $H verify --dtype e4m3 --shapes small --kernel flash_ws_fp8_m128_n192_s2_pp_ov_mbarrier --kernel flash_ws_fp8_m128_n128_s2_pp_ov_mbarrier
pack 1
