# Session 25, call 1: two P buffers in the overlapped loop (v34, build s25a: experimental
# `_p2` twins of the two-consumer n128 kernels and of the e4m3 pick). verify, ncu cycles of one
# launch each against the same build's one-buffer kernels, bench with cuDNN.
GPU_DIR=.gpu/s25a source evidence/session25/scripts/common.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,driver_version --format=csv | tee /tmp/j/gpu.txt
BP=flash_ws_m128_n128_s2_pp_ov_ps_mbarrier; PP=flash_ws_m128_n128_s2_pp_ov_ps_p2_mbarrier
BG=flash_ws_m128_n128_s2_pp_ov_mbarrier; PG=flash_ws_m128_n128_s2_pp_ov_p2_mbarrier
F8=flash_ws_fp8_m128_n128_s2_pp_ov_mbarrier; F8P=flash_ws_fp8_m128_n128_s2_pp_ov_p2_mbarrier
s 200 verify_p2 $H verify --kernel $PP --kernel $PG --lse --layout bhsd,bshd --shapes small,mission,long,odd,edge --shape 2,8,2048,64 --json /tmp/j/verify_p2.json
s 120 verify_p2_gqa $H verify --kernel $PP --kernel $PG --heads-kv 2 --lse --dtype bf16 --shapes small,mission,long,odd
s 120 verify_p2_random $H verify --kernel $PP --kernel $PG --random 60
s 120 verify_p2_fp8 $H verify --dtype e4m3 --kernel $F8P --lse --json /tmp/j/verify_p2_fp8.json
M=gpu__time_duration.sum,sm__cycles_elapsed.max,sm__cycles_active.avg
prof() { local name=$1 k=$2 shape=$3 d=$4; shift 4; s 60 ncu_${name} ncu --clock-control none --launch-count 1 --kernel-name regex:"^${k}_d${d}_" --metrics $M --csv $H profile-target --shape $shape --kernel $k "$@"; }
for sh in 1,8,2048,1024,64 1,8,2048,2048,64 2,8,2048,2048,64 4,16,2048,2048,64; do
  IFS=, read b h sq sk d <<< "$sh"
  for k in BP PP BG PG; do prof ${k}_${b}x${h}x${sq}x${sk} ${!k} $sh 64 --dtype f16; done
done
for sh in 2,16,4096,4096,128 1,16,8192,8192,128; do
  IFS=, read b h sq sk d <<< "$sh"
  for k in F8 F8P; do prof ${k}_${b}x${h}x${sq}x${sk} ${!k} $sh 128 --dtype e4m3; done
done
cd /tmp/l && for f in ncu_*.log; do printf "%-36s" $f; for m in sm__cycles_elapsed.max gpu__time_duration.sum; do grep "\"$m\"" $f | head -1 | awk -F'","' '{printf " %s", $NF}' | tr -d '"'; done; echo; done | tee /tmp/j/ncu_summary.txt; cd - >/dev/null
B="bench --shape 1,8,2048,64 --shape 2,8,2048,64 --shape 4,16,2048,64 --shape 2,16,4096,64 --shape 1,8,512,64 --iters 100 --kernel $BP --kernel $PP --kernel $BG --kernel $PG"
s 240 bench_a $H $B --peers torch --rounds 2 --json /tmp/j/bench_a.json
s 200 bench_fp8 $H bench --dtype e4m3 --shape 2,16,4096,128 --shape 1,16,8192,128 --kernel $F8 --kernel $F8P --iters 50 --rounds 2 --json /tmp/j/bench_fp8.json
pack 1
