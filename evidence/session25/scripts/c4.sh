# Session 25, call 4 (H100): build s25d = this tree (v36: O through its own tile at head dim 64
# with two consumers; kernels as s25c's): the GPU tests, verify --quick with LSE, grouped heads,
# 200 random problems, e4m3 verify; then the kernel against s24c (HEAD's kernels) on the H100:
# ncu cycles and the bench, alternated, cuDNN in the first.
GPU_DIR=.gpu/s25d source evidence/session25/scripts/common.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,driver_version --format=csv | tee /tmp/j/gpu.txt
mkdir -p /tmp/ga/cubin && xz -dc .gpu/s24c/host.xz > /tmp/ga/host && chmod +x /tmp/ga/host
xz -dc .gpu/s24c/kernels_sm_90a.cubin.xz > /tmp/ga/cubin/kernels_sm_90a.cubin && cp .gpu/s24c/kernels_sm_90a.ptx-fnv64 /tmp/ga/cubin/
A="env FLASHRS_CUBIN_DIR=/tmp/ga/cubin /tmp/ga/host"
BP=flash_ws_m128_n128_s2_pp_ov_ps_mbarrier
for t in gpu api_gpu fp8_gpu; do s 300 test_$t /tmp/g/tests/$t --include-ignored --test-threads=1; done
s 300 verify_quick $H verify --quick --lse --json /tmp/j/verify_quick.json
s 120 verify_gqa $H verify --kernel $BP --heads-kv 2 --lse --dtype bf16 --shapes small,mission,long --shape 2,8,2048,64 --shape 3,8,1000,64 --json /tmp/j/verify_gqa.json
s 200 verify_random $H verify --random 200 --json /tmp/j/verify_random.json
s 100 verify_fp8 $H verify --dtype e4m3 --lse
M=gpu__time_duration.sum,sm__cycles_elapsed.max,sm__cycles_active.avg
prof() { local name=$1 host=$2 shape=$3; s 60 ncu_${name} ncu --clock-control none --launch-count 1 --kernel-name regex:"^${BP}_d64_" --metrics $M --csv $host profile-target --shape $shape --kernel $BP --dtype f16; }
for r in 1 2; do
  for sh in 1,8,2048,2048,64 2,8,2048,2048,64 4,16,2048,2048,64; do
    IFS=, read b h sq sk d <<< "$sh"
    prof a${r}_${b}x${h}x${sq}x${sk} "$A" $sh; prof d${r}_${b}x${h}x${sq}x${sk} $H $sh
  done
done
cd /tmp/l && for f in ncu_*.log; do printf "%-36s" $f; for m in sm__cycles_elapsed.max gpu__time_duration.sum; do grep "\"$m\"" $f | head -1 | awk -F'","' '{printf " %s", $NF}' | tr -d '"'; done; echo; done | tee /tmp/j/ncu_summary.txt; cd - >/dev/null
B="bench --shape 1,8,2048,64 --shape 2,8,2048,64 --shape 4,16,2048,64 --shape 1,8,512,64 --shape 2,8,512,64 --iters 100 --kernel $BP"
s 200 bench_d1 $H $B --peers torch --json /tmp/j/bench_d1.json
s 120 bench_a1 $A $B --json /tmp/j/bench_a1.json
s 120 bench_d2 $H $B --json /tmp/j/bench_d2.json
s 120 bench_a2 $A $B --json /tmp/j/bench_a2.json
pack 4
