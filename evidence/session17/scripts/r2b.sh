# Session 17, call 5 (after FA3's first half): FA3's second half; build t1 (clock sampling, --warmup-ms). The method A/B: the persistent pick, torch and FA3 at (1,16,8192,128) and (2,16,4096,128) with count-only warm-ups (--warmup-ms 0, the old method) and with 500 ms; then the fp16 evidence bench (std + (2,16,4096,256), torch + FA3).
rm -rf /tmp/l /tmp/j
B=t1 source .gpux/s17/common.sh
cp .fa4/b/*.whl /tmp/fa4/ && bash .fa4/b/install.sh b > /tmp/l/fa4_install.log 2>&1; echo "fa4 rc=$?"; tail -1 /tmp/l/fa4_install.log
export PYTHONPATH=$(cat /tmp/fa4/pythonpath 2>/dev/null)
PS=flash_ws_m128_n128_s2_pp_ov_ps_mbarrier
for ms in 0 500; do s 150 method_ms$ms $H bench --shape 1,16,8192,128 --shape 2,16,4096,128 --kernel $PS --peers torch,fa3 --iters 100 --warmup-ms $ms --json /tmp/j/method_ms$ms.json; done
s 520 bench_f16 $H bench --shapes std --shape 2,16,4096,256 --peers torch,fa3 --iters 60 --plot /tmp/j/bench_h100.svg --json /tmp/j/bench_h100.json
cp /tmp/l/bench_f16.log /tmp/j/bench_h100.log
pack 5
