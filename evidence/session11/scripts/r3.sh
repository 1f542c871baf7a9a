# Session 11, call 3: c4 (the causal order worked out where needed, not carried: the non-causal path as in v16) against base; the causal d128 candidates side by side; verify c4.
set -u
mkdir -p /tmp/l /tmp/j /tmp/t
for b in base c4; do mkdir -p /tmp/g/$b/cubin; xz -dc .gpux/s11/$b.host.xz > /tmp/g/$b/host; chmod +x /tmp/g/$b/host; xz -dc .gpux/s11/$b.cubin.xz > /tmp/g/$b/cubin/kernels_sm_90a.cubin; cp .gpux/s11/$b.fnv /tmp/g/$b/cubin/kernels_sm_90a.ptx-fnv64; done
s() { local t=$1 name=$2; shift 2; local t0=$(date +%s); timeout $t "$@" > /tmp/l/$name.log 2>&1; local rc=$?; echo "== $name rc=$rc $(( $(date +%s)-t0 ))s"; grep -E "^PASS|^FAIL|test result|ERROR SUMMARY|panicked|error:|FAILED|failed|best:|saved" /tmp/l/$name.log | tail -3; }
WS="--kernel flash_ws_m128_n176_s2_pp_ov_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n192_s3_ov_mbarrier --kernel flash_ws_m128_n80_s2_pp_ov_mbarrier"
CAND="--kernel flash_ws_m128_n176_s2_pp_ov_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n176_s2_ov_mbarrier --kernel flash_ws_m128_n128_s2_ov_mbarrier"
C=/tmp/g/c4/host
export FLASHRS_CUBIN_DIR=/tmp/g/c4/cubin
s 150 verify_c4 $C verify $WS --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n176_s2_ov_mbarrier --kernel flash_ws_m128_n128_s2_ov_mbarrier --kernel naive --lse --layout bhsd,bshd --json /tmp/j/verify_c4.json
s 100 random_c4 $C verify --random 300 $WS --json /tmp/j/random_c4.json
s 60 gqa_c4 $C verify $WS --heads-kv 2 --lse --shapes small,mission,long,odd --json /tmp/j/gqa_c4.json
CS="--shapes large --causal --shape 2,16,4096,128 --shape 1,16,8192,128 --shape 1,16,16384,128 --shape 4,16,2048,128"
NS="--shapes large --shape 4,16,2048,64 --shape 2,16,4096,64 --shape 2,16,4096,128"
for rep in 1 2 3; do for b in base c4; do
  export FLASHRS_CUBIN_DIR=/tmp/g/$b/cubin; H=/tmp/g/$b/host
  s 100 plain_${b}_$rep $H bench $WS $NS --iters 40 --json /tmp/j/plain_${b}_$rep.json
done; done
export FLASHRS_CUBIN_DIR=/tmp/g/c4/cubin
for rep in 1 2 3; do s 150 cand_c4_$rep $C bench $CAND $CS --iters 40 --json /tmp/j/cand_c4_$rep.json; done
cd /tmp/l && tar czf $OUT/logs3.tgz *.log; cd /tmp/j && tar czf $OUT/json3.tgz *.json; ls $OUT
