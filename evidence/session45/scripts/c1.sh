# Session 45, call 1 (H200): s45b = HEAD + v63 (e4m3 head dim 128: the first looks at a tile's V
# and at the next tile's K taken early, `schedule::early_barrier_looks`) + two experimental e4m3
# twins appended to kernels.toml (the persistent walk with three consumers and 96-key tiles,
# `m192_n96_..._ps`; the persistent pick with three stages, `s3_..._ps`). s45a (= HEAD's kernels
# plus the m192 twin, whose tiles take no early looks) travels in .gpu/s45b/old.
# (a) verify of the new pick and both twins with LSE; (b) s45a's pick against s45b's pick and
# twins, alternated twice; causal apart.
GPU_DIR=.gpu/s45b source .gpu/s45b/common.sh
p() { pack 1 > /dev/null; }
mkdir -p /tmp/go/cubin; xz -dc .gpu/s45b/old/host.xz > /tmp/go/host; chmod +x /tmp/go/host
xz -dc .gpu/s45b/old/kernels_sm_90a.cubin.xz > /tmp/go/cubin/kernels_sm_90a.cubin; cp .gpu/s45b/old/kernels_sm_90a.ptx-fnv64 /tmp/go/cubin/
PS=flash_ws_fp8_m128_n128_s2_pp_ov_ps_mbarrier; P3=flash_ws_fp8_m128_n128_s3_pp_ov_ps_mbarrier
M3=flash_ws_fp8_m192_n96_s2_pp_ov_ps_mbarrier
s 200 verify $H verify --dtype e4m3 --lse --kernel $PS --kernel $P3 --kernel $M3 --json /tmp/j/verify.json; p
X="--dtype e4m3 --shape 2,16,4096,128 --shape 1,16,8192,128 --shape 4,32,2048,128 --iters 40"
C="--dtype e4m3 --shape 2,16,4096,128 --causal --iters 40"
for r in 1 2; do
  FLASHRS_CUBIN_DIR=/tmp/go/cubin s 150 old_$r /tmp/go/host bench $X --kernel $PS --json /tmp/j/old_$r.json; p
  s 150 new_$r $H bench $X --kernel $PS --kernel $P3 --kernel $M3 --json /tmp/j/new_$r.json; p
  FLASHRS_CUBIN_DIR=/tmp/go/cubin s 100 oldc_$r /tmp/go/host bench $C --kernel $PS --json /tmp/j/oldc_$r.json; p
  s 100 newc_$r $H bench $C --kernel $PS --kernel $P3 --json /tmp/j/newc_$r.json; p
done
grep -hE "^test result|^PASS|^FAIL|SUMMARY" /tmp/l/*.log | sort | uniq -c
for f in old_1 new_1 oldc_1 newc_1 old_2 new_2 oldc_2 newc_2; do echo "== $f"; grep -E "^flash_ws" /tmp/l/$f.log | awk '{print $1,$2,$4,$5,$6,$7,$8,$9,$(NF-2),$NF}' | sed 's/flash_ws_fp8_//'; done
