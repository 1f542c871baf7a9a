# Session 23, call 8: v30's A/B again with the right baseline. The t0 of calls 5 and 7 was session
# 22's last host binary, which carried v29's reverted plan (5 tail-split slices at 1,024 items): its
# head-dim-128 persistent numbers are v29's, not HEAD's. Here t0 = HEAD's host (.gpu/s23h, built
# from 9930697; HEAD's cubin, fnv d130286419d17091, from .gpu/s22) and t1 = two Q buffers
# (.gpu/s23b): ncu cycles of one launch each, then the bench, alternated.
GPU_DIR=.gpu/s23b source evidence/session23/scripts/common.sh
mkdir -p /tmp/g0/cubin
xz -dc .gpu/s23h/host.xz > /tmp/g0/host; chmod +x /tmp/g0/host
xz -dc .gpu/s22/kernels_sm_90a.cubin.xz > /tmp/g0/cubin/kernels_sm_90a.cubin; cp .gpu/s22/kernels_sm_90a.ptx-fnv64 /tmp/g0/cubin/
M=gpu__time_duration.sum,sm__cycles_elapsed.max,sm__cycles_active.avg
M192=flash_ws_m192_n128_s2_pp_ov_ps_mbarrier; P128=flash_ws_m128_n128_s2_pp_ov_ps_mbarrier
prof() { local tag=$1 name=$2 k=$3 shape=$4 d=$5; local bin=$H; [[ $tag == t0* ]] && bin="env FLASHRS_CUBIN_DIR=/tmp/g0/cubin /tmp/g0/host"
  s 60 ncu_${name}_$tag ncu --clock-control none --launch-count 1 --kernel-name regex:"^${k}_d${d}_" --metrics $M --csv $bin profile-target --shape $shape --dtype f16 --kernel $k; }
for tag in t0a t1a t0b t1b; do
  prof $tag m128_4x16x2048x128 $P128 4,16,2048,128 128
  prof $tag m128_2x16x4096x128 $P128 2,16,4096,128 128
  prof $tag m128_1x16x8192x128 $P128 1,16,8192,128 128
  prof $tag m128_4x16x2048x64 $P128 4,16,2048,64 64
  prof $tag m192_2x8x2048 $M192 2,8,2048,64 64
done
cd /tmp/l && for f in ncu_*.log; do printf "%-44s" $f; for m in sm__cycles_elapsed.max gpu__time_duration.sum; do grep "\"$m\"" $f | head -1 | awk -F'","' '{printf " %s", $NF}' | tr -d '"'; done; echo; done | tee /tmp/j/ncu_summary.txt; cd - >/dev/null
B="bench --shapes std --iters 60 --kernel $M192 --kernel $P128"
for r in a b; do
  s 200 bench_t0$r env FLASHRS_CUBIN_DIR=/tmp/g0/cubin /tmp/g0/host $B --json /tmp/j/bench_t0$r.json
  s 200 bench_t1$r $H $B --json /tmp/j/bench_t1$r.json
done
F="bench --dtype e4m3 --shape 2,16,4096,128 --shape 1,16,8192,128 --iters 60 --kernel flash_ws_fp8_m128_n128_s2_pp_ov_ps_mbarrier"
for r in a b; do
  s 150 bench_fp8_t0$r env FLASHRS_CUBIN_DIR=/tmp/g0/cubin /tmp/g0/host $F --json /tmp/j/bench_fp8_t0$r.json
  s 150 bench_fp8_t1$r $H $F --json /tmp/j/bench_fp8_t1$r.json
done
pack 8
