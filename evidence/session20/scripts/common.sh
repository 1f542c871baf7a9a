# Session 20: unpack builds and define the run helpers. `use tN` points $H (host), $T (GPU test binary) and
# FLASHRS_CUBIN_DIR at build tN. Everything goes under /tmp/s20, emptied first.
set -u
rm -rf /tmp/s20 /tmp/l /tmp/j; mkdir -p /tmp/s20/g /tmp/l /tmp/j
unpack() { local b=$1 d=/tmp/s20/g/$1; [ -x $d/host ] && return; mkdir -p $d/cubin; xz -dc .gpux/s20/$b.host.xz > $d/host; chmod +x $d/host; [ -f .gpux/s20/$b.gputest.xz ] && xz -dc .gpux/s20/$b.gputest.xz > $d/gputest && chmod +x $d/gputest; xz -dc .gpux/s20/$b.cubin.xz > $d/cubin/kernels_sm_90a.cubin; cp .gpux/s20/$b.fnv $d/cubin/kernels_sm_90a.ptx-fnv64; }
use() { unpack $1; export FLASHRS_CUBIN_DIR=/tmp/s20/g/$1/cubin; H=/tmp/s20/g/$1/host; T=/tmp/s20/g/$1/gputest; }
s() { local t=$1 name=$2; shift 2; local t0=$(date +%s); timeout $t "$@" > /tmp/l/$name.log 2>&1; local rc=$?; echo "== $name rc=$rc $(( $(date +%s)-t0 ))s"; grep -E "^PASS|^FAIL|test result|ERROR SUMMARY|RACECHECK SUMMARY|panicked|error:|FAILED|failed" /tmp/l/$name.log | tail -3; }
pack() { cd /tmp/l && tar czf $OUT/logs$1.tgz *.log; cd /tmp/j && tar czf $OUT/json$1.tgz * 2>/dev/null; cd - >/dev/null; ls -la $OUT; }
