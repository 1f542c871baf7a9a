# Session 30, call 7 (H100): FA3's first half (flash-attn-4, staged by ../shared/peers/fa4/stage.sh).
bash .fa4/a/install.sh a
