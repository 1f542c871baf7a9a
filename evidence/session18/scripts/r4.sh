# Session 18, call 4: the first half of FA3 (flash-attn-4), staged for call 5.
bash .fa4/a/install.sh a
