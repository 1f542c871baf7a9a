# Session 23, call 5: v30, two Q buffers in the persistent flash_ws (build t1, .gpu/s23b) against
# HEAD's build (t0, session 22's u4, .gpu/s22). (a) verify of every persistent variant on the
# default sets and on problems of several items per block, both layouts, LSE, and grouped heads;
# e4m3 too. (b) ncu cycles of one launch each, t0 and t1 alternated (clock-independent A/B).
GPU_DIR=.gpu/s23b source evidence/session23/scripts/common.sh
mkdir -p /tmp/g0/cubin
xz -dc .gpu/s22/host.xz > /tmp/g0/host; chmod +x /tmp/g0/host
xz -dc .gpu/s22/kernels_sm_90a.cubin.xz > /tmp/g0/cubin/kernels_sm_90a.cubin; cp .gpu/s22/kernels_sm_90a.ptx-fnv64 /tmp/g0/cubin/
H0() { FLASHRS_CUBIN_DIR=/tmp/g0/cubin /tmp/g0/host "$@"; }
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
P16="--kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n192_s3_ov_ps_mbarrier --kernel flash_ws_m128_n176_s2_pp_ov_ps_mbarrier"
MANY="--shape 4,16,2048,64 --shape 2,8,2048,64 --shape 1,8,2200,128 --shape 2,8,1500,64 --shape 3,16,1000,128"
M=gpu__time_duration.sum,sm__cycles_elapsed.max,sm__cycles_active.avg
M192=flash_ws_m192_n128_s2_pp_ov_ps_mbarrier; P128=flash_ws_m128_n128_s2_pp_ov_ps_mbarrier; F8=flash_ws_fp8_m128_n128_s2_pp_ov_ps_mbarrier
prof() { local tag=$1 name=$2 k=$3 shape=$4 d=$5 dt=${6:-f16}; local bin=$H; [[ $tag == t0* ]] && bin="env FLASHRS_CUBIN_DIR=/tmp/g0/cubin /tmp/g0/host"
  s 60 ncu_${name}_$tag ncu --clock-control none --launch-count 1 --kernel-name regex:"^${k}_d${d}_" --metrics $M --csv $bin profile-target --shape $shape --dtype $dt --kernel $k; }
for tag in t0a t1a t0b t1b; do
  prof $tag m192_2x8x2048 $M192 2,8,2048,64 64
  prof $tag m192_1x24x2048x1024 $M192 1,24,2048,1024,64 64
  prof $tag m192_4x16x2048 $M192 4,16,2048,64 64
  prof $tag m128_1x33x1024 $P128 1,33,1024,1024,64 64
  prof $tag m128_4x16x2048x128 $P128 4,16,2048,128 128
  prof $tag m128_2x16x4096x128 $P128 2,16,4096,128 128
done
cd /tmp/l && for f in ncu_*.log; do printf "%-44s" $f; for m in sm__cycles_elapsed.max gpu__time_duration.sum; do grep "\"$m\"" $f | head -1 | awk -F'","' '{printf " %s", $NF}' | tr -d '"'; done; echo; done | tee /tmp/j/ncu_summary.txt; cd - >/dev/null
s 240 verify_ps16 $H verify $P16 --lse --layout bhsd,bshd --json /tmp/j/verify_ps16.json
s 150 verify_ps16_many $H verify $P16 --shapes std $MANY --lse --json /tmp/j/verify_ps16_many.json
s 150 verify_ps16_gqa $H verify $P16 $MANY --heads-kv 4 --lse --layout bshd
s 150 verify_fp8 $H verify --dtype e4m3 --shape 1,8,2200,128 --shape 2,8,1500,128 --lse --layout bhsd,bshd --json /tmp/j/verify_fp8.json
pack 5
