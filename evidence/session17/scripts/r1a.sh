# Session 17, call 1: install FA3's first half (flash-attn-4); call 2 follows at once.
bash .fa4/a/install.sh a > /tmp/fa4_a.log 2>&1; echo "fa4 a rc=$?"; tail -2 /tmp/fa4_a.log; nvidia-smi -q -d CLOCK,POWER,PERFORMANCE,TEMPERATURE > $OUT/smi_q_idle.txt 2>&1; nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,power.default_limit --format=csv
