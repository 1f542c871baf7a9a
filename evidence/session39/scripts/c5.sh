# Session 39, call 5 (H200): FA3 first half (flash-attn-4, ../shared/peers/fa4/stage.sh), carried as
# .fa4/a with evidence/ moved aside (the tree limit).
bash .fa4/a/install.sh a
