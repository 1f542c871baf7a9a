# Session 41, call 1 (H200): s41a = s38a + v57 (a tile's first exponentials taken from the kept row
# maxima beside the search for the tile's own; recomputed where a row's maximum moves).
# (a) bit-identical outputs and LSEs against s38a through `attend` on the same inputs (picks of
# each head dim, e4m3, causal and not, a large scale that moves maxima often); (b) verify --quick
# --lse and the e4m3 set; (c) A/B s38a / s41a alternated: the FP8 set (e4m3 pick beside the fp16
# kernels) and the std set's fp16 picks.
GPU_DIR=.gpu/s41a source evidence/session35/scripts/common.sh
p() { pack 1 > /dev/null; }
mkdir -p /tmp/g_old/cubin; xz -dc .gpu/s38a/host.xz > /tmp/g_old/host; chmod +x /tmp/g_old/host
xz -dc .gpu/s38a/kernels_sm_90a.cubin.xz > /tmp/g_old/cubin/kernels_sm_90a.cubin; cp .gpu/s38a/kernels_sm_90a.ptx-fnv64 /tmp/g_old/cubin/
# (a) bit-identity
for d in 64 128 256; do mkdir -p /tmp/in$d; python3 evidence/session41/scripts/mknpy.py /tmp/in$d 1 8 1024 $d $d; done
same() { # name, then attend arguments (without --out/--lse)
  local name=$1; shift
  FLASHRS_CUBIN_DIR=/tmp/g_old/cubin timeout 60 /tmp/g_old/host attend "$@" --out /tmp/j/${name}_old.npy --lse /tmp/j/${name}_old_lse.npy > /tmp/l/same_${name}_old.log 2>&1
  timeout 60 $H attend "$@" --out /tmp/j/${name}_new.npy --lse /tmp/j/${name}_new_lse.npy > /tmp/l/same_${name}_new.log 2>&1
  if cmp -s /tmp/j/${name}_old.npy /tmp/j/${name}_new.npy && cmp -s /tmp/j/${name}_old_lse.npy /tmp/j/${name}_new_lse.npy; then echo "same $name: IDENTICAL"; else echo "same $name: DIFFERENT"; tail -2 /tmp/l/same_${name}_*.log; fi
  rm -f /tmp/j/${name}_*.npy
}
for c in "" --causal; do for sc in "" "--scale 3"; do
  tag=$(echo "$c$sc" | tr -d ' -')
  for d in 64 128 256; do
    I="--q /tmp/in$d/q.npy --k /tmp/in$d/k.npy --v /tmp/in$d/v.npy $c $sc"
    case $d in 64) K="flash_ws_m192_n128_s2_pp_ov_ps_mbarrier flash_ws_m128_n128_s2_pp_ov_mbarrier";; 128) K="flash_ws_m128_n128_s2_pp_ov_ps_mbarrier flash_ws_m128_n176_s2_pp_ov_mbarrier";; 256) K="flash_ws_m128_n80_s2_pp_ov_mbarrier";; esac
    for k in $K; do same d${d}_${k}_$tag $I --kernel $k; done
    [ $d = 64 ] || same d${d}_e4m3_$tag $I --dtype e4m3 --quantize
  done
done; done
p
# (b) correctness of the new build
s 240 verify_quick $H verify --quick --lse --json /tmp/j/verify_quick.json; p
s 150 verify_fp8 $H verify --dtype e4m3 --lse --json /tmp/j/verify_fp8.json; p
# (c) A/B
ab() { # name, then bench arguments
  local name=$1; shift
  FLASHRS_CUBIN_DIR=/tmp/g_old/cubin s 200 ${name}_old /tmp/g_old/host bench "$@" --json /tmp/j/${name}_old.json
  s 200 ${name}_new $H bench "$@" --json /tmp/j/${name}_new.json
  p
}
F="--dtype e4m3 --shapes fp8 --kernel flash_ws_fp8_m128_n128_s2_pp_ov_mbarrier --iters 40"
ab fp8a $F
ab fp8b $F
S="--shapes std --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --iters 40"
ab stda $S
ab stdb $S
for f in /tmp/l/fp8*.log /tmp/l/std*.log; do echo "== $f"; grep -E "^flash_ws" $f | awk "{print \$1,\$2,\$3,\$4,\$5,\$6,\$7,\$(NF-1)}" | head -30; done
for f in /tmp/l/verify*.log; do echo "$(basename $f): $(grep -E '^PASS|^FAIL|passed|failed' $f | tail -1)"; done
