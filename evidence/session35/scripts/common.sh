# Session 35: the run helpers on the GPU machine (as session 24's). `s SECONDS NAME CMD...` runs
# one step into /tmp/l/NAME.log and prints its status line; `pack N` archives the logs and JSON
# into $OUT. The binaries travel xz-compressed in $GPU_DIR (default .gpu/s35a) and are unpacked
# into /tmp/g.
set -u
GPU_DIR=${GPU_DIR:-.gpu/s35a}
rm -rf /tmp/l /tmp/j; mkdir -p /tmp/l /tmp/j /tmp/g/cubin /tmp/g/tests
for f in $GPU_DIR/*.xz; do
  n=$(basename $f .xz)
  case $n in
    kernels_sm_90a.cubin) xz -dc $f > /tmp/g/cubin/$n ;;
    host) xz -dc $f > /tmp/g/host; chmod +x /tmp/g/host ;;
    *) xz -dc $f > /tmp/g/tests/$n; chmod +x /tmp/g/tests/$n ;;
  esac
done
cp $GPU_DIR/kernels_sm_90a.ptx-fnv64 /tmp/g/cubin/
export FLASHRS_CUBIN_DIR=/tmp/g/cubin
H=/tmp/g/host
s() { local t=$1 name=$2; shift 2; local t0=$(date +%s); timeout $t "$@" > /tmp/l/$name.log 2>&1; local rc=$?; echo "== $name rc=$rc $(( $(date +%s)-t0 ))s"; grep -E "^PASS|^FAIL|test result|ERROR SUMMARY|RACECHECK SUMMARY|panicked|error:|FAILED|failed" /tmp/l/$name.log | tail -3; }
pack() { cd /tmp/l && tar czf $OUT/logs$1.tgz *.log; cd /tmp/j && tar czf $OUT/json$1.tgz * 2>/dev/null; cd - >/dev/null; ls -la $OUT; }
