# Session 37, call 2 (H200): s37a = HEAD + paged boxes of whole rows (one copy per page and tensor
# instead of one per page and 64 columns: at 16 keys per page and D=128, 16 boxes of 4 KB per
# 128-key tile instead of 32 of 2 KB) + bench's varlen batch timed beside its dense cases.
# Predicted from c1's 32-key pages: 16-key pages near c1's 32-key times (the pick 0.95-0.97x the
# contiguous cache at the decode shapes, from 0.85-0.95x). Verify the paged set (LSE, both
# layouts, grouped heads) for the three copy-engine decode variants, then the decode set on pages
# of 16..256 keys, then s36e's 16- and 32-key rows again in this call (A/B on one machine).
GPU_DIR=.gpu/s37a source evidence/session35/scripts/common.sh
KS="--kernel flash_decode_m16_n128_w8_s3_mbarrier --kernel flash_decode_m16_n64_w4_s3_mbarrier --kernel flash_decode_m16_n64_w4_s2_mbarrier"
s 200 verify_paged $H verify --shapes paged --lse --layout bhsd,bshd $KS --json /tmp/j/verify_paged.json
s 100 verify_paged_gqa $H verify --shapes paged --heads-kv 2 --lse $KS --json /tmp/j/verify_paged_gqa.json
s 300 bench_new $H bench --shapes decode --block-size 16,32,64,256 $KS --rounds 1 --json /tmp/j/bench_new.json
mkdir -p /tmp/g_old/cubin && xz -dc .gpu/s36e/host.xz > /tmp/g_old/host && chmod +x /tmp/g_old/host && xz -dc .gpu/s36e/kernels_sm_90a.cubin.xz > /tmp/g_old/cubin/kernels_sm_90a.cubin && cp .gpu/s36e/kernels_sm_90a.ptx-fnv64 /tmp/g_old/cubin/
FLASHRS_CUBIN_DIR=/tmp/g_old/cubin s 200 bench_old /tmp/g_old/host bench --shapes decode --block-size 16,32 $KS --rounds 1 --json /tmp/j/bench_old.json
for f in new old; do echo "== $f"; grep -E "^flash_decode" /tmp/l/bench_$f.log | sed -E 's/ +/ /g' | cut -d' ' -f1-9; done
pack 2
