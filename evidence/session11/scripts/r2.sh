# Session 11, call 2: c3 (c1 with the persistent order back to v16's, no 64-bit division; LSE tolerance) against base: causal and non-causal A/B, verify c3, tune the causal d128 buckets.
set -u
mkdir -p /tmp/l /tmp/j /tmp/t
for b in base c3; do mkdir -p /tmp/g/$b/cubin; xz -dc .gpux/s11/$b.host.xz > /tmp/g/$b/host; chmod +x /tmp/g/$b/host; xz -dc .gpux/s11/$b.cubin.xz > /tmp/g/$b/cubin/kernels_sm_90a.cubin; cp .gpux/s11/$b.fnv /tmp/g/$b/cubin/kernels_sm_90a.ptx-fnv64; done
s() { local t=$1 name=$2; shift 2; local t0=$(date +%s); timeout $t "$@" > /tmp/l/$name.log 2>&1; local rc=$?; echo "== $name rc=$rc $(( $(date +%s)-t0 ))s"; grep -E "^PASS|^FAIL|test result|ERROR SUMMARY|panicked|error:|FAILED|failed|best|saved|winner" /tmp/l/$name.log | tail -3; }
WS="--kernel flash_ws_m128_n176_s2_pp_ov_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n192_s3_ov_mbarrier --kernel flash_ws_m128_n80_s2_pp_ov_mbarrier"
C=/tmp/g/c3/host
export FLASHRS_CUBIN_DIR=/tmp/g/c3/cubin
s 150 verify_c3 $C verify $WS --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --kernel naive --lse --layout bhsd,bshd --json /tmp/j/verify_c3.json
s 100 random_c3 $C verify --random 300 $WS --json /tmp/j/random_c3.json
s 60 logit_lse_c3 $C verify --logit-scale 40 --shapes long --lse --kernel naive --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --json /tmp/j/logit_lse_c3.json
CS="--shapes large --causal --shape 2,16,4096,128 --shape 1,16,16384,128 --shape 4,16,2048,128"
NS="--shapes large --shape 2,16,4096,128 --shape 1,16,8192,128 --shape 2,16,4096,256"
for rep in 1 2 3; do for b in base c3; do
  export FLASHRS_CUBIN_DIR=/tmp/g/$b/cubin; H=/tmp/g/$b/host
  s 100 causal_${b}_$rep $H bench $WS $CS --iters 40 --json /tmp/j/causal_${b}_$rep.json
  [ $rep != 3 ] && s 100 plain_${b}_$rep $H bench $WS $NS --iters 40 --json /tmp/j/plain_${b}_$rep.json
done; done
export FLASHRS_CUBIN_DIR=/tmp/g/c3/cubin
cp tuned/h100.json /tmp/t/h100.json
for sh in 4,16,2048,128 2,16,4096,128 1,16,16384,128; do
  s 120 tune_$sh $C tune --causal --shape $sh --budget 12 --population 6 --save --table /tmp/t/h100.json --json /tmp/t/tune_$sh.json --log /tmp/t/tune_$sh.csv
done
cp /tmp/t/* /tmp/j/
cd /tmp/l && tar czf $OUT/logs2.tgz *.log; cd /tmp/j && tar czf $OUT/json2.tgz *.json *.csv; ls $OUT
