# Session 14, call 4: the evidence benches of issue #11 (build t2).
B=t2 source .gpux/s14/common.sh
s 400 bench $H bench --shapes decode --shape 1,8,2048,64 --shape 1,8,2048,128 --block-size 16,256 --peers torch --json /tmp/j/bench_decode_h100.json
s 150 varlen $H bench --varlen --shapes small --peers torch --json /tmp/j/bench_varlen_h100.json
grep -E "^note: varlen" /tmp/l/varlen.log
grep -A12 -E "^ +shape .*ours" /tmp/l/bench.log | head -14
pack 4
