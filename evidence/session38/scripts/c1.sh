# Session 38, call 1 (H200): s38a = s37c's kernels (PTX fnv 91d0c0b2744859b8) + a lab switch for the
# tensor maps' L2 promotion (FLASHRS_L2_PROMOTION). (a) The varlen batch and its dense twin with
# 128- and 256-byte promotion, ABAB; (b) FP8 and fp16 at (2,16,4096,128) likewise; (c) where the
# decode kernel loses to cuDNN: one wave (33,4,1,8192: 132 blocks) against two (66,4,1,8192: 264;
# 8,32,1,8192: 256), torch in the same run.
GPU_DIR=.gpu/s38a source evidence/session35/scripts/common.sh
V="--varlen --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --rounds 2"
for p in 128 256 128 256; do
  FLASHRS_L2_PROMOTION=$p s 120 varlen_$p $H bench $V --json /tmp/j/varlen_$p.json
  cp /tmp/l/varlen_$p.log /tmp/l/varlen_${p}_$SECONDS.log
  grep -E "^note: varlen vs dense" /tmp/l/varlen_$p.log
done
for p in 128 256 128 256; do
  FLASHRS_L2_PROMOTION=$p s 120 fp8_$p $H bench --dtype e4m3 --shape 2,16,4096,128 --shape 2,16,4096,256 --rounds 2 --iters 40 --json /tmp/j/fp8_$p.json
  cp /tmp/l/fp8_$p.log /tmp/l/fp8_${p}_$SECONDS.log
  grep -E "e4m3|speedup|x fp16" /tmp/l/fp8_$p.log | tail -6
done
s 200 waves $H bench --shape 33,4,1,8192,128 --shape 66,4,1,8192,128 --shape 8,32,1,8192,128 --kernel flash_decode_m16_n128_w8_s3_mbarrier --peers torch --rounds 3 --json /tmp/j/waves.json
grep -A5 "speedup" /tmp/l/waves.log
pack 1
