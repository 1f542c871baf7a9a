# Session 23, call 1: where (2,8,2048,64) loses to cuDNN (issue #10) and (1,8,2048,64) ties it
# (#11). HEAD's build (session 22's u4 binaries). (a) Sustained runs, alternated, ~3 s each, with
# nvidia-smi sampling the SM clock and power every 20 ms: our pick (m192 persistent), the 128-row
# grid and persistent kernels, and cuDNN through torch. (b) ncu, clocks untouched, one launch of
# each at (2,8,2048,64): cycles, instructions, pipes.
source evidence/session23/scripts/common.sh
Q=timestamp,clocks.sm,power.draw.instant,temperature.gpu
nvidia-smi --query-gpu=$Q --format=csv,noheader >/dev/null 2>&1 || Q=timestamp,clocks.sm,power.draw,temperature.gpu
nvidia-smi --query-gpu=$Q --format=csv,noheader,nounits -lms 20 > /tmp/j/smi.csv 2>&1 &
SMI=$!
mark() { echo "$(date +%s.%N) $1" >> /tmp/j/phases.txt; }
M192=flash_ws_m192_n128_s2_pp_ov_ps_mbarrier; G=flash_ws_m128_n128_s2_pp_ov_mbarrier; P128=flash_ws_m128_n128_s2_pp_ov_ps_mbarrier
sleep 1
for round in 1 2; do for shape in 2,8,2048,64 1,8,2048,64; do
  IFS=, read b h sq d <<< "$shape"
  for k in $M192 $G $P128; do
    mark "begin $k $shape r$round"; s 60 ${k}_${b}_r$round $H bench --shape $shape --kernel $k --iters 3000 --json /tmp/j/${k}_${b}_r$round.json; mark "end $k $shape r$round"
    sleep 1
  done
  mark "begin cudnn $shape r$round"; s 60 cudnn_${b}_r$round python3 host/peers/attention_peers.py "{\"dtype\":\"float16\",\"backends\":[\"cudnn\"],\"shapes\":[[$b,$h,$sq,$sq,$d]],\"causal\":false,\"calls\":20,\"warmup\":10,\"warmup_ms\":500,\"replays\":3000}"; mark "end cudnn $shape r$round"
  python3 -c "import json,sys;d=json.load(open('/tmp/l/cudnn_${b}_r$round.log'));r=d['results'][0];s=sorted(r['samples_us']);print('cudnn p50',s[len(s)//2],r.get('window'))" >> /tmp/l/cudnn_summary.log 2>&1
  cp /tmp/l/cudnn_${b}_r$round.log /tmp/j/cudnn_${b}_r$round.json
  sleep 1
done; done
kill $SMI
M=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__cycles_elapsed.max,sm__cycles_active.avg,sm__cycles_active.max,smsp__inst_executed.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,lts__t_bytes.sum,dram__bytes_read.sum,dram__bytes_write.sum,launch__grid_size,launch__block_size,launch__registers_per_thread,launch__shared_mem_per_block_dynamic
for shape in 2,8,2048,64; do
  IFS=, read b h sq d <<< "$shape"
  for k in $M192 $G $P128; do s 90 ncu_${k}_${b} ncu --clock-control none --launch-count 1 --kernel-name regex:"^${k}_d64_f16" --metrics $M --csv $H profile-target --shape $shape --dtype f16 --kernel $k; done
  s 150 ncu_cudnn_${b} ncu --clock-control none --kernel-name regex:"fprop|sdpa|flash|fmha" --launch-skip 3 --launch-count 1 --metrics $M --csv python3 host/peers/attention_peers.py "{\"dtype\":\"float16\",\"backends\":[\"cudnn\"],\"shapes\":[[$b,$h,$sq,$sq,$d]],\"causal\":false,\"calls\":2,\"warmup\":1,\"replays\":2}"
done
pack 1
