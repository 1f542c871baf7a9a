# Session 21, call 4: the committed build (t8): checks and the FP8 evidence bench in three rounds.
source .gpux/s21/common.sh
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
use t8
for t in gpu api_gpu; do xz -dc .gpux/s21/t8.$t.xz > /tmp/s21/g/$t; chmod +x /tmp/s21/g/$t; done
s 200 test_gpu /tmp/s21/g/gpu --include-ignored --test-threads=1
s 120 test_api_gpu /tmp/s21/g/api_gpu --include-ignored --test-threads=1
s 120 test_fp8 $F --include-ignored --test-threads=1
s 120 verify_fp8 $H verify --dtype e4m3 --layout bhsd,bshd --lse --json /tmp/j/verify_fp8_h100.json
P="--kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n80_s2_pp_ov_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier"
s 150 verify_picks $H verify --shapes small,odd,edge --layout bhsd,bshd --lse $P --json /tmp/j/verify_picks_t8.json
K="--kernel flash_ws_fp8_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_fp8_m128_n128_s2_pp_mbarrier --kernel flash_ws_fp8_m128_n192_s2_pp_ov_mbarrier --kernel flash_ws_fp8_m192_n96_s2_pp_ov_mbarrier"
V="verify --dtype e4m3 --shapes small --shape 1,4,333,128 --shape 2,2,100,257,128 --shape 1,2,64,130,256 --lse"
for tool in memcheck racecheck synccheck initcheck; do s 150 ${tool}_fp8 compute-sanitizer --tool $tool $H $V $K; done
s 400 bench_fp8 $H bench --dtype e4m3 --shapes fp8 --rounds 3 --iters 40 --json /tmp/j/bench_fp8_h100.json
cp /tmp/l/bench_fp8.log /tmp/j/bench_fp8_h100.log
pack 4
