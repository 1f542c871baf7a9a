# Session 19, call 3: t2 (the tail split, its merge in the slices' order): the GPU tests, verify of every default set of the
# two persistent flash_ws variants (both layouts and dtypes, LSE), MQA + LSE, 1,000 random problems, 250 bit-identical
# repeats (a split shape among them), the four sanitizers on a split shape, every variant on the small/odd/edge sets;
# then split off / on at head dim 64 in bf16 with cuDNN.
source .gpux/s19/common.sh
use t2
nvidia-smi --query-gpu=name --format=csv,noheader; sha256sum $H $FLASHRS_CUBIN_DIR/*
xz -dc .gpux/s19/t2.apitest.xz > /tmp/s19/g/api_gpu; chmod +x /tmp/s19/g/api_gpu
s 60 gputest_split $T --ignored --exact persistent_tail_split_matches_the_reference --test-threads 1
PS="--kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier"
SP="--shape 1,45,559,1157,64"
s 60 repeat $H verify --repeat 250 --shapes small,odd $SP $PS --json /tmp/j/verify_ps_repeat_t2.json
s 150 verify_all $H verify --layout bhsd,bshd --lse $PS --json /tmp/j/verify_ps_all_t2.json
s 90 verify_mqa $H verify --shapes small,odd,edge,splitkv,large --heads-kv 1 --lse --layout bhsd,bshd $PS --json /tmp/j/verify_ps_mqa_lse_t2.json
s 120 random $H verify --random 1000 $PS --json /tmp/j/verify_ps_random_t2.json
s 120 verify_every $H verify --shapes small,odd,edge --lse --layout bhsd,bshd --json /tmp/j/verify_every_t2.json
for tool in memcheck racecheck synccheck initcheck; do s 90 san_$tool compute-sanitizer --tool $tool $H verify --quick --seed 19 $SP $PS; done
pack 3 > /dev/null
s 150 test_gpu $T --include-ignored --test-threads=1
s 90 test_api_gpu /tmp/s19/g/api_gpu --include-ignored --test-threads=1
K="--kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier"
S="--shape 4,16,2048,64 --shape 2,16,4096,64 --shape 1,16,8192,64"
for sw in 0 1; do FLASHRS_TAIL_SPLIT=$sw s 120 ab_bf16_s$sw $H bench $S $K --dtype bf16 --iters 60 --peers torch --json /tmp/j/ab_bf16_s$sw.json; done
pack 3
