# Session 32, call 5 (H100): FA3's first half (flash-attn-4, ../shared/peers/fa4/stage.sh), carried
# as .fa4/a with evidence/ moved aside so that the call fits the carry limit.
bash .fa4/a/install.sh a
