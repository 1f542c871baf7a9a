# Session 12, call 4: t2's correctness evidence (verify every set with the new kernels, GQA + LSE, MQA + LSE, 1000 random, repeat 250), the four sanitizers on the three-consumer kernels, persistent A/B at head dim 64, ncu.
source .gpux/s12/common.sh
s 150 verify $H verify $WS --kernel naive --lse --layout bhsd,bshd --json /tmp/j/verify_h100.json
s 60 verify_gqa $H verify $M3 --heads-kv 2 --lse --layout bhsd,bshd --shapes small,mission,long --json /tmp/j/verify_gqa_lse_h100.json
s 60 verify_mqa $H verify --heads-kv 1 --lse --shapes small,mission,long --json /tmp/j/verify_mqa_lse_h100.json
s 100 random $H verify --random 1000 --json /tmp/j/verify_random_h100.json
s 60 repeat $H verify --repeat 250 --shapes small,mission,odd,edge $M3 --json /tmp/j/verify_repeat_h100.json
for tool in memcheck racecheck synccheck initcheck; do s 45 san_$tool compute-sanitizer --tool $tool $H verify --quick --seed 23 $M3; done
s 100 ps_1 $H bench $M3 $PS --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier $NS --iters 40 --json /tmp/j/ps_1.json
cd /tmp/l && tar czf $OUT/logs4.tgz *.log; cd /tmp/j && tar czf $OUT/json4.tgz *.json; ls $OUT
