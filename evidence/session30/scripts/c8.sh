# Session 30, call 8 (H100), right after call 7: FA3's second half, then the causal rows of the
# README's set (std's three causal shapes) on s30e (v45: the library's causal pick is the
# persistent twin walking the host's item table), with torch and FA3 and the grid twin
# `flash_ws_m128_n128_s2_pp_ov`, two rounds, in f16 and bf16.
cp .fa4/b/*.whl /tmp/fa4/ 2>/dev/null; bash .fa4/b/install.sh b || exit 3
GPU_DIR=.gpu/s30e source evidence/session30/scripts/common.sh
export PYTHONPATH=$(cat /tmp/fa4/pythonpath 2>/dev/null)
for DT in f16 bf16; do
  s 280 bench_causal_$DT $H bench --causal --shape 2,8,512,64 --shape 2,16,4096,128 --shape 1,16,16384,128 --dtype $DT --peers torch,fa3 --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --rounds 2 --iters 60 --json /tmp/j/bench_causal_$DT.json
  grep -A8 "speedup\|vs cuDNN" /tmp/l/bench_causal_$DT.log | tail -8
done
pack 8
