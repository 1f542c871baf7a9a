# Session 44, call 5 (H200): s44e = HEAD + an L2 evict-first hint on the decode kernels' K and V
# copies (`createpolicy.fractional.L2::evict_first`, `.L2::cache_hint` on the copy engine's loads;
# only the four copy-engine `flash_decode` variants' SASS differs from HEAD's). s44d's binaries
# (= HEAD for every decode kernel) travel in .gpu/s44e/old. (a) verify of the decode sets with LSE
# on s44e; (b) the decode set with torch's backends, old and new alternated twice.
GPU_DIR=.gpu/s44e source .gpu/s44e/common.sh
p() { pack 5 > /dev/null; }
mkdir -p /tmp/go/cubin; xz -dc .gpu/s44e/old/host.xz > /tmp/go/host; chmod +x /tmp/go/host
xz -dc .gpu/s44e/old/kernels_sm_90a.cubin.xz > /tmp/go/cubin/kernels_sm_90a.cubin; cp .gpu/s44e/old/kernels_sm_90a.ptx-fnv64 /tmp/go/cubin/
s 150 verify $H verify --shapes splitkv,paged --lse --kernel flash_decode_m16_n128_w8_s3_mbarrier --kernel flash_decode_m16_n64_w4_s3_mbarrier --json /tmp/j/verify.json; p
K="--shapes decode --kernel flash_decode_m16_n128_w8_s3_mbarrier --peers torch"
for r in 1 2; do
  FLASHRS_CUBIN_DIR=/tmp/go/cubin s 150 old_$r /tmp/go/host bench $K --json /tmp/j/old_$r.json; p
  s 150 new_$r $H bench $K --json /tmp/j/new_$r.json; p
done
grep -hE "^test result|^PASS|^FAIL|SUMMARY" /tmp/l/*.log | sort | uniq -c
for f in old_1 new_1 old_2 new_2; do echo "== $f"; grep -A8 "speedup" /tmp/l/$f.log | awk '{print $1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12}'; done
