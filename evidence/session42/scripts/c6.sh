# Session 42, call 6 (H200): s42e = s42d + v58's vote in the non-speculative softmax too
# (`probabilities_of`: every flash_ws kernel's loop, 16-bit and e4m3 at head dim 256). (a)
# bit-identical outputs and LSEs against s42d through `attend` (the picks of each head dim, e4m3 at
# 256, causal and not, scales 1/sqrt(D) and 20); (b) verify --quick --lse, verify --dtype e4m3
# --lse; (c) s42d / s42e alternated: the std set's picks twice, the FP8 set once.
GPU_DIR=.gpu/s42e source evidence/session35/scripts/common.sh
p() { pack 6 > /dev/null; }
mkdir -p /tmp/gd/cubin; xz -dc .gpu/s42d/host.xz > /tmp/gd/host; chmod +x /tmp/gd/host
xz -dc .gpu/s42d/kernels_sm_90a.cubin.xz > /tmp/gd/cubin/kernels_sm_90a.cubin; cp .gpu/s42d/kernels_sm_90a.ptx-fnv64 /tmp/gd/cubin/
for d in 64 128 256; do mkdir -p /tmp/in$d; python3 evidence/session41/scripts/mknpy.py /tmp/in$d 1 8 1024 $d $d; done
same() { # name, then attend arguments (without --out/--lse)
  local name=$1; shift
  FLASHRS_CUBIN_DIR=/tmp/gd/cubin timeout 60 /tmp/gd/host attend "$@" --out /tmp/j/o_old.npy --lse /tmp/j/l_old.npy > /dev/null 2>&1
  timeout 60 $H attend "$@" --out /tmp/j/o_new.npy --lse /tmp/j/l_new.npy > /dev/null 2>&1
  if [ -s /tmp/j/o_new.npy ] && cmp -s /tmp/j/o_old.npy /tmp/j/o_new.npy && cmp -s /tmp/j/l_old.npy /tmp/j/l_new.npy; then r=IDENTICAL; else r=DIFFERENT; fi
  echo "same $name: $r" >> /tmp/l/same.log; rm -f /tmp/j/*.npy
}
for c in "" --causal; do for sc in "" "--scale 20"; do
  tag=$(echo "$c$sc" | tr -d ' -')
  for d in 64 128 256; do
    I="--q /tmp/in$d/q.npy --k /tmp/in$d/k.npy --v /tmp/in$d/v.npy $c $sc"
    same d${d}_pick_$tag $I
    [ $d = 256 ] && same d${d}_e4m3_$tag $I --dtype e4m3 --quantize
  done
done; done
cat /tmp/l/same.log
s 240 verify_quick $H verify --quick --lse --json /tmp/j/verify_quick.json
s 150 verify_fp8 $H verify --dtype e4m3 --lse --json /tmp/j/verify_fp8.json
p
for r in 1 2; do
  FLASHRS_CUBIN_DIR=/tmp/gd/cubin s 200 std_${r}_d /tmp/gd/host bench --shapes std --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --iters 40 --json /tmp/j/std_${r}_d.json
  s 200 std_${r}_e $H bench --shapes std --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --iters 40 --json /tmp/j/std_${r}_e.json
  p
done
FLASHRS_CUBIN_DIR=/tmp/gd/cubin s 200 fp8_d /tmp/gd/host bench --dtype e4m3 --shapes fp8 --kernel flash_ws_fp8_m128_n128_s2_pp_ov_mbarrier --iters 40 --json /tmp/j/fp8_d.json
s 200 fp8_e $H bench --dtype e4m3 --shapes fp8 --kernel flash_ws_fp8_m128_n128_s2_pp_ov_mbarrier --iters 40 --json /tmp/j/fp8_e.json
p
for f in /tmp/l/std_*.log /tmp/l/fp8_*.log; do echo "== $f"; grep -E "^flash_ws" $f | awk "{print \$1,\$2,\$3,\$4,\$5,\$6,\$7,\$8}" | head -30; done
