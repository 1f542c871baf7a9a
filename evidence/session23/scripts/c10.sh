# Session 23, call 10: v31's second step, the row maxima before the turn (build t3, .gpu/s23d)
# against call 9's t2 (.gpu/s23c, the turns round the whole softmax) and HEAD (t0, .gpu/s23h):
# verify of the serial ping-pong variants; ncu cycles of one launch each; the bench with cuDNN;
# the e4m3 serial ping-pong variant t0 against t3.
GPU_DIR=.gpu/s23d source evidence/session23/scripts/common.sh
for t in 0 2; do mkdir -p /tmp/g$t/cubin; done
xz -dc .gpu/s23h/host.xz > /tmp/g0/host; chmod +x /tmp/g0/host
xz -dc .gpu/s22/kernels_sm_90a.cubin.xz > /tmp/g0/cubin/kernels_sm_90a.cubin; cp .gpu/s22/kernels_sm_90a.ptx-fnv64 /tmp/g0/cubin/
xz -dc .gpu/s23c/host.xz > /tmp/g2/host; chmod +x /tmp/g2/host
xz -dc .gpu/s23c/kernels_sm_90a.cubin.xz > /tmp/g2/cubin/kernels_sm_90a.cubin; cp .gpu/s23c/kernels_sm_90a.ptx-fnv64 /tmp/g2/cubin/
bin() { case $1 in t0*) echo "env FLASHRS_CUBIN_DIR=/tmp/g0/cubin /tmp/g0/host";; t2*) echo "env FLASHRS_CUBIN_DIR=/tmp/g2/cubin /tmp/g2/host";; *) echo $H;; esac; }
PP=flash_ws_m128_n128_s2_pp_mbarrier; OV=flash_ws_m128_n128_s2_pp_ov_mbarrier; F8=flash_ws_fp8_m128_n128_s2_pp_mbarrier
s 200 verify_pp $H verify --kernel $PP --kernel $F8 --lse --layout bhsd,bshd --shapes small,mission,long,odd,edge --shape 1,40,1024,64
s 100 verify_pp_gqa $H verify --kernel $PP --heads-kv 2 --lse --shapes small,mission,long --shape 1,40,1024,64
s 100 verify_pp_fp8 $H verify --dtype e4m3 --kernel $F8 --lse
M=gpu__time_duration.sum,sm__cycles_elapsed.max,sm__cycles_active.avg
prof() { local tag=$1 name=$2 k=$3 shape=$4 d=$5; s 60 ncu_${name}_$tag ncu --clock-control none --launch-count 1 --kernel-name regex:"^${k}_d${d}_" --metrics $M --csv $(bin $tag) profile-target --shape $shape --dtype f16 --kernel $k; }
for tag in t2 t3; do
  for sh in 1,8,2048,1024,64 1,8,2048,2048,64 1,8,2048,4096,64 2,8,2048,2048,64 4,16,2048,2048,64 1,8,2048,2048,128 2,16,4096,4096,128; do
    IFS=, read b h sq sk d <<< "$sh"
    prof $tag pp_${b}x${h}x${sq}x${sk}x${d} $PP $sh $d
  done
done
cd /tmp/l && for f in ncu_*.log; do printf "%-44s" $f; for m in sm__cycles_elapsed.max gpu__time_duration.sum; do grep "\"$m\"" $f | head -1 | awk -F'","' '{printf " %s", $NF}' | tr -d '"'; done; echo; done | tee /tmp/j/ncu_summary.txt; cd - >/dev/null
B="bench --shape 1,8,2048,64 --shape 2,8,2048,64 --shape 4,16,2048,64 --shape 1,8,2048,128 --iters 100 --kernel $PP --kernel $OV"
s 200 bench_t3 $H $B --peers torch --json /tmp/j/bench_t3.json
s 200 bench_t2 $(bin t2) $B --json /tmp/j/bench_t2.json
s 200 bench_t3b $H $B --json /tmp/j/bench_t3b.json
F="bench --dtype e4m3 --shapes fp8 --iters 40 --kernel $F8"
s 150 bench_fp8_t0 $(bin t0) $F --json /tmp/j/bench_fp8_t0.json
s 150 bench_fp8_t3 $H $F --json /tmp/j/bench_fp8_t3.json
pack 10
