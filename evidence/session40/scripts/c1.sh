# Session 40, call 1 (H200): s38a (this tree's kernels, PTX fnv 91d0c0b2744859b8), no new build.
# Does cutting (8,32,1,8192)'s keys into more, shorter blocks (many waves that end out of step,
# like (64,32,1,2048) which reads at cuDNN's rate) beat the heuristic's one slice? `tune --splits`
# times the pick at 1-8 slices (each checked against float64 first), between two benches of the
# pick, its twins and cuDNN.
GPU_DIR=.gpu/s38a source evidence/session35/scripts/common.sh
p() { pack 1 > /dev/null; }
S="--shape 8,32,1,8192,128"
s 120 bench_a $H bench $S --peers torch --rounds 3 --json /tmp/j/bench_a.json; p
grep -E "^flash_decode|^torch_cudnn" /tmp/l/bench_a.log
for k in flash_decode_m16_n128_w8_s3_mbarrier; do
  s 150 splits_8k $H tune --splits $S --split-counts 1,2,3,4,5,6,8 --json /tmp/j/splits_8k.json; p
  tail -12 /tmp/l/splits_8k.log
done
s 150 splits_64 $H tune --splits --shape 64,32,1,2048,128 --split-counts 1,2 --json /tmp/j/splits_64.json; p
tail -6 /tmp/l/splits_64.log
s 120 bench_b $H bench $S --peers torch --rounds 3 --json /tmp/j/bench_b.json; p
grep -E "^flash_decode|^torch_cudnn" /tmp/l/bench_b.log
