# Session 36, call 6 (H200): two ways the decode pick might read K and V closer to DRAM's peak,
# against s36c (= HEAD's kernels plus the experimental variants), alternated c e f f e c:
# s36e = s36c's kernels with every tensor map's L2 promotion 128 bytes instead of 256 (host only;
# ncu in c3 had 26% L2 hits in our kernel, 0.5% in cuDNN's); s36f = the producer issues K's two
# column blocks, then V's (the halves of each row back to back; was K0 V0 K1 V1). The decode set
# and paged caches of 16 keys per page, the pick; cuDNN in the first and last runs; the 16-bit
# flash_ws picks at two shapes (s36c against s36e: the promotion is theirs too).
GPU_DIR=.gpu/s36f source evidence/session35/scripts/common.sh
for v in s36c s36e; do
  mkdir -p /tmp/g_$v/cubin && xz -dc .gpu/$v/host.xz > /tmp/g_$v/host && chmod +x /tmp/g_$v/host
  xz -dc .gpu/$v/kernels_sm_90a.cubin.xz > /tmp/g_$v/cubin/kernels_sm_90a.cubin && cp .gpu/$v/kernels_sm_90a.ptx-fnv64 /tmp/g_$v/cubin/
done
mkdir -p /tmp/g_s36f && ln -sf /tmp/g/host /tmp/g_s36f/host && ln -sfn /tmp/g/cubin /tmp/g_s36f/cubin
s 60 verify_f $H verify --shapes splitkv,paged --lse --kernel flash_decode_m16_n128_w8_s3_mbarrier --json /tmp/j/verify_f.json
r() { local v=$1 n=$2; shift 2; FLASHRS_CUBIN_DIR=/tmp/g_$v/cubin s 150 ${n}_$v /tmp/g_$v/host bench "$@" --rounds 1 --json /tmp/j/${n}_$v.json; }
P="--shapes decode --block-size 16 --kernel flash_decode_m16_n128_w8_s3_mbarrier"
W="--shape 2,16,4096,128 --shape 4,16,2048,64 --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier"
i=0
for v in s36c s36e s36f s36f s36e s36c; do
  i=$((i+1)); peers=""; { [ $i = 1 ] || [ $i = 6 ]; } && peers="--peers torch"
  r $v dec$i $P $peers
done
r s36c ws1 $W; r s36e ws2 $W; r s36e ws3 $W; r s36c ws4 $W
for f in /tmp/l/dec*.log /tmp/l/ws*.log; do echo "== $(basename $f .log)"; grep -E "^(flash_|torch_cudnn)" $f | sed -E 's/ +/ /g' | cut -d' ' -f1-8; done
pack 6
