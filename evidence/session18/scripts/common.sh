# Session 18: unpack builds and define the run helpers. `use tN` points $H and FLASHRS_CUBIN_DIR at build tN.
# Everything goes under /tmp/s18, emptied first, so that no earlier run's files can stand in for this one's.
set -u
rm -rf /tmp/s18 /tmp/l /tmp/j; mkdir -p /tmp/s18/g /tmp/l /tmp/j
unpack() { local b=$1 d=/tmp/s18/g/$1; [ -x $d/host ] && return; mkdir -p $d/cubin; xz -dc .gpux/s18/$b.host.xz > $d/host; chmod +x $d/host; xz -dc .gpux/s18/$b.cubin.xz > $d/cubin/kernels_sm_90a.cubin; cp .gpux/s18/$b.fnv $d/cubin/kernels_sm_90a.ptx-fnv64; }
use() { unpack $1; export FLASHRS_CUBIN_DIR=/tmp/s18/g/$1/cubin; H=/tmp/s18/g/$1/host; }
s() { local t=$1 name=$2; shift 2; local t0=$(date +%s); timeout $t "$@" > /tmp/l/$name.log 2>&1; local rc=$?; echo "== $name rc=$rc $(( $(date +%s)-t0 ))s"; grep -E "^PASS|^FAIL|test result|ERROR SUMMARY|RACECHECK SUMMARY|panicked|error:|FAILED|failed" /tmp/l/$name.log | tail -3; }
pack() { cd /tmp/l && tar czf $OUT/logs$1.tgz *.log; cd /tmp/j && tar czf $OUT/json$1.tgz * 2>/dev/null; cd - >/dev/null; ls -la $OUT; }
