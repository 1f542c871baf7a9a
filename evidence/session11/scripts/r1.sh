# Session 11, call 1: c1 (causal blocks longest first in L2-sized head groups; n192_s3_ov_ps d64) against base (v16 = s4); verify c1.
set -u
mkdir -p /tmp/l /tmp/j
for b in base c1; do mkdir -p /tmp/g/$b/cubin; xz -dc .gpux/s11/$b.host.xz > /tmp/g/$b/host; chmod +x /tmp/g/$b/host; xz -dc .gpux/s11/$b.cubin.xz > /tmp/g/$b/cubin/kernels_sm_90a.cubin; cp .gpux/s11/$b.fnv /tmp/g/$b/cubin/kernels_sm_90a.ptx-fnv64; done
s() { local t=$1 name=$2; shift 2; local t0=$(date +%s); timeout $t "$@" > /tmp/l/$name.log 2>&1; local rc=$?; echo "== $name rc=$rc $(( $(date +%s)-t0 ))s"; grep -E "^PASS|^FAIL|test result|ERROR SUMMARY|panicked|error:|FAILED|all pass|failed" /tmp/l/$name.log | tail -3; }
WS="--kernel flash_ws_m128_n176_s2_pp_ov_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n192_s3_ov_mbarrier --kernel flash_ws_m128_n80_s2_pp_ov_mbarrier"
PS="--kernel flash_ws_m128_n192_s3_ov_ps_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n176_s2_pp_ov_ps_mbarrier"
C=/tmp/g/c1/host
export FLASHRS_CUBIN_DIR=/tmp/g/c1/cubin
s 150 verify_c1 $C verify $WS $PS --kernel naive --lse --layout bhsd,bshd --json /tmp/j/verify_c1.json
s 100 verify_gqa_c1 $C verify $WS $PS --heads-kv 2 --lse --shapes small,mission,long --json /tmp/j/verify_gqa_c1.json
s 100 random_c1 $C verify --random 150 $WS $PS --json /tmp/j/random_c1.json
s 60 logit_lse_c1 $C verify --logit-scale 40 --shapes long --lse --kernel naive --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier
CS="--shapes large --causal --shape 2,16,4096,128 --shape 1,16,16384,128 --shape 2,16,4096,64 --shape 4,16,2048,128"
NS="--shapes large --shape 4,16,2048,64 --shape 2,16,4096,64"
for rep in 1 2; do for b in base c1; do
  export FLASHRS_CUBIN_DIR=/tmp/g/$b/cubin; H=/tmp/g/$b/host
  K="$WS"; [ $b = c1 ] && K="$WS $PS"
  s 150 causal_${b}_$rep $H bench $K $CS --iters 40 --json /tmp/j/causal_${b}_$rep.json
  [ $rep = 1 ] && s 100 d64_${b} $H bench $K $NS --iters 40 --json /tmp/j/d64_${b}.json
done; done
cd /tmp/l && tar czf $OUT/logs1.tgz *.log; cd /tmp/j && tar czf $OUT/json1.tgz *.json; ls $OUT
