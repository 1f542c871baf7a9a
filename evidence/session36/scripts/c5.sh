# Session 36, call 5 (H200): s36d = s36c + the decode ring's L2 prefetch (the producer starts the
# K and V boxes of the tile two past its slots into L2 with cp.async.bulk.prefetch.tensor, so more
# of the stream is in flight than the 128 KB the slots hold). Its verify (splitkv, paged, grouped),
# then the decode set, s36d (with cuDNN) / s36c / s36d / s36c, the pick and the two-per-SM twin.
GPU_DIR=.gpu/s36d source evidence/session35/scripts/common.sh
mkdir -p /tmp/g_s36c/cubin && xz -dc .gpu/s36c/host.xz > /tmp/g_s36c/host && chmod +x /tmp/g_s36c/host
xz -dc .gpu/s36c/kernels_sm_90a.cubin.xz > /tmp/g_s36c/cubin/kernels_sm_90a.cubin && cp .gpu/s36c/kernels_sm_90a.ptx-fnv64 /tmp/g_s36c/cubin/
mkdir -p /tmp/g_s36d && ln -sf /tmp/g/host /tmp/g_s36d/host && ln -sfn /tmp/g/cubin /tmp/g_s36d/cubin
D="--kernel flash_decode_m16_n128_w8_s3_mbarrier --kernel flash_decode_m16_n64_w4_s3_mbarrier --kernel flash_decode_m16_n64_w4_s4_mbarrier"
s 120 verify_d $H verify --shapes splitkv,paged --lse --layout bhsd,bshd $D --json /tmp/j/verify_d.json
s 60 verify_d_gqa $H verify --shapes splitkv --heads-kv 2 --lse $D --json /tmp/j/verify_d_gqa.json
r() { local v=$1 n=$2; shift 2; FLASHRS_CUBIN_DIR=/tmp/g_$v/cubin s 150 ${n}_$v /tmp/g_$v/host bench --shapes decode "$@" --rounds 1 --json /tmp/j/${n}_$v.json; }
r s36d ab1 $D --peers torch
r s36c ab2 $D
r s36d ab3 $D
r s36c ab4 $D --peers torch
for f in /tmp/l/ab*.log; do echo "== $(basename $f .log)"; grep -E "^(flash_decode|torch_cudnn)" $f | sed -E 's/ +/ /g' | cut -d' ' -f1-10; done
pack 5
