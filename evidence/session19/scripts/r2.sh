# Session 19, call 2: t1 (the tail split) checks: verify every default set of the two persistent flash_ws variants in both
# layouts and dtypes with LSE, MQA + LSE, 1,000 random problems, 250 repeats, the four sanitizers, the GPU tests.
source .gpux/s19/common.sh
use t1
nvidia-smi --query-gpu=name --format=csv,noheader; sha256sum $H $FLASHRS_CUBIN_DIR/*
xz -dc .gpux/s19/t1.apitest.xz > /tmp/s19/g/api_gpu; chmod +x /tmp/s19/g/api_gpu
PS="--kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier"
s 150 verify_all $H verify --layout bhsd,bshd --lse $PS --json /tmp/j/verify_ps_all_t1.json
s 90 verify_mqa $H verify --shapes small,odd,edge,splitkv,large --heads-kv 1 --lse --layout bhsd,bshd $PS --json /tmp/j/verify_ps_mqa_lse_t1.json
s 120 random $H verify --random 1000 $PS --json /tmp/j/verify_ps_random_t1.json
s 60 repeat $H verify --repeat 250 --shapes small,odd --shape 1,45,559,1157,64 $PS --json /tmp/j/verify_ps_repeat_t1.json
for tool in memcheck racecheck synccheck initcheck; do s 90 san_$tool compute-sanitizer --tool $tool $H verify --quick --seed 19 --shape 1,45,559,1157,64 $PS; done
pack 2 > /dev/null
s 150 test_gpu $T --include-ignored --test-threads=1
s 90 test_api_gpu /tmp/s19/g/api_gpu --include-ignored --test-threads=1
pack 2
