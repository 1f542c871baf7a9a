# Session 35, call 3 (H100): s34e (= HEAD c91261b), s35a (idle warpgroups skip their tiles; the
# last tile's P V trimmed to halves) and s35b (the idle warpgroups only), in ABC CBA order: the
# persistent pick on three dense shapes (one of them the varlen case's dense twin, 1,16,8793),
# and the varlen batch non-causal and causal.
GPU_DIR=.gpu/s35a source evidence/session35/scripts/common.sh
for v in s34e_slim s35b; do
  mkdir -p /tmp/g_$v/cubin && xz -dc .gpu/$v/host.xz > /tmp/g_$v/host && chmod +x /tmp/g_$v/host
  xz -dc .gpu/$v/kernels_sm_90a.cubin.xz > /tmp/g_$v/cubin/kernels_sm_90a.cubin && cp .gpu/$v/kernels_sm_90a.ptx-fnv64 /tmp/g_$v/cubin/
done
mkdir -p /tmp/g_s35a && ln -sf /tmp/g/host /tmp/g_s35a/host && ln -sfn /tmp/g/cubin /tmp/g_s35a/cubin
ln -sfn /tmp/g_s34e_slim /tmp/g_s34e
K="--kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --rounds 1"
D="bench --shape 4,16,2048,128 --shape 2,16,4096,128 --shape 1,16,8793,128 $K"
V="bench --varlen --shape 1,16,128,128 $K"
i=0; j=0; k=0
r() { local v=$1 n=$2; shift 2; FLASHRS_CUBIN_DIR=/tmp/g_$v/cubin s 120 ${n}_$v /tmp/g_$v/host "$@" --json /tmp/j/${n}_$v.json; }
for v in s34e s35a s35b s35b s35a s34e; do r $v dense$((++i)) $D; done
for v in s34e s35a s35b s35b s35a s34e; do r $v varlen$((++j)) $V; done
for v in s34e s35a s35b s35b s35a s34e; do r $v causal$((++k)) $V --causal; done
for f in /tmp/l/dense*.log; do echo "$(basename $f .log) $(grep -E '^flash_ws' $f | awk '{printf "%s %s | ", $2$3$4$5, $7}')"; done
for f in /tmp/l/varlen*.log /tmp/l/causal*.log; do echo "$(basename $f .log) $(grep -hE '^note: varlen' $f | grep -oE '(mbarrier_varlen [0-9.]+ us|bhsd\) [0-9.]+ us|takes [0-9.]+x)' | tr '\n' ' ')"; done
pack 3
