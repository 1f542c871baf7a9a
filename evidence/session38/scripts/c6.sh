# Session 38, call 6 (H200): s38e = s38a + the cross-warp merge's partial rows swizzled instead of
# padded (PTX fnv 933069ddf47af260; the only kernel change kept from the walk's build, whose grid-kernel rows
# ran 1.006-1.015x cuDNN at (8,32,1,8192) where session 37's kernels ran 0.993-0.994x). A/B in
# one call, ABAB: s37c's kernels (old) against s38e on three decode shapes, our pick only; then
# s38e's checks: the inference verify sets (LSE), 500 random problems, memcheck on splitkv.
GPU_DIR=.gpu/s38e source evidence/session35/scripts/common.sh
p() { pack 6 > /dev/null; }
mkdir -p /tmp/g_old/cubin; xz -dc .gpu/s38a/host.xz > /tmp/g_old/host; chmod +x /tmp/g_old/host
xz -dc .gpu/s37c/kernels_sm_90a.cubin.xz > /tmp/g_old/cubin/kernels_sm_90a.cubin; cp .gpu/s37c/kernels_sm_90a.ptx-fnv64 /tmp/g_old/cubin/
B="bench --shape 8,32,1,8192,128 --shape 64,32,1,2048,128 --shape 1,32,1,32768,128 --kernel flash_decode_m16_n128_w8_s3_mbarrier --rounds 3"
for i in 1 2; do
  FLASHRS_CUBIN_DIR=/tmp/g_old/cubin s 60 ab_old_$i /tmp/g_old/host $B --json /tmp/j/ab_old_$i.json
  s 60 ab_new_$i $H $B --json /tmp/j/ab_new_$i.json
  for v in old new; do echo "$v $i: $(grep -E '^flash_decode' /tmp/l/ab_${v}_$i.log | awk '{printf "%s ", $(NF-10)}')"; done
done
p
s 150 verify_inference $H verify --shapes splitkv,paged,varlen --lse --json /tmp/j/verify_inference_h200.json; p
tail -1 /tmp/l/verify_inference.log
s 100 verify_random $H verify --random 500 --json /tmp/j/verify_random_inference_h200.json; p
tail -1 /tmp/l/verify_random.log
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
s 90 san_memcheck $CS --tool memcheck --print-limit 20 $H verify --shapes splitkv --seed 7 --lse --kernel flash_decode_m16_n128_w8_s3_mbarrier --kernel flash_decode_m16_n64_w4_s2_mbarrier; p
for f in /tmp/l/*.log; do echo "$(basename $f): $(grep -E '^PASS|^FAIL|test result|ERROR SUMMARY' $f | tail -1)"; done
