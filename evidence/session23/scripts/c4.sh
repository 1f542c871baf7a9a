# Session 23, call 4: full ncu sets with SASS source counters of the head-dim-64 persistent
# kernels on problems of exactly two items per block (132 blocks, 8 KV tiles per item), to place
# the per-item cost of the persistent walk (call 2: ~7.6K cycles per item with three consumers,
# ~2.7K with two, against ~0 for cuDNN's persistent kernel).
source evidence/session23/scripts/common.sh
M192=flash_ws_m192_n128_s2_pp_ov_ps_mbarrier; P128=flash_ws_m128_n128_s2_pp_ov_ps_mbarrier
full() { local name=$1 k=$2 shape=$3
  s 200 ncuf_$name ncu --clock-control none --set full --import-source no --launch-count 1 --kernel-name regex:"^${k}_d64_f16" -o /tmp/j/full_$name $H profile-target --shape $shape --dtype f16 --kernel $k
  ncu -i /tmp/j/full_$name.ncu-rep --page source --csv --print-source sass > /tmp/j/src_$name.csv 2>/tmp/l/src_$name.err
  ncu -i /tmp/j/full_$name.ncu-rep --page raw --csv > /tmp/j/raw_$name.csv; rm -f /tmp/j/full_$name.ncu-rep; }
full m192_2items $M192 1,24,2048,1024,64
full m192_1item $M192 1,12,2048,1024,64
full m128_2items $P128 1,33,1024,1024,64
pack 4
