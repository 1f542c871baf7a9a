# Session 25, call 3: build s25c (the two-consumer persistent kernel's O through a tile of its own
# and the tensor store at head dim 64 too) against s24c (HEAD's kernels, fnv f247e482f9b0e5bd):
# verify and sanitizers on the changed kernel, ncu cycles of one launch each, bench alternated.
GPU_DIR=.gpu/s25c source evidence/session25/scripts/common.sh
mkdir -p /tmp/ga/cubin && xz -dc .gpu/s24c/host.xz > /tmp/ga/host && chmod +x /tmp/ga/host
xz -dc .gpu/s24c/kernels_sm_90a.cubin.xz > /tmp/ga/cubin/kernels_sm_90a.cubin && cp .gpu/s24c/kernels_sm_90a.ptx-fnv64 /tmp/ga/cubin/
A="env FLASHRS_CUBIN_DIR=/tmp/ga/cubin /tmp/ga/host"
BP=flash_ws_m128_n128_s2_pp_ov_ps_mbarrier
s 200 verify_c $H verify --kernel $BP --lse --layout bhsd,bshd --shapes small,mission,long,odd,edge --shape 2,8,2048,64 --shape 3,8,1000,64 --json /tmp/j/verify_c.json
s 120 verify_c_gqa $H verify --kernel $BP --heads-kv 2 --lse --dtype bf16 --shape 2,8,2048,64 --shape 3,8,1000,64 --shape 1,8,129,64 --shape 5,8,4100,64
s 120 verify_c_random $H verify --random 100 --json /tmp/j/verify_c_random.json
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
for tool in memcheck racecheck synccheck; do s 200 san_$tool $CS --tool $tool --print-limit 20 $H verify --quick --seed 7 --kernel $BP; done
M=gpu__time_duration.sum,sm__cycles_elapsed.max,sm__cycles_active.avg
prof() { local name=$1 host=$2 shape=$3; s 60 ncu_${name} ncu --clock-control none --launch-count 1 --kernel-name regex:"^${BP}_d64_" --metrics $M --csv $host profile-target --shape $shape --kernel $BP --dtype f16; }
for r in 1 2; do
  for sh in 1,8,2048,1024,64 1,8,2048,2048,64 2,8,2048,2048,64 4,16,2048,2048,64 2,8,2048,4096,64; do
    IFS=, read b h sq sk d <<< "$sh"
    prof a${r}_${b}x${h}x${sq}x${sk} "$A" $sh; prof c${r}_${b}x${h}x${sq}x${sk} $H $sh
  done
done
cd /tmp/l && for f in ncu_*.log; do printf "%-36s" $f; for m in sm__cycles_elapsed.max gpu__time_duration.sum; do grep "\"$m\"" $f | head -1 | awk -F'","' '{printf " %s", $NF}' | tr -d '"'; done; echo; done | tee /tmp/j/ncu_summary.txt; cd - >/dev/null
B="bench --shape 1,8,2048,64 --shape 2,8,2048,64 --shape 4,16,2048,64 --shape 1,8,512,64 --shape 2,8,512,64 --iters 100 --kernel $BP"
s 200 bench_c1 $H $B --peers torch --json /tmp/j/bench_c1.json
s 120 bench_a1 $A $B --json /tmp/j/bench_a1.json
s 120 bench_c2 $H $B --json /tmp/j/bench_c2.json
s 120 bench_a2 $A $B --json /tmp/j/bench_a2.json
pack 3
