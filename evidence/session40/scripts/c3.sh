# Session 40, call 3 (H200): s40b = s40a + a warpgroup without keys in the item takes `idle`, its
# turns and the ring's arrivals with no mbarrier wait (v56, second form). First its checks (verify
# --quick --lse of every variant, e4m3 odd shapes, synccheck and racecheck of the two-, three- and
# four-consumer ping-pong kernels on the varlen and odd sets, 300 random problems), then the
# varlen batch (non-causal twice, causal once) and dense shapes whose last block has 16 rows,
# s38a / s40a / s40b in turn.
GPU_DIR=.gpu/s40b source evidence/session35/scripts/common.sh
p() { pack 3 > /dev/null; }
for b in s38a s40a; do
  mkdir -p /tmp/g_$b/cubin; xz -dc .gpu/$b/host.xz > /tmp/g_$b/host; chmod +x /tmp/g_$b/host
  xz -dc .gpu/$b/kernels_sm_90a.cubin.xz > /tmp/g_$b/cubin/kernels_sm_90a.cubin; cp .gpu/$b/kernels_sm_90a.ptx-fnv64 /tmp/g_$b/cubin/
done
s 200 verify_quick $H verify --quick --lse --json /tmp/j/verify_quick.json; p
tail -1 /tmp/l/verify_quick.log
s 100 verify_fp8 $H verify --dtype e4m3 --shapes odd --lse --json /tmp/j/verify_fp8.json; p
tail -1 /tmp/l/verify_fp8.log
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
K="--kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m256_n64_s3_pp_ov_mbarrier"
for tool in synccheck racecheck; do
  s 100 san_$tool $CS --tool $tool --print-limit 20 $H verify --shapes varlen,odd --seed 7 $K; p
done
s 60 verify_random $H verify --random 300 --json /tmp/j/verify_random.json; p
build() { case $1 in s40b) echo $H ;; *) echo /tmp/g_$1/host ;; esac; }
cubin() { case $1 in s40b) echo /tmp/g/cubin ;; *) echo /tmp/g_$1/cubin ;; esac; }
run_abc() { # name, order, then bench arguments
  local name=$1 order=$2; shift 2
  for b in $order; do
    FLASHRS_CUBIN_DIR=$(cubin $b) s 150 ${name}_$b $(build $b) bench "$@" --json /tmp/j/${name}_$b.json
  done
  for b in $order; do echo "$name $b: $(grep -E '_varlen |^note: varlen vs dense' /tmp/l/${name}_$b.log | awk '/_varlen/ {printf "varlen %s us %s MHz; ", $(NF-9), $(NF-1)} /vs dense/ {print $(NF-3)}')"; done
  p
}
V="--varlen --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --rounds 2"
run_abc varlen1 "s38a s40a s40b" $V
run_abc varlen2 "s40b s40a s38a" $V
run_abc varlen_causal "s38a s40b" $V --causal
run_abc dense "s38a s40b" --shape 4,16,1040,128 --shape 2,16,4096,128 --shape 4,16,1040,64 --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --rounds 2
for b in s38a s40b; do echo "dense $b"; grep -E "^flash_ws" /tmp/l/dense_$b.log | cut -c1-110; done
for f in /tmp/l/*.log; do echo "$(basename $f): $(grep -E '^PASS|^FAIL|test result|ERROR SUMMARY|RACECHECK SUMMARY' $f | tail -1)"; done
