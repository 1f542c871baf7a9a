# Session 31, call 1 (H100): FA3's first half (flash-attn-4 staged in /tmp/fa4); the call carries
# nothing else (the staged half is most of a call's carry).
bash .fa4/a/install.sh a || exit 3
