# Session 24, call 2: programmatic dependent launch (build s24b: every entry point waits for the
# kernel before it at its first instruction and lets the next launch's blocks be scheduled; the
# library launches dependent on sm_90 unless FLASHRS_PDL=0). Checks with it on, then the bench's
# picks with it on and off (same binary, alternated), with cuDNN in the first run.
GPU_DIR=.gpu/s24b source evidence/session24/scripts/common.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,driver_version --format=csv | tee /tmp/j/gpu.txt
s 300 verify_quick $H verify --quick --lse --json /tmp/j/verify_quick.json
s 200 verify_random $H verify --random 200 --json /tmp/j/verify_random.json
s 200 verify_sets $H verify --kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --kernel flash_decode_m16_n128_w8_s3_mbarrier --shapes long,splitkv,decode --lse --layout bhsd,bshd
s 100 verify_repeat $H verify --repeat 20 --shapes long
s 100 verify_fp8 $H verify --dtype e4m3 --lse
P=flash_ws_m128_n128_s2_pp_ov_mbarrier
B="bench --shapes std,decode --kernel $P --iters 60"
s 400 bench_on1 $H $B --peers torch --json /tmp/j/bench_on1.json
s 300 bench_off1 env FLASHRS_PDL=0 $H $B --json /tmp/j/bench_off1.json
s 300 bench_on2 $H $B --json /tmp/j/bench_on2.json
s 300 bench_off2 env FLASHRS_PDL=0 $H $B --json /tmp/j/bench_off2.json
pack 2
