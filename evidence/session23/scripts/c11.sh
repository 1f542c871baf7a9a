# Session 23, call 11: v31 step 3, the overlapped loop's turns round the exponentials where they
# bind (16-bit head dim 64, e4m3 head dim 128; build t4, .gpu/s23e) against t3 (.gpu/s23d, call
# 10). verify of the variants it changes, synccheck and racecheck on them; ncu cycles of one
# launch each, t3 and t4 alternated; the bench with cuDNN; the e4m3 set.
GPU_DIR=.gpu/s23e source evidence/session23/scripts/common.sh
nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p /tmp/g3/cubin
xz -dc .gpu/s23d/host.xz > /tmp/g3/host; chmod +x /tmp/g3/host
xz -dc .gpu/s23d/kernels_sm_90a.cubin.xz > /tmp/g3/cubin/kernels_sm_90a.cubin; cp .gpu/s23d/kernels_sm_90a.ptx-fnv64 /tmp/g3/cubin/
bin() { case $1 in t3*) echo "env FLASHRS_CUBIN_DIR=/tmp/g3/cubin /tmp/g3/host";; *) echo $H;; esac; }
OV=flash_ws_m128_n128_s2_pp_ov_mbarrier; P128=flash_ws_m128_n128_s2_pp_ov_ps_mbarrier; M192=flash_ws_m192_n128_s2_pp_ov_ps_mbarrier; M192G=flash_ws_m192_n128_s2_pp_ov_mbarrier
F8=flash_ws_fp8_m128_n128_s2_pp_ov_mbarrier; F8P=flash_ws_fp8_m128_n128_s2_pp_ov_ps_mbarrier
K16="--kernel $OV --kernel $P128 --kernel $M192 --kernel $M192G --kernel flash_ws_m192_n128_s3_pp_ov_mbarrier"
s 200 verify16 $H verify $K16 --lse --layout bhsd,bshd --shapes small,mission,long,odd,edge --shape 1,40,1024,64 --shape 2,8,2048,64
s 100 verify16_gqa $H verify $K16 --heads-kv 2 --lse --shapes small,mission --shape 1,40,1024,64
s 120 verify_fp8 $H verify --dtype e4m3 --lse --layout bhsd,bshd
SV="verify --quick $K16"
for tool in synccheck racecheck; do s 200 ${tool} compute-sanitizer --tool $tool $H $SV; done
M=gpu__time_duration.sum,sm__cycles_elapsed.max,sm__cycles_active.avg
prof() { local tag=$1 name=$2 k=$3 shape=$4 d=$5 dt=${6:-f16}; s 60 ncu_${name}_$tag ncu --clock-control none --launch-count 1 --kernel-name regex:"^${k}_d${d}_" --metrics $M --csv $(bin $tag) profile-target --shape $shape --dtype $dt --kernel $k; }
for tag in t3 t4 t3b t4b; do
  prof $tag ov_1x8x2048 $OV 1,8,2048,64 64
  prof $tag ov_1x8x2048x4096 $OV 1,8,2048,4096,64 64
  prof $tag ps128_2x8x2048 $P128 2,8,2048,64 64
  prof $tag m192_2x8x2048 $M192 2,8,2048,64 64
  prof $tag m192_4x16x2048 $M192 4,16,2048,64 64
  prof $tag ps128_2x16x4096x128 $P128 2,16,4096,128 128
done
cd /tmp/l && for f in ncu_*.log; do printf "%-44s" $f; for m in sm__cycles_elapsed.max gpu__time_duration.sum; do grep "\"$m\"" $f | head -1 | awk -F'","' '{printf " %s", $NF}' | tr -d '"'; done; echo; done | tee /tmp/j/ncu_summary.txt; cd - >/dev/null
B="bench --shape 1,8,2048,64 --shape 2,8,2048,64 --shape 4,16,2048,64 --shape 2,16,4096,64 --iters 100 --kernel $OV --kernel $P128 --kernel $M192"
s 200 bench_t4 $H $B --peers torch --json /tmp/j/bench_t4.json
s 200 bench_t3 $(bin t3) $B --json /tmp/j/bench_t3.json
s 200 bench_t4b $H $B --json /tmp/j/bench_t4b.json
F="bench --dtype e4m3 --shapes fp8 --iters 40 --kernel $F8 --kernel $F8P"
s 150 bench_fp8_t3 $(bin t3) $F --json /tmp/j/bench_fp8_t3.json
s 150 bench_fp8_t4 $H $F --json /tmp/j/bench_fp8_t4.json
pack 11
