# Session 16, call 4: t3 (the persistent twins listed and in the non-causal dispatch): verify every set of the two new picks, MQA + LSE, random, repeat, four sanitizers, the GPU tests.
rm -rf /tmp/l /tmp/j
B=t3 source .gpux/s16b/common.sh
for t in gpu api_gpu; do xz -dc .gpux/s16b/$t.xz > /tmp/g/$t; chmod +x /tmp/g/$t; done
PS="--kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier"
s 240 verify_all $H verify --layout bhsd,bshd --lse $PS --json /tmp/j/verify_ps_all_t3.json
s 120 verify_mqa $H verify --shapes small,odd,edge,splitkv --heads-kv 1 --lse --layout bhsd,bshd $PS --json /tmp/j/verify_ps_mqa_lse_t3.json
s 150 random $H verify --random 1000 $PS --json /tmp/j/verify_ps_random_t3.json
s 150 repeat $H verify --repeat 250 --shapes small,odd $PS --json /tmp/j/verify_ps_repeat_t3.json
for tool in memcheck racecheck synccheck initcheck; do s 120 san_$tool compute-sanitizer --tool $tool $H verify --quick --seed 16 $PS; done
s 200 test_gpu /tmp/g/gpu --include-ignored --test-threads=1
s 120 test_api_gpu /tmp/g/api_gpu --include-ignored --test-threads=1
pack 4
