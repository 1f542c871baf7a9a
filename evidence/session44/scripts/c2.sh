# Session 44, call 2 (H200): s44b = HEAD + the speculative exponentials also for 192-key e4m3
# tiles, and a persistent 192-key e4m3 twin (experimental). (a) verify of the two 192-key kernels
# with LSE; (b) the 128-key pick against them in one process, both orders; (c) the 192-key grid
# kernel of s43c (no speculation) for reference.
GPU_DIR=.gpu/s44b source .gpu/s44b/common.sh
p() { pack 2 > /dev/null; }
PS=flash_ws_fp8_m128_n128_s2_pp_ov_ps_mbarrier
G192=flash_ws_fp8_m128_n192_s2_pp_ov_mbarrier; P192=flash_ws_fp8_m128_n192_s2_pp_ov_ps_mbarrier
s 200 verify_192 $H verify --dtype e4m3 --lse --kernel $G192 --kernel $P192 --json /tmp/j/verify_192.json; p
X="--shapes fp8 --shape 4,32,2048,128 --iters 40"
mkdir -p /tmp/gc/cubin; xz -dc .gpu/s43c/host.xz > /tmp/gc/host; chmod +x /tmp/gc/host
xz -dc .gpu/s43c/kernels_sm_90a.cubin.xz > /tmp/gc/cubin/kernels_sm_90a.cubin; cp .gpu/s43c/kernels_sm_90a.ptx-fnv64 /tmp/gc/cubin/
for r in 1 2; do
  s 150 ab_$r $H bench --dtype e4m3 $X --kernel $PS --kernel $P192 --kernel $G192 --json /tmp/j/ab_$r.json; p
  s 150 ba_$r $H bench --dtype e4m3 $X --kernel $G192 --kernel $P192 --kernel $PS --json /tmp/j/ba_$r.json; p
done
FLASHRS_CUBIN_DIR=/tmp/gc/cubin s 150 old192 /tmp/gc/host bench --dtype e4m3 $X --kernel $G192 --kernel $PS --json /tmp/j/old192.json; p
grep -hE "^test result|^PASS|^FAIL|SUMMARY" /tmp/l/*.log | sort | uniq -c
for f in ab_1 ba_1 ab_2 ba_2 old192; do echo "== $f"; grep -E "^flash_ws_fp8" /tmp/l/$f.log | grep -v "256\]" | awk '{print $1,$2,$3,$4,$5,$6,$7,$8,$9,$(NF-3),$NF}' | sed 's/flash_ws_fp8_m128_//'; done
