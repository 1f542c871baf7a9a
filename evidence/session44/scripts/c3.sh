# Session 44, call 3 (H200): s44c = HEAD + the overlapped loop's ping-pong turn round each tile's
# softmax instead of round the issue of the products, for e4m3 at head dim 128 with 128-key tiles
# (`schedule::turns_round_softmax`). (a) verify of both e4m3 head-dim-128 kernels with LSE (and
# at scale 1.0), synccheck and racecheck of the pick on the odd shapes; (b) s44b (= HEAD for these
# kernels) and s44c alternated twice on the FP8 set and (4,32,2048,128).
GPU_DIR=.gpu/s44c source .gpu/s44c/common.sh
p() { pack 3 > /dev/null; }
PS=flash_ws_fp8_m128_n128_s2_pp_ov_ps_mbarrier; GR=flash_ws_fp8_m128_n128_s2_pp_ov_mbarrier
s 200 verify $H verify --dtype e4m3 --lse --kernel $PS --kernel $GR --json /tmp/j/verify.json; p
s 100 verify_scale $H verify --dtype e4m3 --lse --scale 1.0 --kernel $PS --kernel $GR --json /tmp/j/verify_scale.json; p
mkdir -p /tmp/gb/cubin; xz -dc .gpu/s44b/host.xz > /tmp/gb/host; chmod +x /tmp/gb/host
xz -dc .gpu/s44b/kernels_sm_90a.cubin.xz > /tmp/gb/cubin/kernels_sm_90a.cubin; cp .gpu/s44b/kernels_sm_90a.ptx-fnv64 /tmp/gb/cubin/
X="--shapes fp8 --shape 4,32,2048,128 --iters 40 --kernel $PS --kernel $GR"
for r in 1 2; do
  FLASHRS_CUBIN_DIR=/tmp/gb/cubin s 120 old_$r /tmp/gb/host bench --dtype e4m3 $X --json /tmp/j/old_$r.json; p
  s 120 new_$r $H bench --dtype e4m3 $X --json /tmp/j/new_$r.json; p
done
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
for tool in synccheck racecheck; do
  s 120 san_$tool $CS --tool $tool --print-limit 20 $H verify --dtype e4m3 --shapes odd --kernel $PS --seed 7; p
done
grep -hE "^test result|^PASS|^FAIL|SUMMARY" /tmp/l/*.log | sort | uniq -c
for f in old_1 new_1 old_2 new_2; do echo "== $f"; grep -E "^flash_ws_fp8" /tmp/l/$f.log | grep -v pick | awk '{print $1,$3,$4,$5,$6,$7,$8,$9,$(NF-3),$NF}' | sed 's/flash_ws_fp8_m128_//'; done
