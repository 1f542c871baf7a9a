# Session 35, call 1 (H100): s35a = this tree (a warpgroup whose 64 rows all lie past the last
# query row skips its tiles; an item's last tile's P V only over the 16-key steps its group
# sees, whole or first half) against s34e (= HEAD c91261b) on the varlen batch of issue #11
# (16 sequences of 1-4096, H=16, D=128) and its dense case, the persistent pick, non-causal in
# ABBA order and causal once each; then verify of the varlen set.
GPU_DIR=.gpu/s35a source evidence/session35/scripts/common.sh
mkdir -p /tmp/ga/cubin && xz -dc .gpu/s34e_slim/host.xz > /tmp/ga/host && chmod +x /tmp/ga/host
xz -dc .gpu/s34e_slim/kernels_sm_90a.cubin.xz > /tmp/ga/cubin/kernels_sm_90a.cubin && cp .gpu/s34e_slim/kernels_sm_90a.ptx-fnv64 /tmp/ga/cubin/
V="bench --varlen --shape 1,16,128,128 --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --rounds 1"
a() { FLASHRS_CUBIN_DIR=/tmp/ga/cubin s 120 "$1" /tmp/ga/host $V "${@:2}" --json /tmp/j/$1.json; }
b() { s 120 "$1" $H $V "${@:2}" --json /tmp/j/$1.json; }
a varlen_s34e_1; b varlen_s35a_1; b varlen_s35a_2; a varlen_s34e_2
a varlencausal_s34e --causal; b varlencausal_s35a --causal
for f in /tmp/l/varlen*.log; do echo "$f"; grep -hE "^note: varlen" $f | cut -c1-220; done
s 150 verify_varlen $H verify --shapes varlen --lse --json /tmp/j/verify_varlen.json
pack 1
