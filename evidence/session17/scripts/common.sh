# Session 17: unpack build $B (default t0) and define the run helper.
set -u
B=${B:-t0}
mkdir -p /tmp/l /tmp/j
mkdir -p /tmp/g/$B/cubin; xz -dc .gpux/s17/$B.host.xz > /tmp/g/$B/host; chmod +x /tmp/g/$B/host; xz -dc .gpux/s17/$B.cubin.xz > /tmp/g/$B/cubin/kernels_sm_90a.cubin; cp .gpux/s17/$B.fnv /tmp/g/$B/cubin/kernels_sm_90a.ptx-fnv64
s() { local t=$1 name=$2; shift 2; local t0=$(date +%s); timeout $t "$@" > /tmp/l/$name.log 2>&1; local rc=$?; echo "== $name rc=$rc $(( $(date +%s)-t0 ))s"; grep -E "^PASS|^FAIL|test result|ERROR SUMMARY|panicked|error:|FAILED|failed" /tmp/l/$name.log | tail -3; }
export FLASHRS_CUBIN_DIR=/tmp/g/$B/cubin; H=/tmp/g/$B/host
pack() { cd /tmp/l && tar czf $OUT/logs$1.tgz *.log; cd /tmp/j && tar czf $OUT/json$1.tgz * 2>/dev/null; cd - >/dev/null; ls -la $OUT; }
