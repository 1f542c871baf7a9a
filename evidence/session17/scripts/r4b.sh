# Session 17, call 9 (after FA3's first half): FA3's second half; build t3 (t1 plus the causal head-dim-128 dispatch on n128): the fp16 evidence bench (std + (2,16,4096,256), torch + FA3, 500 ms warm-ups, clocks recorded).
rm -rf /tmp/l /tmp/j
B=t3 source .gpux/s17/common.sh
cp .fa4/b/*.whl /tmp/fa4/ && bash .fa4/b/install.sh b > /tmp/l/fa4_install.log 2>&1; echo "fa4 rc=$?"; tail -1 /tmp/l/fa4_install.log
export PYTHONPATH=$(cat /tmp/fa4/pythonpath 2>/dev/null)
s 520 bench_f16 $H bench --shapes std --shape 2,16,4096,256 --peers torch,fa3 --iters 60 --plot /tmp/j/bench_h100.svg --json /tmp/j/bench_h100.json
cp /tmp/l/bench_f16.log /tmp/j/bench_h100.log
pack 9
