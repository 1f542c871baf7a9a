# Session 17, call 2 (after r1a): FA3's second half; then the same-call clock experiment: ours (persistent pick, grid n176) and FA3 at (1,16,8192,128) and (2,16,4096,128), sustained timing runs alternated, nvidia-smi sampling SM clock, power and temperature every 50 ms; then ncu (clocks untouched) cycles and clock of one launch of each.
rm -rf /tmp/l /tmp/j
source .gpux/s17/common.sh
cp .fa4/b/*.whl /tmp/fa4/ && bash .fa4/b/install.sh b > /tmp/l/fa4_install.log 2>&1; echo "fa4 rc=$?"; tail -1 /tmp/l/fa4_install.log
export PYTHONPATH=$(cat /tmp/fa4/pythonpath 2>/dev/null)
R=clocks_event_reasons.active; nvidia-smi --query-gpu=$R --format=csv >/dev/null 2>&1 || R=clocks_throttle_reasons.active
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,$R --format=csv,noheader,nounits -lms 50 > /tmp/j/smi.csv 2>&1 &
SMI=$!
mark() { echo "$(date +%s.%N) $1" >> /tmp/j/phases.txt; }
PS=flash_ws_m128_n128_s2_pp_ov_ps_mbarrier; G=flash_ws_m128_n176_s2_ov_mbarrier
sleep 2
for round in 1 2; do for shape in 1,16,8192,128 2,16,4096,128; do
  IFS=, read b h sq d <<< "$shape"
  mark "begin ours_ps $shape r$round"; s 60 ours_ps_${b}_${sq}_r$round $H bench --shape $shape --kernel $PS --iters 2500 --json /tmp/j/ours_ps_${b}_${sq}_r$round.json; mark "end ours_ps $shape r$round"
  sleep 2
  mark "begin ours_g $shape r$round"; s 60 ours_g_${b}_${sq}_r$round $H bench --shape $shape --kernel $G --iters 2500 --json /tmp/j/ours_g_${b}_${sq}_r$round.json; mark "end ours_g $shape r$round"
  sleep 2
  mark "begin fa3 $shape r$round"; s 120 fa3_${b}_${sq}_r$round python3 host/peers/attention_peers.py "{\"dtype\":\"float16\",\"backends\":[\"fa3\"],\"shapes\":[[$b,$h,$sq,$sq,$d]],\"causal\":false,\"calls\":20,\"warmup\":10,\"replays\":4000}"; mark "end fa3 $shape r$round"
  cp /tmp/l/fa3_${b}_${sq}_r$round.log /tmp/j/fa3_${b}_${sq}_r$round.json
  sleep 2
done; done
kill $SMI
M=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__cycles_elapsed.max,sm__cycles_active.avg,smsp__inst_executed.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,lts__t_bytes.sum,dram__bytes_read.sum
for shape in 1,16,8192,128 2,16,4096,128; do
  IFS=, read b h sq d <<< "$shape"
  for k in $PS $G; do s 90 ncu_${k}_${b}_${sq} ncu --clock-control none --launch-count 1 --kernel-name ${k}_d128_f16 --metrics $M --csv $H profile-target --shape $shape --dtype f16 --kernel $k; done
  s 150 ncu_fa3_${b}_${sq} ncu --clock-control none --kernel-name regex:[Ff]lash --launch-skip 2 --launch-count 1 --metrics $M --csv python3 host/peers/attention_peers.py "{\"dtype\":\"float16\",\"backends\":[\"fa3\"],\"shapes\":[[$b,$h,$sq,$sq,$d]],\"causal\":false,\"calls\":2,\"warmup\":1,\"replays\":2}"
done
nvidia-smi -q -d CLOCK,POWER,PERFORMANCE,TEMPERATURE > /tmp/j/smi_q_after.txt 2>&1
pack 2
