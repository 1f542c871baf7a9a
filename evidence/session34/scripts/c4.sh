# Session 34, call 4 (H100): s34a: racecheck over verify --quick (small, odd and edge shapes, small
# paged and varlen sets) of the decode kernels and the persistent flash_ws, plus a decode shape
# that splits over the keys.
GPU_DIR=.gpu/s34a source evidence/session34/scripts/common.sh
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
D="--kernel flash_decode_m16_n128_w8_s3_mbarrier --kernel flash_decode_m16_n64_w4_s4_mbarrier --kernel flash_decode_m16_n128_w8_s3_light --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier"
s 280 san_racecheck_quick $CS --tool racecheck --print-limit 20 $H verify --quick --shape 1,8,1,8192,128 --seed 7 --lse $D
dmesg 2>/dev/null | tail -3
pack 4
