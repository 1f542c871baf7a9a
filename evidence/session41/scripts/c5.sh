# Session 41, call 5 (H200): s41c's checks: verify of the e4m3 sets with LSE, the same at scale 1.0
# (row maxima move in many tiles: the speculative exponentials taken again), racecheck and
# synccheck of the grid and persistent e4m3 picks. (Run as one command line.)
GPU_DIR=.gpu/s41c source evidence/session35/scripts/common.sh
s 200 verify_fp8 $H verify --dtype e4m3 --lse --json /tmp/j/verify_fp8.json
s 100 verify_fp8_scale $H verify --dtype e4m3 --lse --scale 1.0 --json /tmp/j/verify_fp8_scale.json
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
for tool in racecheck synccheck; do
  s 120 san_$tool $CS --tool $tool --print-limit 20 $H verify --dtype e4m3 --shapes odd --kernel flash_ws_fp8_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_fp8_m128_n128_s2_pp_ov_ps_mbarrier --seed 7
done
pack 5
