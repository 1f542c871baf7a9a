# Session 25, call 5 (H100, warm after call 4): full ncu sets with per-instruction stall samples of
# v36's two-consumer persistent kernel (s25d) and cuDNN at the failing shape (2,8,2048,64), for
# the next session's reading (as session 23's c3 did at (1,8,2048,1024,64)).
GPU_DIR=.gpu/s25d source evidence/session25/scripts/common.sh
BP=flash_ws_m128_n128_s2_pp_ov_ps_mbarrier
s 200 ncuf_bp ncu --clock-control none --set full --import-source no --launch-count 1 --kernel-name regex:"^${BP}_d64_f16" -o /tmp/j/full_bp $H profile-target --shape 2,8,2048,2048,64 --dtype f16 --kernel $BP
ncu -i /tmp/j/full_bp.ncu-rep --page source --csv --print-source sass > /tmp/j/src_bp.csv 2>/tmp/l/src_bp.err
ncu -i /tmp/j/full_bp.ncu-rep --page raw --csv > /tmp/j/raw_bp.csv; rm -f /tmp/j/full_bp.ncu-rep
s 200 ncuf_cudnn ncu --clock-control none --set full --import-source no --kernel-name regex:"fprop|sdpa|flash|fmha" --launch-skip 3 --launch-count 1 -o /tmp/j/full_cudnn python3 host/peers/attention_peers.py "{\"dtype\":\"float16\",\"backends\":[\"cudnn\"],\"shapes\":[[2,8,2048,2048,64]],\"causal\":false,\"calls\":2,\"warmup\":1,\"replays\":2}"
ncu -i /tmp/j/full_cudnn.ncu-rep --page source --csv --print-source sass > /tmp/j/src_cudnn.csv 2>/tmp/l/src_cudnn.err
ncu -i /tmp/j/full_cudnn.ncu-rep --page raw --csv > /tmp/j/raw_cudnn.csv; rm -f /tmp/j/full_cudnn.ncu-rep
cd /tmp/j && xz -T4 *.csv; cd - >/dev/null
pack 5
