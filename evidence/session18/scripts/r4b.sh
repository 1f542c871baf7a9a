# Session 18, call 8: the first half of FA3 again, staged for r8.sh (call 9; a first try of call 9 ran without it, the tree having outgrown the carry limit with FA3's first half: two of its wheels now travel with the second half).
bash .fa4/a/install.sh a
