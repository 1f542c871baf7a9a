# Session 36, call 2 (H200): s36b = s36a + three experimental flash_decode variants with more bytes
# in flight per SM (n64 x 6 stages: 160 KB; n48 x 9 and n32 x 13: 192 KB; the pick n128 x 3 keeps
# 128 KB in flight). Their verify (splitkv, paged, grouped heads; LSE, both layouts), then the
# decode set and its paged caches (16 and 256 keys per page) beside cuDNN, every copy-engine
# decode variant, one round.
GPU_DIR=.gpu/s36b source evidence/session35/scripts/common.sh
NEW="--kernel flash_decode_m16_n64_w4_s6_mbarrier --kernel flash_decode_m16_n48_w3_s9_mbarrier --kernel flash_decode_m16_n32_w2_s13_mbarrier"
s 150 verify_new $H verify --shapes splitkv,paged --lse --layout bhsd,bshd $NEW --json /tmp/j/verify_new.json
s 90 verify_new_gqa $H verify --shapes splitkv --heads-kv 2 --lse $NEW --json /tmp/j/verify_new_gqa.json
K="--kernel flash_decode_m16_n128_w8_s3_mbarrier --kernel flash_decode_m16_n64_w4_s4_mbarrier $NEW"
s 330 bench_inflight $H bench --shapes decode --block-size 16,256 --peers torch $K --rounds 1 --json /tmp/j/bench_inflight.json
grep -E "^(flash_decode|torch_cudnn)" /tmp/l/bench_inflight.log | sed -E 's/ +/ /g' | cut -d' ' -f1-12
pack 2
