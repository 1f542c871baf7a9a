# Session 18, call 5 (right after FA3's first half, `bash .fa4/a/install.sh a`): FA3's second half; build t3: the fp16 evidence bench (std + (2,16,4096,256), torch + FA3, 500 ms warm-ups, clocks recorded).
source .gpux/s18/common.sh
use t3
cp .fa4/b/*.whl /tmp/fa4/ && bash .fa4/b/install.sh b > /tmp/l/fa4_install.log 2>&1; echo "fa4 rc=$?"; tail -1 /tmp/l/fa4_install.log
export PYTHONPATH=$(cat /tmp/fa4/pythonpath 2>/dev/null)
s 540 bench_f16 $H bench --shapes std --shape 2,16,4096,256 --peers torch,fa3 --iters 60 --plot /tmp/j/bench_h100.svg --json /tmp/j/bench_h100.json
cp /tmp/l/bench_f16.log /tmp/j/bench_h100.log
pack 5
