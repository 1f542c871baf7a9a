# Session 44, call 6 (H200): s44f = HEAD + v62, the decode kernels' K and V copies with an L2
# policy (evict-first where the KV head's packed rows make one row block, so every byte is read
# once; the usual priority otherwise); only the four copy-engine `flash_decode` variants' SASS
# differs from HEAD's. s44d's binaries (= HEAD for every decode kernel) travel in .gpu/s44f/old.
# (a) verify of the decode picks on the splitkv, paged and varlen sets with LSE; the gpu and
# api_gpu tests; memcheck of the pick on the paged set; (b) the decode set with pages of 16 and
# 256 keys and torch's backends, old and new alternated twice.
GPU_DIR=.gpu/s44f source .gpu/s44f/common.sh
p() { pack 6 > /dev/null; }
mkdir -p /tmp/go/cubin; xz -dc .gpu/s44f/old/host.xz > /tmp/go/host; chmod +x /tmp/go/host
xz -dc .gpu/s44f/old/kernels_sm_90a.cubin.xz > /tmp/go/cubin/kernels_sm_90a.cubin; cp .gpu/s44f/old/kernels_sm_90a.ptx-fnv64 /tmp/go/cubin/
D="--kernel flash_decode_m16_n128_w8_s3_mbarrier --kernel flash_decode_m16_n64_w4_s3_mbarrier"
s 150 verify $H verify --shapes splitkv,paged,varlen --lse $D --json /tmp/j/verify.json; p
K="--shapes decode --block-size 16,256 --kernel flash_decode_m16_n128_w8_s3_mbarrier --peers torch"
for r in 1 2; do
  FLASHRS_CUBIN_DIR=/tmp/go/cubin s 120 old_$r /tmp/go/host bench $K --json /tmp/j/old_$r.json; p
  s 120 new_$r $H bench $K --json /tmp/j/new_$r.json; p
done
s 150 test_gpu /tmp/g/tests/gpu --include-ignored --test-threads 1; p
s 90 test_api_gpu /tmp/g/tests/api_gpu --include-ignored --test-threads 1; p
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
s 100 san_memcheck $CS --tool memcheck --print-limit 20 $H verify --shapes paged --kernel flash_decode_m16_n128_w8_s3_mbarrier --seed 7; p
grep -hE "^test result|^PASS|^FAIL|SUMMARY" /tmp/l/*.log | sort | uniq -c
for f in old_1 new_1 old_2 new_2; do echo "== $f"; grep -A8 "speedup" /tmp/l/$f.log | awk '{print $1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12}'; grep -E "^note: paged" /tmp/l/$f.log | sed 's/^note: //' | cut -c1-150; done
