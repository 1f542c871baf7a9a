# Session 12, call 6: SM clock, power and throttle reasons (nvidia-smi every 50 ms) while the same kernels run again and again, to see whether clocks explain the 3-12% call-to-call spread.
source .gpux/s12/common.sh
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv,nounits -lms 50 > /tmp/l/clocks.csv 2>&1 &
SMI=$!
sleep 1
for rep in 1 2 3; do
  for k in flash_ws_m128_n176_s2_pp_ov_mbarrier flash_ws_m128_n128_s2_pp_ov_mbarrier; do
    echo "$(date +%s.%N) start $k $rep" >> /tmp/l/windows.txt
    s 60 clk_${k}_$rep $H bench --kernel $k --shape 2,16,4096,128 --shapes large --iters 40 --json /tmp/j/clk_${k}_$rep.json
    echo "$(date +%s.%N) end $k $rep" >> /tmp/l/windows.txt
  done
  echo "$(date +%s.%N) start torch $rep" >> /tmp/l/windows.txt
  s 90 clk_torch_$rep $H bench --kernel flash_ws_m128_n80_s2_pp_ov_mbarrier --shape 2,16,4096,128 --shapes large --peers torch --iters 40 --json /tmp/j/clk_torch_$rep.json
  echo "$(date +%s.%N) end torch $rep" >> /tmp/l/windows.txt
done
kill $SMI
nvidia-smi -q -d PERFORMANCE,POWER,CLOCK > /tmp/l/smi_q.txt 2>&1
cd /tmp/l && tar czf $OUT/logs6.tgz clk*.log clocks.csv windows.txt smi_q.txt; cd /tmp/j && tar czf $OUT/json6.tgz clk*.json; ls $OUT
