# Session 35, call 2 (H100): call 1's varlen A/B again, three alternations (ABBAAB) non-causal and
# causal: s35a against s34e (= HEAD c91261b), the persistent pick and its dense case.
GPU_DIR=.gpu/s35a source evidence/session35/scripts/common.sh
mkdir -p /tmp/ga/cubin && xz -dc .gpu/s34e_slim/host.xz > /tmp/ga/host && chmod +x /tmp/ga/host
xz -dc .gpu/s34e_slim/kernels_sm_90a.cubin.xz > /tmp/ga/cubin/kernels_sm_90a.cubin && cp .gpu/s34e_slim/kernels_sm_90a.ptx-fnv64 /tmp/ga/cubin/
V="bench --varlen --shape 1,16,128,128 --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --rounds 1"
a() { FLASHRS_CUBIN_DIR=/tmp/ga/cubin s 120 "$1" /tmp/ga/host $V "${@:2}" --json /tmp/j/$1.json; }
b() { s 120 "$1" $H $V "${@:2}" --json /tmp/j/$1.json; }
for c in "" --causal; do
  n=varlen${c#--}
  a ${n}_s34e_1 $c; b ${n}_s35a_1 $c; b ${n}_s35a_2 $c; a ${n}_s34e_2 $c; a ${n}_s34e_3 $c; b ${n}_s35a_3 $c
done
for f in /tmp/l/varlen*.log; do echo "$(basename $f) $(grep -hE '^note: varlen' $f | grep -oE '(ours [a-z_0-9]+ [0-9.]+ us|bhsd\) [0-9.]+ us|takes [0-9.]+x)' | tr '\n' ' ')"; done
pack 2
