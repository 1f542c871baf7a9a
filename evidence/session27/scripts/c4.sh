# Session 27, call 4 (H100): checks of s27a (v40) on launches that do split (calls 2's small
# "split" shapes had fewer items than SMs, so their grids were the items and nothing split; only
# (2,8,2048,64) and (4,16,2048,64) split there, and the `gpu` tests' tail-split test, 5 slices):
# verify (both layouts, LSE, both dtypes) and --repeat of shapes whose last round is split in 4
# or 8 slices at head dims 64 and 128; memcheck, racecheck and synccheck of split launches; the
# `api_gpu` and `fp8_gpu` test binaries; e4m3 verify with LSE on a split shape; grouped heads.
GPU_DIR=.gpu/s27a source evidence/session27/scripts/common.sh
K192=flash_ws_m192_n128_s2_pp_ov_ps_mbarrier; K128P=flash_ws_m128_n128_s2_pp_ov_ps_mbarrier
# m192: 133 items, 1 in the last round: 8 slices; 134 items of 9 tiles: 4 slices.
S64="--shape 1,133,192,4096,64 --shape 1,134,192,1152,64"
# m128: 133 (134) items of 128 rows: 8 (4) slices; at head dim 64 the m128 kernel gets 266 and
# 268 items from S64: 8 and 4 slices as well.
S128="--shape 1,133,128,4096,128 --shape 1,134,128,1100,128"
s 200 verify_split64 $H verify --kernel $K192 --kernel $K128P --lse --layout bhsd,bshd $S64 --json /tmp/j/verify_split64.json
s 200 verify_split128 $H verify --kernel $K128P --lse --layout bhsd,bshd $S128 --json /tmp/j/verify_split128.json
s 200 repeat_split $H verify --kernel $K128P --repeat 10 --shapes small $S64 $S128 --json /tmp/j/repeat_split.json
s 200 repeat_split192 $H verify --kernel $K192 --repeat 10 --shapes small $S64 --json /tmp/j/repeat_split192.json
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
for tool in memcheck racecheck synccheck; do
  s 200 san_${tool}_64 $CS --tool $tool --print-limit 20 $H verify --seed 7 --kernel $K192 --kernel $K128P --dtype f16 --shapes small --shape 1,134,192,1152,64
  s 200 san_${tool}_128 $CS --tool $tool --print-limit 20 $H verify --seed 7 --kernel $K128P --dtype f16 --shapes small --shape 1,134,128,1100,128
done
pack 4a
for t in api_gpu fp8_gpu; do s 200 test_$t /tmp/g/tests/$t --include-ignored --test-threads=1; done
s 150 verify_fp8 $H verify --dtype e4m3 --lse --shape 1,133,128,4096,128 --json /tmp/j/verify_fp8.json
s 150 verify_gqa $H verify --kernel $K192 --kernel $K128P --heads-kv 1 --lse --dtype bf16 --shapes small --shape 1,133,192,4096,64 --shape 1,133,128,4096,128 --json /tmp/j/verify_gqa.json
pack 4b
