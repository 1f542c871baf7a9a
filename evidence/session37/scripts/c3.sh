# Session 37, call 3 (H200): s37b = s37a + the producer looks a paged tile's page numbers up a
# tile before it issues the tile (c2 showed the 16-key pages barely faster with half the boxes:
# 552 against 561 us at (64,32,1,2048); the PTX showed the lookups stored to a local array right
# after their loads, so the producer waited out every lookup before the slot wait, every tile).
# Predicted: 16-key pages near the 32/64-key times (about 490 us there). Verify the paged set
# again, then the decode set on 16-, 32- and 256-key pages, then s37a's 16-key rows (A/B).
GPU_DIR=.gpu/s37b source evidence/session35/scripts/common.sh
KS="--kernel flash_decode_m16_n128_w8_s3_mbarrier --kernel flash_decode_m16_n64_w4_s3_mbarrier --kernel flash_decode_m16_n64_w4_s2_mbarrier"
s 200 verify_paged $H verify --shapes paged --lse --layout bhsd,bshd $KS --json /tmp/j/verify_paged.json
s 100 verify_paged_gqa $H verify --shapes paged --heads-kv 2 --lse $KS --json /tmp/j/verify_paged_gqa.json
s 300 bench_new $H bench --shapes decode --block-size 16,32,256 $KS --rounds 1 --json /tmp/j/bench_new.json
mkdir -p /tmp/g_old/cubin && xz -dc .gpu/s37a/host.xz > /tmp/g_old/host && chmod +x /tmp/g_old/host && xz -dc .gpu/s37a/kernels_sm_90a.cubin.xz > /tmp/g_old/cubin/kernels_sm_90a.cubin && cp .gpu/s37a/kernels_sm_90a.ptx-fnv64 /tmp/g_old/cubin/
FLASHRS_CUBIN_DIR=/tmp/g_old/cubin s 200 bench_old /tmp/g_old/host bench --shapes decode --block-size 16 $KS --rounds 1 --json /tmp/j/bench_old.json
for f in new old; do echo "== $f"; grep -E "^flash_decode.*paged" /tmp/l/bench_$f.log | sed -E 's/ +/ /g' | cut -d' ' -f1-9,11-13; done
pack 3
