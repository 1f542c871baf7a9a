# Session 12, call 8: t3 (one pair of exponentials in eight by polynomial in the head-dim-64 n128 flash_ws kernels) against t2: verify t3, then three interleaved bench rounds at head dim 64.
source .gpux/s12/common.sh
for b in t3; do mkdir -p /tmp/g/$b/cubin; xz -dc .gpux/s12/$b.host.xz > /tmp/g/$b/host; chmod +x /tmp/g/$b/host; xz -dc .gpux/s12/$b.cubin.xz > /tmp/g/$b/cubin/kernels_sm_90a.cubin; cp .gpux/s12/$b.fnv /tmp/g/$b/cubin/kernels_sm_90a.ptx-fnv64; done
K64="--kernel flash_ws_m192_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier"
export FLASHRS_CUBIN_DIR=/tmp/g/t3/cubin
s 120 verify_t3 /tmp/g/t3/host verify $K64 --kernel naive --lse --layout bhsd,bshd --json /tmp/j/verify_t3.json
s 60 verify_t3_gqa /tmp/g/t3/host verify $K64 --heads-kv 2 --lse --shapes small,mission,long --json /tmp/j/verify_t3_gqa.json
s 60 random_t3 /tmp/g/t3/host verify --random 300 $K64 --json /tmp/j/random_t3.json
s 40 logit_t3 /tmp/g/t3/host verify --logit-scale 40 --shapes long,edge --lse $K64 --json /tmp/j/logit_t3.json
NS64="--shapes small,mission,large --shape 2,16,4096,64 --shape 2,8,2048,64 --shape 1,16,8192,64 --shape 1,8,2048,64"
CS64="--causal --shapes mission --shape 4,16,2048,64 --shape 2,16,4096,64 --shape 1,16,8192,64"
for rep in 1 2 3; do for b in t2 t3; do
  export FLASHRS_CUBIN_DIR=/tmp/g/$b/cubin
  s 100 poly_${b}_$rep /tmp/g/$b/host bench $K64 $NS64 --iters 40 --json /tmp/j/poly_${b}_$rep.json
  [ $rep != 3 ] && s 100 polyc_${b}_$rep /tmp/g/$b/host bench $K64 $CS64 --iters 40 --json /tmp/j/polyc_${b}_$rep.json
done; done
cd /tmp/l && tar czf $OUT/logs8.tgz *t3*.log poly*.log; cd /tmp/j && tar czf $OUT/json8.tgz *t3*.json poly*.json; ls $OUT
