# Session 46, call 6 (H200): s46base = this tree. `tune --splits` on issue #11's two decode
# shapes still under cuDNN or at it, which session 40 did not sweep: grouped B=16
# (16,32/8,1,32768,128), 128 blocks at one slice on 132 SMs, and (1,32,1,32768,128), four slices
# by the heuristic. Each count is checked against float64 before it is timed. (A first try
# passed --peers, which --splits refuses: exit 2 before any launch.)
GPU_DIR=.gpu/s46base source .gpu/s46base/common.sh
p() { pack 6 > /dev/null; }
s 240 splits_g16 $H tune --splits --shape 16,32,1,32768,128 --heads-kv 8 --split-counts 1,2,3,4,6,8,16,32 --json /tmp/j/splits_g16.json; p
s 200 splits_b1 $H tune --splits --shape 1,32,1,32768,128 --split-counts 2,3,4,5,6,8,16 --json /tmp/j/splits_b1.json; p
for f in splits_g16 splits_b1; do echo "== $f"; tail -22 /tmp/l/$f.log | cut -c1-150; done
