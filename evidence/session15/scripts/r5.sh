# Session 15, call 5: where the persistent kernel's time goes: ncu source counters (SASS) of the persistent and grid n128 kernels at (1,16,8192,128), build t4.
rm -rf /tmp/l /tmp/j
B=t4 source .gpux/s15/common.sh
P="profile-target --shape 1,16,8192,128 --dtype f16 --kernel"
for k in flash_ws_m128_n128_s2_pp_ov_ps_mbarrier flash_ws_m128_n128_s2_pp_ov_mbarrier; do
  s 200 rep_$k ncu --clock-control none --launch-count 1 --kernel-name ${k}_d128_f16 --section SourceCounters --section WarpStateStats --section InstructionStats -f -o /tmp/j/rep_$k $H $P $k
  ncu -i /tmp/j/rep_$k.ncu-rep --page source --csv --print-source sass > /tmp/j/src_$k.csv 2>/tmp/l/src_$k.log
  ncu -i /tmp/j/rep_$k.ncu-rep --page details > /tmp/l/details_$k.log 2>&1
  ls -la /tmp/j/src_$k.csv
done
cd /tmp/j && tar czf $OUT/src5.tgz src_*.csv; cd - >/dev/null
pack 5
