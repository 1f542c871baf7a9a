# Call 1: decode baseline and where its time goes (committed tree, build t0).
source .gpux/s13/common.sh
DEC="--kernel flash_decode_m16_n128_w8_s3_light --kernel flash_decode_m16_n64_w4_s4_light --kernel flash_decode_m16_n64_w4_s3_light --kernel flash_ws_m128_n128_s2_ov_mbarrier --kernel flash_ws_m128_n176_s2_pp_ov_mbarrier"
s 200 bench_decode $H bench --shapes decode $DEC --shape 1,8,2048,64 --shape 1,8,2048,128 --peers torch --json /tmp/j/bench_decode.json
M="--metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum"
NCU="ncu --clock-control none --graph-profiling node $M -k regex:flash_decode|decode_combine|flash_ws --launch-count 40 --csv"
s 120 ncu_d1 $NCU $H bench --shape 1,32,1,32768,128 --kernel flash_decode_m16_n128_w8_s3_light --kernel flash_decode_m16_n64_w4_s4_light --iters 1 --warmup 0
s 120 ncu_d8 $NCU $H bench --shape 8,32,1,8192,128 --kernel flash_decode_m16_n128_w8_s3_light --kernel flash_ws_m128_n128_s2_ov_mbarrier --iters 1 --warmup 0
s 120 ncu_g1 $NCU $H bench --shape 1,32,1,32768,128 --heads-kv 8 --kernel flash_decode_m16_n128_w8_s3_light --iters 1 --warmup 0
cp /tmp/j/bench_decode.json $OUT/ 2>/dev/null
pack 1
