# Session 39, call 1 (H200): s39a = the balanced key cut (the split heuristic models the block
# scheduler; slices may end short; the kernel deals its blocks slice by slice), PTX fnv
# 7c9d2af9f9d17536. First its checks on the shapes whose cut changed, then an A/B in one call,
# ABAB, against s38a (session 37's kernels, even cuts) on the decode set (pick only), then the
# decode set with torch's backends, the inference verify sets, random problems and memcheck.
GPU_DIR=.gpu/s39a source evidence/session35/scripts/common.sh
p() { pack 1 > /dev/null; }
mkdir -p /tmp/g_old/cubin; xz -dc .gpu/s38a/host.xz > /tmp/g_old/host; chmod +x /tmp/g_old/host
xz -dc .gpu/s38a/kernels_sm_90a.cubin.xz > /tmp/g_old/cubin/kernels_sm_90a.cubin; cp .gpu/s38a/kernels_sm_90a.ptx-fnv64 /tmp/g_old/cubin/
P="--kernel flash_decode_m16_n128_w8_s3_mbarrier"
s 150 verify_cut $H verify --shapes decode --lse $P --json /tmp/j/verify_cut.json; p
tail -3 /tmp/l/verify_cut.log
B="bench --shapes decode $P --rounds 3"
for i in 1 2; do
  FLASHRS_CUBIN_DIR=/tmp/g_old/cubin s 90 ab_old_$i /tmp/g_old/host $B --json /tmp/j/ab_old_$i.json
  s 90 ab_new_$i $H $B --json /tmp/j/ab_new_$i.json
  for v in old new; do echo "$v $i: $(grep -E '^flash_decode' /tmp/l/ab_${v}_$i.log | awk '{printf "%s ", $(NF-10)}')"; done
  p
done
s 150 bench_torch $H bench --shapes decode $P --peers torch --rounds 3 --json /tmp/j/bench_torch.json; p
grep -A8 "speedup" /tmp/l/bench_torch.log | tail -8
s 150 verify_inference $H verify --shapes splitkv,paged,varlen --lse --json /tmp/j/verify_inference_h200.json; p
tail -1 /tmp/l/verify_inference.log
s 60 verify_random $H verify --random 300 --json /tmp/j/verify_random.json; p
tail -1 /tmp/l/verify_random.log
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
s 90 san_memcheck $CS --tool memcheck --print-limit 20 $H verify --shapes splitkv --seed 7 --lse $P --kernel flash_decode_m16_n64_w4_s2_mbarrier; p
for f in /tmp/l/*.log; do echo "$(basename $f): $(grep -E '^PASS|^FAIL|test result|ERROR SUMMARY' $f | tail -1)"; done
