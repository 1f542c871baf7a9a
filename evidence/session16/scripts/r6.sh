# Session 16, call 6 (after `bash .fa4/a/install.sh a`): install FA3's second half; t3's evidence bench, std + (2,16,4096,256), fp16, with torch and FA3.
rm -rf /tmp/l /tmp/j
B=t3 source .gpux/fa/common.sh
cp .fa4/b/*.whl /tmp/fa4/ && bash .fa4/b/install.sh b > /tmp/l/fa4_install.log 2>&1; echo "fa4 rc=$?"; tail -1 /tmp/l/fa4_install.log
export PYTHONPATH=$(cat /tmp/fa4/pythonpath 2>/dev/null)
s 420 bench_f16 $H bench --shapes std --shape 2,16,4096,256 --peers torch,fa3 --iters 40 --plot /tmp/j/bench_h100.svg --json /tmp/j/bench_h100.json
cp /tmp/l/bench_f16.log /tmp/j/bench_h100.log
pack 6; cp /tmp/j/bench_h100.svg /tmp/j/bench_h100.log $OUT/
