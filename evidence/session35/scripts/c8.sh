# Session 35, call 8 (H100): s35e (this tree's kernels): grouped decode B=16 (16,32/8,1,32768,128)
# alone against torch's backends, five rounds (alternating who goes first), to see the spread of
# the tie that issue #11's run (c6) put at 0.997x and session 34's at 1.001x.
GPU_DIR=.gpu/s35e source evidence/session35/scripts/common.sh
s 300 b16 $H bench --shape 16,32,1,32768,128 --heads-kv 8 --peers torch --kernel flash_decode_m16_n128_w8_s3_mbarrier --rounds 5 --json /tmp/j/b16.json
grep -E "speedup|kv=8" /tmp/l/b16.log | head -12
pack 8
