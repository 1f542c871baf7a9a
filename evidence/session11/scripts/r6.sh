# Session 11, call 6 (after the FA3 staging calls q1-q4, p4): install FA3; c6 (= c4's device code, the head-dim-64 dispatch on n128_pp_ov): the evidence bench with torch and FA3 (fp16, bf16), then verify.
set -u
mkdir -p /tmp/l /tmp/j
bash .gpux/s11/fa3_stage.sh > /tmp/l/fa4_install.log 2>&1; echo "fa4 rc=$?"; tail -1 /tmp/l/fa4_install.log
b=c6; mkdir -p /tmp/g/$b/cubin; xz -dc .gpux/s11/$b.host.xz > /tmp/g/$b/host; chmod +x /tmp/g/$b/host; xz -dc .gpux/s11/$b.cubin.xz > /tmp/g/$b/cubin/kernels_sm_90a.cubin; cp .gpux/s11/$b.fnv /tmp/g/$b/cubin/kernels_sm_90a.ptx-fnv64
s() { local t=$1 name=$2; shift 2; local t0=$(date +%s); timeout $t "$@" > /tmp/l/$name.log 2>&1; local rc=$?; echo "== $name rc=$rc $(( $(date +%s)-t0 ))s"; grep -E "^PASS|^FAIL|test result|ERROR SUMMARY|panicked|error:|FAILED|failed" /tmp/l/$name.log | tail -3; }
export FLASHRS_CUBIN_DIR=/tmp/g/c6/cubin PYTHONPATH=$(cat /tmp/fa4/pythonpath 2>/dev/null)
C=/tmp/g/c6/host
s 300 bench_f16 $C bench --shapes std --shape 2,16,4096,256 --peers torch,fa3 --iters 40 --json /tmp/j/bench_h100.json
s 200 bench_bf16 $C bench --shapes std --shape 2,16,4096,256 --dtype bf16 --peers torch,fa3 --iters 40 --json /tmp/j/bench_bf16_h100.json
s 240 verify $C verify --layout bhsd,bshd --lse --json /tmp/j/verify_h100.json
cd /tmp/l && tar czf $OUT/logs6.tgz *.log; cd /tmp/j && tar czf $OUT/json6.tgz *.json; ls $OUT
