# Session 39, call 2 (H200): s39b = s39a with the cut's model charging every block of a split
# cut its partial result (so (8,32,1,8192) is whole row blocks again, as in s38a), and the kernel
# skipping the slice-by-slice numbering's divisions when unsplit. PTX fnv 71281b508b136976.
# Checks of shapes whose cut is now uneven, A/B in one call (ABAB) against s38a on the decode
# set (pick only), the decode set with torch's backends, then the inference verify sets, random
# problems and memcheck.
GPU_DIR=.gpu/s39b source evidence/session35/scripts/common.sh
p() { pack 2 > /dev/null; }
mkdir -p /tmp/g_old/cubin; xz -dc .gpu/s38a/host.xz > /tmp/g_old/host; chmod +x /tmp/g_old/host
xz -dc .gpu/s38a/kernels_sm_90a.cubin.xz > /tmp/g_old/cubin/kernels_sm_90a.cubin; cp .gpu/s38a/kernels_sm_90a.ptx-fnv64 /tmp/g_old/cubin/
P="--kernel flash_decode_m16_n128_w8_s3_mbarrier"
s 100 verify_cut $H verify --shapes splitkv --shape 1,32,1,32768,128 --shape 2,32,1,32768,128 --masks none --dtype f16 --lse $P --json /tmp/j/verify_cut.json; p
tail -1 /tmp/l/verify_cut.log
s 100 verify_cut_gqa $H verify --shapes splitkv --heads-kv 8 --shape 16,32,1,32768,128 --masks none --dtype f16 --lse $P --json /tmp/j/verify_cut_gqa.json; p
tail -1 /tmp/l/verify_cut_gqa.log
B="bench --shapes decode $P --rounds 3"
for i in 1 2; do
  FLASHRS_CUBIN_DIR=/tmp/g_old/cubin s 90 ab_old_$i /tmp/g_old/host $B --json /tmp/j/ab_old_$i.json
  s 90 ab_new_$i $H $B --json /tmp/j/ab_new_$i.json
  for v in old new; do echo "$v $i: $(grep -E '^flash_decode' /tmp/l/ab_${v}_$i.log | awk '{printf "%s ", $(NF-10)}')"; done
  p
done
s 150 bench_torch $H bench --shapes decode $P --peers torch --rounds 3 --json /tmp/j/bench_torch.json; p
grep -A8 "speedup" /tmp/l/bench_torch.log | tail -7
s 150 verify_inference $H verify --shapes splitkv,paged,varlen --lse --json /tmp/j/verify_inference_h200.json; p
tail -1 /tmp/l/verify_inference.log
s 60 verify_random $H verify --random 300 --json /tmp/j/verify_random.json; p
tail -1 /tmp/l/verify_random.log
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
s 90 san_memcheck $CS --tool memcheck --print-limit 20 $H verify --shapes splitkv --seed 7 --lse $P --kernel flash_decode_m16_n64_w4_s2_mbarrier; p
for f in /tmp/l/*.log; do echo "$(basename $f): $(grep -E '^PASS|^FAIL|test result|ERROR SUMMARY' $f | tail -1)"; done
