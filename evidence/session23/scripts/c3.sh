# Session 23, call 3: full ncu sets with SASS source counters (warp-state samples per
# instruction) of the head-dim-64 persistent kernels and cuDNN on one-round problems of 8 KV tiles
# per item, to place the ~4-6K cycles of fixed cost ours has more than cuDNN (call 2).
source evidence/session23/scripts/common.sh
M192=flash_ws_m192_n128_s2_pp_ov_ps_mbarrier; P128=flash_ws_m128_n128_s2_pp_ov_ps_mbarrier
full() { local name=$1 k=$2 shape=$3
  s 200 ncuf_$name ncu --clock-control none --set full --import-source no --launch-count 1 --kernel-name regex:"^${k}_d64_f16" -o /tmp/j/full_$name $H profile-target --shape $shape --dtype f16 --kernel $k
  ncu -i /tmp/j/full_$name.ncu-rep --page source --csv --print-source sass > /tmp/j/src_$name.csv 2>/tmp/l/src_$name.err
  ncu -i /tmp/j/full_$name.ncu-rep --page raw --csv > /tmp/j/raw_$name.csv; rm -f /tmp/j/full_$name.ncu-rep; }
full m128_1024 $P128 1,8,2048,1024,64
full m128_2048 $P128 1,8,2048,2048,64
full m192_1024 $M192 1,11,2048,1024,64
s 200 ncuf_cudnn ncu --clock-control none --set full --import-source no --kernel-name regex:"fprop|sdpa|flash|fmha" --launch-skip 3 --launch-count 1 -o /tmp/j/full_cudnn python3 host/peers/attention_peers.py "{\"dtype\":\"float16\",\"backends\":[\"cudnn\"],\"shapes\":[[1,8,2048,1024,64]],\"causal\":false,\"calls\":2,\"warmup\":1,\"replays\":2}"
ncu -i /tmp/j/full_cudnn.ncu-rep --page source --csv --print-source sass > /tmp/j/src_cudnn.csv 2>/tmp/l/src_cudnn.err
ncu -i /tmp/j/full_cudnn.ncu-rep --page raw --csv > /tmp/j/raw_cudnn.csv; rm -f /tmp/j/full_cudnn.ncu-rep
ls -la /tmp/j
pack 3
