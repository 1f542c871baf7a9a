# Session 21: unpack builds and define the run helpers. `use tN` points $H (host), $T (GPU test binary) and
# FLASHRS_CUBIN_DIR at build tN (found in .gpux/s2*/). Everything goes under /tmp/s21, emptied first.
set -u
rm -rf /tmp/s21 /tmp/l /tmp/j; mkdir -p /tmp/s21/g /tmp/l /tmp/j
src() { ls .gpux/s2*/$1.host.xz | head -1 | xargs dirname; }
unpack() { local b=$1 d=/tmp/s21/g/$1 f=$(src $1); [ -x $d/host ] && return; mkdir -p $d/cubin; xz -dc $f/$b.host.xz > $d/host; chmod +x $d/host; [ -f $f/$b.fp8test.xz ] && xz -dc $f/$b.fp8test.xz > $d/fp8test && chmod +x $d/fp8test; xz -dc $f/$b.cubin.xz > $d/cubin/kernels_sm_90a.cubin; cp $f/$b.fnv $d/cubin/kernels_sm_90a.ptx-fnv64; }
use() { unpack $1; export FLASHRS_CUBIN_DIR=/tmp/s21/g/$1/cubin; H=/tmp/s21/g/$1/host; F=/tmp/s21/g/$1/fp8test; }
s() { local t=$1 name=$2; shift 2; local t0=$(date +%s); timeout $t "$@" > /tmp/l/$name.log 2>&1; local rc=$?; echo "== $name rc=$rc $(( $(date +%s)-t0 ))s"; grep -E "^PASS|^FAIL|test result|ERROR SUMMARY|RACECHECK SUMMARY|panicked|error:|FAILED|failed" /tmp/l/$name.log | tail -3; }
pack() { cd /tmp/l && tar czf $OUT/logs$1.tgz *.log; cd /tmp/j && tar czf $OUT/json$1.tgz * 2>/dev/null; cd - >/dev/null; ls -la $OUT; }
