# Session 23, call 9: v31 attempt, the serial loop's ping-pong turns around the softmax (cuDNN's
# order) instead of around the products (build t2 = t1 + that, .gpu/s23c; t0 = HEAD, .gpu/s23h).
# verify of the serial ping-pong variants, then ncu cycles of one launch each (t0 and t2) of
# flash_ws_m128_n128_s2_pp (serial, ping-pong) beside the overlapped pick twin, and a bench.
GPU_DIR=.gpu/s23c source evidence/session23/scripts/common.sh
mkdir -p /tmp/g0/cubin
xz -dc .gpu/s23h/host.xz > /tmp/g0/host; chmod +x /tmp/g0/host
xz -dc .gpu/s22/kernels_sm_90a.cubin.xz > /tmp/g0/cubin/kernels_sm_90a.cubin; cp .gpu/s22/kernels_sm_90a.ptx-fnv64 /tmp/g0/cubin/
PP=flash_ws_m128_n128_s2_pp_mbarrier; OV=flash_ws_m128_n128_s2_pp_ov_mbarrier
s 200 verify_pp $H verify --kernel $PP --kernel flash_ws_fp8_m128_n128_s2_pp_mbarrier --lse --layout bhsd,bshd --shapes small,mission,long,odd,edge --shape 1,40,1024,64
s 100 verify_pp_fp8 $H verify --dtype e4m3 --kernel flash_ws_fp8_m128_n128_s2_pp_mbarrier --lse
M=gpu__time_duration.sum,sm__cycles_elapsed.max,sm__cycles_active.avg
prof() { local tag=$1 name=$2 k=$3 shape=$4 d=$5; local bin=$H; [[ $tag == t0* ]] && bin="env FLASHRS_CUBIN_DIR=/tmp/g0/cubin /tmp/g0/host"
  s 60 ncu_${name}_$tag ncu --clock-control none --launch-count 1 --kernel-name regex:"^${k}_d${d}_" --metrics $M --csv $bin profile-target --shape $shape --dtype f16 --kernel $k; }
for tag in t0 t2; do
  for sh in 1,8,2048,1024,64 1,8,2048,2048,64 1,8,2048,4096,64 2,8,2048,2048,64 4,16,2048,2048,64 1,8,2048,2048,128 2,16,4096,4096,128; do
    IFS=, read b h sq sk d <<< "$sh"
    prof $tag pp_${b}x${h}x${sq}x${sk}x${d} $PP $sh $d
    [ $tag = t2 ] && prof $tag ov_${b}x${h}x${sq}x${sk}x${d} $OV $sh $d
  done
done
cd /tmp/l && for f in ncu_*.log; do printf "%-44s" $f; for m in sm__cycles_elapsed.max gpu__time_duration.sum; do grep "\"$m\"" $f | head -1 | awk -F'","' '{printf " %s", $NF}' | tr -d '"'; done; echo; done | tee /tmp/j/ncu_summary.txt; cd - >/dev/null
B="bench --shape 1,8,2048,64 --shape 2,8,2048,64 --shape 4,16,2048,64 --shape 1,8,2048,128 --iters 100 --kernel $PP --kernel $OV"
s 200 bench_t0 env FLASHRS_CUBIN_DIR=/tmp/g0/cubin /tmp/g0/host $B --json /tmp/j/bench_t0.json
s 200 bench_t2 $H $B --peers torch --json /tmp/j/bench_t2.json
s 200 bench_t0b env FLASHRS_CUBIN_DIR=/tmp/g0/cubin /tmp/g0/host $B --json /tmp/j/bench_t0b.json
s 200 bench_t2b $H $B --json /tmp/j/bench_t2b.json
pack 9
