# Session 18, call 9 (right after `bash .fa4/a/install.sh a`): FA3's second half; ncu (clocks untouched) of one launch each of t3's head-dim-128 picks and FA3: cycles, instructions, tensor pipe, at (2,16,4096,128) and (1,16,8192,128) non-causal and (2,16,4096,128) causal. Session 17's same metrics of t0's persistent pick are in evidence/session17/ncu/.
source .gpux/s18/common.sh
use t3
cp .fa4/b/*.whl /tmp/fa4/ && bash .fa4/b/install.sh b > /tmp/l/fa4_install.log 2>&1; echo "fa4 rc=$?"; tail -1 /tmp/l/fa4_install.log
export PYTHONPATH=$(cat /tmp/fa4/pythonpath 2>/dev/null)
M=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__cycles_elapsed.max,sm__cycles_active.avg,smsp__inst_executed.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,lts__t_bytes.sum,dram__bytes_read.sum
for shape in 2,16,4096,128 1,16,8192,128; do
  IFS=, read b h sq d <<< "$shape"
  k=flash_ws_m128_n128_s2_pp_ov_ps_mbarrier
  s 90 ncu_${k}_${b}_${sq} ncu --clock-control none --launch-count 1 --kernel-name ${k}_d128_f16 --metrics $M --csv $H profile-target --shape $shape --dtype f16 --kernel $k
  s 150 ncu_fa3_${b}_${sq} ncu --clock-control none --kernel-name regex:[Ff]lash --launch-skip 2 --launch-count 1 --metrics $M --csv python3 host/peers/attention_peers.py "{\"dtype\":\"float16\",\"backends\":[\"fa3\"],\"shapes\":[[$b,$h,$sq,$sq,$d]],\"causal\":false,\"calls\":2,\"warmup\":1,\"replays\":2}"
done
k=flash_ws_m128_n128_s2_pp_ov_mbarrier
s 90 ncu_${k}_2_4096_causal ncu --clock-control none --launch-count 1 --kernel-name ${k}_d128_f16 --metrics $M --csv $H profile-target --shape 2,16,4096,128 --causal --dtype f16 --kernel $k
s 150 ncu_fa3_2_4096_causal ncu --clock-control none --kernel-name regex:[Ff]lash --launch-skip 2 --launch-count 1 --metrics $M --csv python3 host/peers/attention_peers.py "{\"dtype\":\"float16\",\"backends\":[\"fa3\"],\"shapes\":[[2,16,4096,4096,128]],\"causal\":true,\"calls\":2,\"warmup\":1,\"replays\":2}"
pack 9
