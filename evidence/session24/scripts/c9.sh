# Session 24, call 9: the final tree's host (s24c: launch_with_args' parameter list built as an
# array, the kernels and cubin s24b's): verify and a short bench with dependent launches on.
GPU_DIR=.gpu/s24c source evidence/session24/scripts/common.sh
s 300 verify_quick $H verify --quick --lse
s 200 verify_random $H verify --random 100
s 100 verify_fp8 $H verify --dtype e4m3 --lse
s 200 bench $H bench --shapes small,mission --shape 2,8,2048,64 --shape 1,32,1,32768,128 --heads-kv 8 --iters 60 --json /tmp/j/bench.json
pack 9
