# Session 27, call 5 (H100): e4m3 verify with LSE of s27a (v40) on a split launch. Call 4's
# (1,133,128,4096,128) stopped at its grouped twin (33 key/value heads do not divide 133: a bug of
# verify's FP8 cases, fixed after this run); 136 heads have a twin of 34: 136 items of 128 rows
# on 132 SMs, 4 in the last round, split in 8.
GPU_DIR=.gpu/s27a source evidence/session27/scripts/common.sh
s 200 verify_fp8 $H verify --dtype e4m3 --lse --shape 1,136,128,4096,128 --json /tmp/j/verify_fp8.json
pack 5
