# Session 40, call 2 (H200): s40a = s38a + v56 (a warpgroup whose 64 rows all lie past the
# sequence skips its products and passes its turns). (a) verify --quick --lse of every variant and
# the e4m3 odd shapes; (b) the varlen batch, non-causal ABAB and causal AB, and two dense shapes
# (one whose last block has 16 rows), s38a against s40a; (c) the 64-key decode twins (two and three
# blocks per SM) at one slice (a tuned table, FLASHRS_TUNED) beside the pick and cuDNN;
# (d) racecheck and synccheck of the two flash_ws picks on the varlen and odd sets; 300 random
# problems.
# The tuned table FLASHRS_TUNED names below is scripts/one_split.json, carried as .gpu/tuned/.
GPU_DIR=.gpu/s40a source evidence/session35/scripts/common.sh
p() { pack 2 > /dev/null; }
mkdir -p /tmp/g_old/cubin; xz -dc .gpu/s38a/host.xz > /tmp/g_old/host; chmod +x /tmp/g_old/host
xz -dc .gpu/s38a/kernels_sm_90a.cubin.xz > /tmp/g_old/cubin/kernels_sm_90a.cubin; cp .gpu/s38a/kernels_sm_90a.ptx-fnv64 /tmp/g_old/cubin/
s 200 verify_quick $H verify --quick --lse --json /tmp/j/verify_quick.json; p
tail -2 /tmp/l/verify_quick.log
s 100 verify_fp8 $H verify --dtype e4m3 --shapes odd --lse --json /tmp/j/verify_fp8.json; p
tail -2 /tmp/l/verify_fp8.log
V="--varlen --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --rounds 2"
run_ab() { # name, then bench arguments
  local name=$1; shift
  FLASHRS_CUBIN_DIR=/tmp/g_old/cubin s 150 ${name}_old /tmp/g_old/host bench "$@" --json /tmp/j/${name}_old.json
  s 150 ${name}_new $H bench "$@" --json /tmp/j/${name}_new.json
  for v in old new; do echo "$name $v: $(grep -E '^note: varlen vs dense' /tmp/l/${name}_$v.log | sed 's/.*dense: //')"; done
  p
}
run_ab varlen1 $V
run_ab varlen2 $V
run_ab varlen_causal $V --causal
D="--shape 4,16,1040,128 --shape 2,16,4096,128 --shape 4,16,1040,64 --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --rounds 2"
run_ab dense $D
for v in old new; do echo "dense $v"; grep -E "^flash_ws" /tmp/l/dense_$v.log | awk '{print $1, $2,$3,$4,$5,$6, $(NF-12)}'; done
FLASHRS_TUNED=.gpu/tuned/one_split.json s 200 twins $H bench --shape 8,32,1,8192,128 --shape 64,32,1,2048,128 --kernel flash_decode_m16_n128_w8_s3_mbarrier --kernel flash_decode_m16_n64_w4_s3_mbarrier --kernel flash_decode_m16_n64_w4_s2_mbarrier --peers torch --rounds 3 --json /tmp/j/twins.json; p
grep -E "^flash_decode|^torch_cudnn" /tmp/l/twins.log
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
K="--kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier"
for tool in synccheck racecheck; do
  s 80 san_$tool $CS --tool $tool --print-limit 20 $H verify --shapes varlen,odd --seed 7 $K; p
done
s 60 verify_random $H verify --random 300 --json /tmp/j/verify_random.json; p
for f in /tmp/l/*.log; do echo "$(basename $f): $(grep -E '^PASS|^FAIL|test result|ERROR SUMMARY|RACECHECK SUMMARY' $f | tail -1)"; done
