# Session 12, call 1: t1 (three consumer warpgroups at head dim 64: flash_ws_m192_*) verified and benched against the head-dim-64 picks and cuDNN.
source .gpux/s12/common_t1.sh  # (as it ran: build t1, whose common.sh this is)
s 120 verify $H verify $M3 --kernel naive --lse --layout bhsd,bshd --json /tmp/j/verify_m3.json
s 80 verify_gqa $H verify $M3 --heads-kv 2 --lse --shapes small,mission,long,odd,edge --json /tmp/j/verify_gqa_m3.json
s 60 random $H verify --random 200 $M3 --json /tmp/j/random_m3.json
s 150 plain_1 $H bench $OLD $M3 $NS --peers torch --iters 40 --json /tmp/j/plain_1.json
s 120 causal_1 $H bench $OLD $M3 $CS --peers torch --iters 40 --json /tmp/j/causal_1.json
cd /tmp/l && tar czf $OUT/logs1.tgz *.log; cd /tmp/j && tar czf $OUT/json1.tgz *.json; ls $OUT
