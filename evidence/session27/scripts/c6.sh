# Session 27, call 6 (H100): does a third ring stage shorten a further item at head dim 64? A
# build of this tree (s27b: v40) with an experimental persistent three-consumer kernel of three
# stages (`flash_ws_m192_n128_s3_pp_ov_ps_mbarrier`, kernels.toml entry not committed) beside the
# two-stage pick: verify of the new one, then ncu cycles of one launch of each, alternated, at one
# full round (1,12,2048,64), (2,8,2048,64) with and without the tail split, and (4,16,2048,64);
# then the bench of both.
GPU_DIR=.gpu/s27b source evidence/session27/scripts/common.sh
K2=flash_ws_m192_n128_s2_pp_ov_ps_mbarrier; K3=flash_ws_m192_n128_s3_pp_ov_ps_mbarrier
s 120 verify_s3 $H verify --kernel $K3 --dtype f16 --lse --shapes small --shape 2,8,2048,64 --shape 1,133,192,4096,64
grep -q "^PASS" /tmp/l/verify_s3.log || { pack 6; exit 1; }
M=gpu__time_duration.sum,sm__cycles_elapsed.max,sm__cycles_active.avg
prof() { local name=$1 k=$2 shape=$3; shift 3; s 60 ncu_${name} env "$@" ncu --clock-control none --launch-count 1 --kernel-name regex:"^${k}_d64_" --metrics $M --csv $H profile-target --shape $shape --kernel $k --dtype f16; }
for r in 1 2 3; do
  for shape in 1,12,2048,2048,64 2,8,2048,2048,64 4,16,2048,2048,64; do
    tag=$(echo $shape | tr , x)
    prof s2_${r}_$tag $K2 $shape FLASHRS_TAIL_SPLIT=1; prof s3_${r}_$tag $K3 $shape FLASHRS_TAIL_SPLIT=1
  done
  prof s2_${r}_nosplit_2x8 $K2 2,8,2048,2048,64 FLASHRS_TAIL_SPLIT=0; prof s3_${r}_nosplit_2x8 $K3 2,8,2048,2048,64 FLASHRS_TAIL_SPLIT=0
done
cd /tmp/l && for f in ncu_*.log; do printf "%-50s" $f; for m in sm__cycles_elapsed.max gpu__time_duration.sum; do grep "\"$m\"" $f | head -1 | awk -F'","' '{printf " %s", $NF}' | tr -d '"'; done; echo; done | tee /tmp/j/ncu_summary.txt; cd - >/dev/null
s 200 bench $H bench --shape 2,8,2048,64 --shape 4,16,2048,64 --iters 60 --kernel $K2 --kernel $K3 --peers torch --json /tmp/j/bench.json
pack 6
