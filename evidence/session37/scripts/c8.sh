# Session 37, call 8 (H200): `tune --splits` on the decode shape 0.6% behind cuDNN (8,32,1,8192,128,
# two waves of 256 unsplit blocks) and on (1,32,1,32768,128): each count of key slices checked
# against float64, then timed. Saved into a copy of the tuned table, to be taken only if a count
# beats the heuristic's by more than the spread.
GPU_DIR=.gpu/s37c source evidence/session35/scripts/common.sh
cp tuned/h100.json /tmp/j/tuned.json
s 100 tune_8x8192 $H tune --splits --shape 8,32,1,8192,128 --split-counts 1,2,3,4,8 --iters 200 --save --table /tmp/j/tuned.json --json /tmp/j/tune_8x8192.json
s 100 tune_1x32768 $H tune --splits --shape 1,32,1,32768,128 --split-counts 2,3,4,5,6,8,16 --iters 200 --save --table /tmp/j/tuned.json --json /tmp/j/tune_1x32768.json
tail -12 /tmp/l/tune_8x8192.log; tail -12 /tmp/l/tune_1x32768.log
pack 8
