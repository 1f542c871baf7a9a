# Session 29, call 4 (H100): the checks of s29b (v43) beside call 3's: the persistent picks on the
# small, odd, edge and mission sets (both masks, LSE), --repeat bit-identical over split
# launches, e4m3 split, flash_decode's split and paged sets (its merge's fences changed), the
# gpu tests; then flash_decode's bench against s28e.
GPU_DIR=.gpu/s29b source evidence/session29/scripts/common.sh
mkdir -p /tmp/ga/cubin && xz -dc .gpu/s28e/host.xz > /tmp/ga/host && chmod +x /tmp/ga/host
xz -dc .gpu/s28e/kernels_sm_90a.cubin.xz > /tmp/ga/cubin/kernels_sm_90a.cubin && cp .gpu/s28e/kernels_sm_90a.ptx-fnv64 /tmp/ga/cubin/
A="env FLASHRS_CUBIN_DIR=/tmp/ga/cubin /tmp/ga/host"
K192=flash_ws_m192_n128_s2_pp_ov_ps_mbarrier; K128P=flash_ws_m128_n128_s2_pp_ov_ps_mbarrier
KD1=flash_decode_m16_n128_w8_s3_mbarrier; KD2=flash_decode_m16_n64_w4_s4_mbarrier
S64="--shape 1,133,192,4096,64 --shape 1,134,192,1152,64 --shape 2,8,2048,64 --shape 1,134,192,1100,64"
S128="--shape 1,133,128,4096,128 --shape 1,134,128,1100,128 --shape 1,133,128,1000,128"
s 200 verify_persistent $H verify --kernel $K192 --kernel $K128P --lse --shapes small,odd,edge,mission --masks both --json /tmp/j/verify_persistent.json
s 200 repeat_split $H verify --kernel $K192 --kernel $K128P --repeat 10 --shapes small $S64 $S128 --json /tmp/j/repeat_split.json
s 120 verify_fp8 $H verify --dtype e4m3 --lse --shape 1,136,128,4096,128 --shape 2,8,2048,128 --json /tmp/j/verify_fp8.json
s 200 verify_decode $H verify --kernel $KD1 --kernel $KD2 --kernel flash_decode_m16_n64_w4_s3_light --lse --shapes splitkv,decode,paged --json /tmp/j/verify_decode.json
s 300 test_gpu /tmp/g/tests/gpu --include-ignored --test-threads 1
D="bench --shapes decode --iters 60 --kernel $KD1 --kernel $KD2"
s 150 dec_b1 $H $D --json /tmp/j/dec_b1.json
s 150 dec_a1 $A $D --json /tmp/j/dec_a1.json
for f in /tmp/l/dec_*.log; do echo "## $f"; grep -E "^flash_decode" $f | awk "{print \$1,\$2,\$3,\$4,\$5,\$6,\$7}" | head -24; done
K192=flash_ws_m192_n128_s2_pp_ov_ps_mbarrier
for r in 1 2; do
  s 60 tra$r $A trace --kernel $K192 --shape 2,8,2048,64 --json /tmp/j/tra$r.json
  s 60 trb$r $H trace --kernel $K192 --shape 2,8,2048,64 --json /tmp/j/trb$r.json
done
for f in /tmp/l/tr*.log; do echo "## $f"; sed -n 3,6p $f; done
pack 4
