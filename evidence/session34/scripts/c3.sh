# Session 34, call 3 (H100): s34a: call 2's racecheck again with 560 s: the verify process was
# killed by the machine's OOM killer (130 GB resident under racecheck on the splitkv, paged and
# varlen sets; dmesg in call 4), so racecheck runs on the quick sets instead (c4.sh).
GPU_DIR=.gpu/s34a source evidence/session34/scripts/common.sh
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
D="--kernel flash_decode_m16_n128_w8_s3_mbarrier --kernel flash_decode_m16_n64_w4_s4_mbarrier --kernel flash_decode_m16_n128_w8_s3_light --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier"
s 560 san_racecheck $CS --tool racecheck --print-limit 20 $H verify --shapes splitkv,paged,varlen --seed 7 --lse $D
pack 3
