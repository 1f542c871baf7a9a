# Session 11, call 4 (after the FA3 staging calls): install FA3; A/B base / c4 / c5 non-causal and causal; c5's evidence bench with torch and FA3 (fp16, bf16).
set -u
mkdir -p /tmp/l /tmp/j
bash .gpux/s11/fa3_stage.sh > /tmp/l/fa4_install.log 2>&1; echo "fa4 rc=$?"; tail -1 /tmp/l/fa4_install.log
for b in base c4 c5; do mkdir -p /tmp/g/$b/cubin; xz -dc .gpux/s11/$b.host.xz > /tmp/g/$b/host; chmod +x /tmp/g/$b/host; xz -dc .gpux/s11/$b.cubin.xz > /tmp/g/$b/cubin/kernels_sm_90a.cubin; cp .gpux/s11/$b.fnv /tmp/g/$b/cubin/kernels_sm_90a.ptx-fnv64; done
s() { local t=$1 name=$2; shift 2; local t0=$(date +%s); timeout $t "$@" > /tmp/l/$name.log 2>&1; local rc=$?; echo "== $name rc=$rc $(( $(date +%s)-t0 ))s"; grep -E "^PASS|^FAIL|test result|ERROR SUMMARY|panicked|error:|FAILED|failed" /tmp/l/$name.log | tail -3; }
WS="--kernel flash_ws_m128_n176_s2_pp_ov_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n192_s3_ov_mbarrier --kernel flash_ws_m128_n80_s2_pp_ov_mbarrier"
NS="--shapes large --shape 4,16,2048,64 --shape 2,16,4096,64 --shape 2,16,4096,128"
CS="--shapes large --causal --shape 2,16,4096,128 --shape 1,16,16384,128"
for rep in 1 2 3; do for b in base c4 c5; do
  export FLASHRS_CUBIN_DIR=/tmp/g/$b/cubin; H=/tmp/g/$b/host
  s 100 plain_${b}_$rep $H bench $WS $NS --iters 40 --json /tmp/j/plain_${b}_$rep.json
  [ $rep != 3 ] && s 100 causal_${b}_$rep $H bench $WS $CS --iters 40 --json /tmp/j/causal_${b}_$rep.json
done; done
export FLASHRS_CUBIN_DIR=/tmp/g/c5/cubin PYTHONPATH=$(cat /tmp/fa4/pythonpath 2>/dev/null)
C=/tmp/g/c5/host
s 300 bench_f16 $C bench --shapes std --shape 2,16,4096,256 --peers torch,fa3 --iters 40 --json /tmp/j/bench_h100.json
s 200 bench_bf16 $C bench --shapes std --shape 2,16,4096,256 --dtype bf16 --peers torch,fa3 --iters 40 --json /tmp/j/bench_bf16_h100.json
cd /tmp/l && tar czf $OUT/logs4.tgz *.log; cd /tmp/j && tar czf $OUT/json4.tgz *.json; ls $OUT
