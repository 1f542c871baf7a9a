# Session 25, call 6: build s25e (v37: the three-consumer persistent kernel's O through a tile of
# its own too) against s25d (this tree before it): verify and sanitizers on the changed kernel,
# ncu cycles of one launch each, bench alternated with cuDNN in the first.
GPU_DIR=.gpu/s25e source evidence/session25/scripts/common.sh
mkdir -p /tmp/ga/cubin && xz -dc .gpu/s25d/host.xz > /tmp/ga/host && chmod +x /tmp/ga/host
xz -dc .gpu/s25d/kernels_sm_90a.cubin.xz > /tmp/ga/cubin/kernels_sm_90a.cubin && cp .gpu/s25d/kernels_sm_90a.ptx-fnv64 /tmp/ga/cubin/
A="env FLASHRS_CUBIN_DIR=/tmp/ga/cubin /tmp/ga/host"
TP=flash_ws_m192_n128_s2_pp_ov_ps_mbarrier
s 200 verify_e $H verify --kernel $TP --lse --layout bhsd,bshd --shapes small,mission,long,odd,edge --shape 2,8,2048,64 --shape 3,8,1000,64 --json /tmp/j/verify_e.json
s 120 verify_e_gqa $H verify --kernel $TP --heads-kv 2 --lse --dtype bf16 --shapes small,mission,long --shape 2,8,2048,64 --shape 3,8,1000,64
s 120 verify_e_random $H verify --random 100 --json /tmp/j/verify_e_random.json
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
for tool in memcheck racecheck synccheck; do s 200 san_$tool $CS --tool $tool --print-limit 20 $H verify --quick --seed 7 --kernel $TP; done
M=gpu__time_duration.sum,sm__cycles_elapsed.max,sm__cycles_active.avg
prof() { local name=$1 host=$2 shape=$3; s 60 ncu_${name} ncu --clock-control none --launch-count 1 --kernel-name regex:"^${TP}_d64_" --metrics $M --csv $host profile-target --shape $shape --kernel $TP --dtype f16; }
for r in 1 2; do
  for sh in 2,8,2048,2048,64 4,16,2048,2048,64 2,16,4096,4096,64 1,16,8192,8192,64; do
    IFS=, read b h sq sk d <<< "$sh"
    prof d${r}_${b}x${h}x${sq}x${sk} "$A" $sh; prof e${r}_${b}x${h}x${sq}x${sk} $H $sh
  done
done
cd /tmp/l && for f in ncu_*.log; do printf "%-36s" $f; for m in sm__cycles_elapsed.max gpu__time_duration.sum; do grep "\"$m\"" $f | head -1 | awk -F'","' '{printf " %s", $NF}' | tr -d '"'; done; echo; done | tee /tmp/j/ncu_summary.txt; cd - >/dev/null
B="bench --shape 2,8,2048,64 --shape 4,16,2048,64 --shape 2,16,4096,64 --shape 1,16,8192,64 --iters 60 --kernel $TP"
s 200 bench_e1 $H $B --peers torch --json /tmp/j/bench_e1.json
s 150 bench_d1 $A $B --json /tmp/j/bench_d1.json
s 150 bench_e2 $H $B --json /tmp/j/bench_e2.json
s 150 bench_d2 $A $B --json /tmp/j/bench_d2.json
pack 6
