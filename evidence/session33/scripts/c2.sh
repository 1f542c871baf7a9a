# Session 33, call 2 (H100): s33c = s33a's kernels (the same PTX) + the host's fix of call 1's
# failure (the varlen output map started at the buffer, not after verify's guard, so the copy
# engine's rows landed one row early). verify of every varlen entry point, 300 random problems
# (+75 paged, +75 varlen), and the four sanitizers on the persistent kernel's varlen set.
GPU_DIR=.gpu/s33c source evidence/session33/scripts/common.sh
PS=flash_ws_m128_n128_s2_pp_ov_ps_mbarrier
s 150 verify_varlen $H verify --shapes varlen --lse --json /tmp/j/verify_varlen.json
s 200 verify_random $H verify --random 300 --json /tmp/j/verify_random.json
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
for tool in memcheck racecheck synccheck initcheck; do
  s 60 san_$tool $CS --tool $tool --print-limit 20 $H verify --shapes varlen --kernel $PS --lse --seed 7
done
pack 2
