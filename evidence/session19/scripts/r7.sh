# Session 19, call 7 (right after FA3's two halves, calls 5 and 6: `bash .fa4/a/install.sh a`, then
# `cp .fa4/b/*.whl /tmp/fa4/ && bash .fa4/b/install.sh b`): build t3 (t2's kernels, the dispatch taking the 192-row
# persistent kernel at head dim 64 from one wave and 2048 rows): the fp16 evidence bench (std + (2,16,4096,256), torch + FA3).
source .gpux/s19/common.sh
use t3
export PYTHONPATH=$(cat /tmp/fa4/pythonpath 2>/dev/null)
s 560 bench_f16 $H bench --shapes std --shape 2,16,4096,256 --peers torch,fa3 --iters 60 --plot /tmp/j/bench_h100.svg --json /tmp/j/bench_h100.json
cp /tmp/l/bench_f16.log /tmp/j/bench_h100.log
pack 7
