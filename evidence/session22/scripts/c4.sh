# Session 22, call 4: the build with V's descale on the register output path (the persistent e4m3
# kernel at head dim 256, 24/240 registers): call 2's checks again, then two benches in three
# rounds: that kernel against the pick, and the head-dim-128 persistent kernel without its tail
# split (FLASHRS_TAIL_SPLIT=0) against the pick.
source evidence/session22/scripts/common.sh
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
PS="--kernel flash_ws_fp8_m128_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_fp8_m128_n128_s2_pp_ps_mbarrier"
s 200 verify_fp8 $H verify --dtype e4m3 --layout bhsd,bshd --lse --json /tmp/j/verify_fp8_h100.json
V="verify --dtype e4m3 --shape 1,8,2200,128 --shape 1,8,2200,256 --shape 2,8,1500,128 --shape 2,8,2048,256 --lse"
s 200 verify_ps $H $V --layout bhsd,bshd $PS --json /tmp/j/verify_fp8_ps.json
s 150 verify_ps_nosplit env FLASHRS_TAIL_SPLIT=0 $H $V $PS
SV="verify --dtype e4m3 --shape 1,8,2200,128 --shape 1,8,2200,256 --shape 1,3,333,128 --lse"
for tool in memcheck racecheck synccheck; do s 200 ${tool}_ps compute-sanitizer --tool $tool $H $SV $PS; done
PICK="--kernel flash_ws_fp8_m128_n128_s2_pp_ov_mbarrier"
s 200 bench_ps256 $H bench --dtype e4m3 --shapes fp8 --rounds 3 --iters 40 $PICK --kernel flash_ws_fp8_m128_n128_s2_pp_ps_mbarrier --json /tmp/j/bench_fp8_ps256.json
s 200 bench_nosplit env FLASHRS_TAIL_SPLIT=0 $H bench --dtype e4m3 --shapes fp8 --rounds 3 --iters 40 $PICK --kernel flash_ws_fp8_m128_n128_s2_pp_ov_ps_mbarrier --json /tmp/j/bench_fp8_nosplit.json
cp /tmp/l/bench_ps256.log /tmp/l/bench_nosplit.log /tmp/j/
pack 4
