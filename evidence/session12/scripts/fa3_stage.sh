# Session 11 (reused in 12): FA3's two large parts arrive halved (q1-q4: the tracked tree grew past what a 32 MB part leaves of the 64 MiB carry); join them, then the usual p3 install.
set -e
cat /tmp/fa4/p00a /tmp/fa4/p00b > /tmp/fa4/cu13.p00 && cat /tmp/fa4/p01a /tmp/fa4/p01b > /tmp/fa4/cu13.p01 && rm /tmp/fa4/p00a /tmp/fa4/p00b /tmp/fa4/p01a /tmp/fa4/p01b
bash .gpux/s12/fa4_install.sh p3
