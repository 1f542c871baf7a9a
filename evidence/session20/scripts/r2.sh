# Session 20, call 2: checks of build t1 (flash_decode's merge in batches of 8 slices; the softmax's max chains
# started from their first registers): GPU tests, verify of every variant and the decode paths, random, repeat, sanitizers.
source .gpux/s20/common.sh
use t1
nvidia-smi --query-gpu=name --format=csv,noheader; sha256sum $H $FLASHRS_CUBIN_DIR/*
xz -dc .gpux/s20/t1.apitest.xz > /tmp/s20/g/api_gpu; chmod +x /tmp/s20/g/api_gpu
s 150 test_gpu $T --include-ignored --test-threads=1
s 90 test_api_gpu /tmp/s20/g/api_gpu --include-ignored --test-threads=1
DEC="--kernel flash_decode_m16_n128_w8_s3_mbarrier --kernel flash_decode_m16_n64_w4_s4_mbarrier --kernel flash_decode_m16_n128_w8_s3_light --kernel flash_decode_m32_n64_w4_s3_light"
s 120 verify_dec $H verify --shapes small,splitkv --lse --layout bhsd,bshd $DEC --json /tmp/j/verify_dec_t1.json
s 120 verify_dec_paged $H verify --shapes paged,varlen --lse --layout bhsd,bshd $DEC --json /tmp/j/verify_dec_paged_t1.json
s 150 verify_every $H verify --shapes small,odd,edge --lse --layout bhsd,bshd --json /tmp/j/verify_every_t1.json
s 120 random $H verify --random 1000 --json /tmp/j/verify_random_t1.json
s 60 repeat $H verify --repeat 250 --shapes small,odd,splitkv --shape 1,45,559,1157,64 --json /tmp/j/verify_repeat_t1.json
SD="--shape 1,8,3,5000,128 --heads-kv 2 --kernel flash_decode_m16_n128_w8_s3_mbarrier"
for tool in memcheck racecheck synccheck; do s 60 san_$tool compute-sanitizer --tool $tool $H verify --quick --seed 20 $SD; done
s 90 dec_splits_g16 $H tune --splits --shape 16,32,1,32768,128 --heads-kv 8 --split-counts 1,2,3,4 --json /tmp/j/dec_splits_g16_t1.json
s 60 dec_splits_d1 $H tune --splits --shape 1,32,1,32768,128 --split-counts 3,4,5,6 --json /tmp/j/dec_splits_d1_t1.json
pack 2
