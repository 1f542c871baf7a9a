# Session 18, call 3: t3 (the committed kernels: at head dim 128 the overlapped loop waits for the last P V after 16 registers of exponentials): verify every set of the two head-dim-128 picks in both layouts and dtypes with LSE, MQA + LSE, 1,000 random problems, 250 repeats, the four sanitizers, FP8 verify, the GPU tests.
# (Run twice, the second time with the builds unpacked into a fresh /tmp/s18 and their hashes printed: the same results; these files are the second run.)
source .gpux/s18/common.sh
use t3
nvidia-smi --query-gpu=name --format=csv,noheader; sha256sum $H $FLASHRS_CUBIN_DIR/*
for t in gpu api_gpu; do xz -dc .gpux/s18/$t.xz > /tmp/s18/g/$t; chmod +x /tmp/s18/g/$t; done
PS="--kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier"
s 150 verify_all $H verify --layout bhsd,bshd --lse $PS --json /tmp/j/verify_d128_all_t3.json
s 90 verify_mqa $H verify --shapes small,odd,edge,splitkv --heads-kv 1 --lse --layout bhsd,bshd $PS --json /tmp/j/verify_d128_mqa_lse_t3.json
s 100 random $H verify --random 1000 $PS --json /tmp/j/verify_d128_random_t3.json
s 60 repeat $H verify --repeat 250 --shapes small,odd $PS --json /tmp/j/verify_d128_repeat_t3.json
s 60 verify_fp8 $H verify --dtype e4m3 --lse --layout bhsd,bshd --json /tmp/j/verify_fp8_t3.json
for tool in memcheck racecheck synccheck initcheck; do s 90 san_$tool compute-sanitizer --tool $tool $H verify --quick --seed 18 $PS; done
pack 3 > /dev/null
s 150 test_gpu /tmp/s18/g/gpu --include-ignored --test-threads=1
s 90 test_api_gpu /tmp/s18/g/api_gpu --include-ignored --test-threads=1
pack 3
