# Session 16, call 8: the tuned split count (merge of splits-override, build t5): the GPU tests (forced split counts against float64 included), `tune --splits` on the decode shapes (entries saved to a copy of the tuned table), and the decode bench with and without that table.
rm -rf /tmp/l /tmp/j
B=t5 source .gpux/s16c/common.sh
xz -dc .gpux/s16c/gpu.xz > /tmp/g/gpu; chmod +x /tmp/g/gpu
s 200 test_gpu /tmp/g/gpu --include-ignored --test-threads=1
cp tuned/h100.json /tmp/j/tuned_h100.json
s 90 tune_1_32k $H tune --splits --shape 1,32,1,32768,128 --json /tmp/j/tune_1_32k.json --save --table /tmp/j/tuned_h100.json
s 90 tune_8_8k $H tune --splits --shape 8,32,1,8192,128 --json /tmp/j/tune_8_8k.json --save --table /tmp/j/tuned_h100.json
s 90 tune_1_32k_g8 $H tune --splits --shape 1,32,1,32768,128 --heads-kv 8 --json /tmp/j/tune_1_32k_g8.json --save --table /tmp/j/tuned_h100.json
s 90 tune_16_32k_g8 $H tune --splits --shape 16,32,1,32768,128 --heads-kv 8 --json /tmp/j/tune_16_32k_g8.json --save --table /tmp/j/tuned_h100.json
for r in 1 2; do
  s 120 dec_heur_$r $H bench --shapes decode --kernel flash_decode_m16_n128_w8_s3_mbarrier --json /tmp/j/dec_heur_$r.json
  FLASHRS_TUNED=/tmp/j/tuned_h100.json s 120 dec_tuned_$r $H bench --shapes decode --kernel flash_decode_m16_n128_w8_s3_mbarrier --json /tmp/j/dec_tuned_$r.json
done
pack 8
