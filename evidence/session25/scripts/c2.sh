# Session 25, call 2: build s25b (the softmax's mask test made provably warp-uniform in flash_ws;
# experimental head-dim-64 twins with 192-key tiles and with three stages) against s25a (call 1's
# build, without the uniform test): verify, ncu cycles of one launch each, bench with cuDNN.
GPU_DIR=.gpu/s25b source evidence/session25/scripts/common.sh
mkdir -p /tmp/ga/cubin && xz -dc .gpu/s25a/host.xz > /tmp/ga/host && chmod +x /tmp/ga/host
xz -dc .gpu/s25a/kernels_sm_90a.cubin.xz > /tmp/ga/cubin/kernels_sm_90a.cubin && cp .gpu/s25a/kernels_sm_90a.ptx-fnv64 /tmp/ga/cubin/
A="env FLASHRS_CUBIN_DIR=/tmp/ga/cubin /tmp/ga/host"
BP=flash_ws_m128_n128_s2_pp_ov_ps_mbarrier; BG=flash_ws_m128_n128_s2_pp_ov_mbarrier
NP=flash_ws_m128_n192_s3_pp_ov_ps_mbarrier; SP=flash_ws_m128_n128_s3_pp_ov_ps_mbarrier
TP=flash_ws_m192_n128_s2_pp_ov_ps_mbarrier
s 200 verify_b $H verify --kernel $NP --kernel $SP --kernel $BP --kernel $BG --kernel $TP --lse --layout bhsd,bshd --shapes small,mission,long,odd,edge --shape 2,8,2048,64 --json /tmp/j/verify_b.json
s 120 verify_b_random $H verify --random 100 --json /tmp/j/verify_b_random.json
M=gpu__time_duration.sum,sm__cycles_elapsed.max,sm__cycles_active.avg
prof() { local name=$1 host=$2 k=$3 shape=$4 d=$5; s 60 ncu_${name} ncu --clock-control none --launch-count 1 --kernel-name regex:"^${k}_d${d}_" --metrics $M --csv $host profile-target --shape $shape --kernel $k --dtype f16; }
for sh in 1,8,2048,1024,64 2,8,2048,2048,64 4,16,2048,2048,64 2,16,4096,4096,128; do
  IFS=, read b h sq sk d <<< "$sh"
  ks="BP BG"; [ $d = 64 ] && ks="BP BG NP SP TP"
  for k in $ks; do
    prof ${k}_b_${b}x${h}x${sq}x${sk} $H ${!k} $sh $d
    [ $k = BP -o $k = BG -o $k = TP ] && prof ${k}_a_${b}x${h}x${sq}x${sk} "$A" ${!k} $sh $d
  done
done
cd /tmp/l && for f in ncu_*.log; do printf "%-36s" $f; for m in sm__cycles_elapsed.max gpu__time_duration.sum; do grep "\"$m\"" $f | head -1 | awk -F'","' '{printf " %s", $NF}' | tr -d '"'; done; echo; done | tee /tmp/j/ncu_summary.txt; cd - >/dev/null
B="bench --shape 1,8,2048,64 --shape 2,8,2048,64 --shape 4,16,2048,64 --shape 2,16,4096,64 --iters 100 --kernel $BP --kernel $NP --kernel $SP --kernel $TP"
s 240 bench_b $H $B --peers torch --rounds 2 --json /tmp/j/bench_b.json
pack 2
