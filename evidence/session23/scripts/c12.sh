# Session 23, call 12: this tree (t5 = v30's two Q buffers + v31's serial loop; its PTX is call
# 10's t3 if the fnv matches): the GPU tests, verify of the default sets in both dtypes and
# layouts with LSE, grouped heads, 300 random problems, the e4m3 verify, and synccheck and
# racecheck on the changed kernels.
GPU_DIR=.gpu/s23f source evidence/session23/scripts/common.sh
nvidia-smi --query-gpu=name --format=csv,noheader
for t in gpu api_gpu fp8_gpu; do s 200 test_$t /tmp/g/tests/$t --include-ignored --test-threads=1; done
WS="--kernel flash_ws_m128_n128_s2_pp_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier"
s 200 verify_ws $H verify $WS --lse --layout bhsd,bshd --shape 1,40,1024,64 --shape 1,20,1500,128 --json /tmp/j/verify_ws.json
s 100 verify_ws_gqa $H verify $WS --heads-kv 2 --lse --shapes small,mission,long --shape 1,40,1024,64
s 150 verify_random $H verify --random 300 $WS
s 120 verify_fp8 $H verify --dtype e4m3 --lse --layout bhsd,bshd --json /tmp/j/verify_fp8.json
s 100 verify_fp8_ps $H verify --dtype e4m3 --kernel flash_ws_fp8_m128_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_fp8_m128_n128_s2_pp_mbarrier --shape 1,20,1500,128 --lse
for tool in synccheck racecheck memcheck; do s 200 $tool compute-sanitizer --tool $tool $H verify --quick $WS; done
# The serial ping-pong kernel of this tree (its loop written with `probabilities_in_turn`, so its
# PTX is not t3's) against t3, ncu cycles of one launch each, alternated.
mkdir -p /tmp/g3/cubin
xz -dc .gpu/s23d/host.xz > /tmp/g3/host; chmod +x /tmp/g3/host
xz -dc .gpu/s23d/kernels_sm_90a.cubin.xz > /tmp/g3/cubin/kernels_sm_90a.cubin; cp .gpu/s23d/kernels_sm_90a.ptx-fnv64 /tmp/g3/cubin/
M=gpu__time_duration.sum,sm__cycles_elapsed.max,sm__cycles_active.avg; PP=flash_ws_m128_n128_s2_pp_mbarrier
for tag in t3 t5 t3b t5b; do
  bin=$H; [[ $tag == t3* ]] && bin="env FLASHRS_CUBIN_DIR=/tmp/g3/cubin /tmp/g3/host"
  for sh in 1,8,2048,2048,64 4,16,2048,2048,64 2,16,4096,4096,128; do
    IFS=, read b h sq sk d <<< "$sh"
    s 60 ncu_pp_${b}x${h}x${sq}x${d}_$tag ncu --clock-control none --launch-count 1 --kernel-name regex:"^${PP}_d${d}_" --metrics $M --csv $bin profile-target --shape $sh --dtype f16 --kernel $PP
  done
done
cd /tmp/l && for f in ncu_*.log; do printf "%-44s" $f; for m in sm__cycles_elapsed.max gpu__time_duration.sum; do grep "\"$m\"" $f | head -1 | awk -F'","' '{printf " %s", $NF}' | tr -d '"'; done; echo; done | tee /tmp/j/ncu_summary.txt; cd - >/dev/null
pack 12
