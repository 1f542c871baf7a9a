# Session 43, call 7 (H200): FA3's first half staged (`bash .fa4/a/install.sh a`); nothing else.
bash .fa4/a/install.sh a
