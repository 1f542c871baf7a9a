# Session 24, call 1: the serial ping-pong loop (v31's turns round the exponentials) with three
# consumer warpgroups, new experimental variants `flash_ws_m192_n128_s2_pp[_ps]_mbarrier` (build
# s24a), against the overlapped three-consumer picks of the same build: verify, ncu cycles of one
# launch each, bench with cuDNN.
GPU_DIR=.gpu/s24a source evidence/session24/scripts/common.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv | tee /tmp/j/gpu.txt
SG=flash_ws_m192_n128_s2_pp_mbarrier; SP=flash_ws_m192_n128_s2_pp_ps_mbarrier
OG=flash_ws_m192_n128_s2_pp_ov_mbarrier; OP=flash_ws_m192_n128_s2_pp_ov_ps_mbarrier
s 200 verify_serial3 $H verify --kernel $SG --kernel $SP --lse --layout bhsd,bshd --shapes small,mission,long,odd,edge --shape 1,40,1024,64 --shape 2,8,2048,64 --json /tmp/j/verify_serial3.json
s 100 verify_serial3_gqa $H verify --kernel $SG --kernel $SP --heads-kv 2 --lse --dtype bf16 --shapes small,mission,long --shape 1,40,1024,64 --shape 2,8,2048,64
s 150 verify_serial3_random $H verify --kernel $SG --kernel $SP --random 60
M=gpu__time_duration.sum,sm__cycles_elapsed.max,sm__cycles_active.avg
prof() { local name=$1 k=$2 shape=$3; s 60 ncu_${name} ncu --clock-control none --launch-count 1 --kernel-name regex:"^${k}_d64_" --metrics $M --csv $H profile-target --shape $shape --dtype f16 --kernel $k; }
for sh in 1,8,2048,1024,64 1,8,2048,2048,64 1,8,2048,4096,64 2,8,2048,2048,64 4,16,2048,2048,64 2,16,4096,4096,64 1,24,2048,1024,64; do
  IFS=, read b h sq sk d <<< "$sh"
  for k in SG OG SP OP; do prof ${k}_${b}x${h}x${sq}x${sk} ${!k} $sh; done
done
cd /tmp/l && for f in ncu_*.log; do printf "%-36s" $f; for m in sm__cycles_elapsed.max gpu__time_duration.sum; do grep "\"$m\"" $f | head -1 | awk -F'","' '{printf " %s", $NF}' | tr -d '"'; done; echo; done | tee /tmp/j/ncu_summary.txt; cd - >/dev/null
B="bench --shape 1,8,2048,64 --shape 2,8,2048,64 --shape 4,16,2048,64 --shape 2,16,4096,64 --iters 100 --kernel $SG --kernel $SP --kernel $OG --kernel $OP"
s 240 bench_a $H $B --peers torch --json /tmp/j/bench_a.json
s 240 bench_b $H $B --json /tmp/j/bench_b.json
pack 1
