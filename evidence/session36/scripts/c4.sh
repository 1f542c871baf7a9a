# Session 36, call 4 (H200): s36c = s36a + two experimental flash_decode variants of 64-key tiles
# that share an SM (4 warps; 3 stages: 104 KB, two blocks per SM; 2 stages: 71 KB, three), as
# cuDNN's decode kernel does (c3: two 4-warp blocks of 86 KB per SM, 95% of DRAM's peak against
# our 88-90%). Their verify (splitkv, paged, grouped heads; LSE, both layouts), then the decode
# set and its paged caches (16 and 256 keys per page) beside cuDNN and the pick, one round.
GPU_DIR=.gpu/s36c source evidence/session35/scripts/common.sh
NEW="--kernel flash_decode_m16_n64_w4_s3_mbarrier --kernel flash_decode_m16_n64_w4_s2_mbarrier"
s 150 verify_new $H verify --shapes splitkv,paged --lse --layout bhsd,bshd $NEW --json /tmp/j/verify_new.json
s 90 verify_new_gqa $H verify --shapes splitkv --heads-kv 2 --lse $NEW --json /tmp/j/verify_new_gqa.json
K="--kernel flash_decode_m16_n128_w8_s3_mbarrier $NEW"
s 300 bench_shared_sm $H bench --shapes decode --block-size 16,256 --peers torch $K --rounds 1 --json /tmp/j/bench_shared_sm.json
grep -E "^(flash_decode|torch_cudnn)" /tmp/l/bench_shared_sm.log | sed -E 's/ +/ /g' | cut -d' ' -f1-12 | grep -v "3657\|8793\|2048, 64\|2048, 128\]"
pack 4
