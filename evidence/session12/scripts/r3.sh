# Session 12, call 3 (after the FA3 staging calls): install FA3; t2's evidence bench (std + (2,16,4096,256), fp16 and bf16) with torch and FA3.
source .gpux/s12/common.sh
bash .gpux/s12/fa3_stage.sh > /tmp/l/fa4_install.log 2>&1; echo "fa4 rc=$?"; tail -1 /tmp/l/fa4_install.log
export PYTHONPATH=$(cat /tmp/fa4/pythonpath 2>/dev/null)
s 280 bench_f16 $H bench --shapes std --shape 2,16,4096,256 --peers torch,fa3 --iters 40 --json /tmp/j/bench_h100.json
s 250 bench_bf16 $H bench --shapes std --shape 2,16,4096,256 --dtype bf16 --peers torch,fa3 --iters 40 --json /tmp/j/bench_bf16_h100.json
cd /tmp/l && tar czf $OUT/logs3.tgz *.log; cd /tmp/j && tar czf $OUT/json3.tgz *.json; ls $OUT
