# Session 35, call 6 (H100): s35e = this tree (v51): issue #11's whole bench in one run, as
# session 34's c1: the decode set + the two short prompts, paged at 16 and 256 keys per page, the
# varlen batch (16 sequences of 1-4096, H=16, D=128) beside its dense and padded cases, the
# dispatch's picks, the decode kernels and the persistent flash_ws, torch's backends in the same
# run, two rounds (evidence/bench_decode_h100.json).
GPU_DIR=.gpu/s35e source evidence/session35/scripts/common.sh
K="--kernel flash_decode_m16_n128_w8_s3_mbarrier --kernel flash_decode_m16_n64_w4_s4_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_mbarrier --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier"
s 585 bench_decode $H bench --shapes decode --shape 1,8,2048,64 --shape 1,8,2048,128 --block-size 16,256 --varlen --peers torch $K --rounds 2 --json /tmp/j/bench_decode_h100.json
cp /tmp/l/bench_decode.log /tmp/j/bench_decode_h100.log
grep -A14 "speedup" /tmp/l/bench_decode.log | tail -15; grep -E "^note" /tmp/l/bench_decode.log | tail -8
# Then s35e (v51 as committed: the table lookups shared by `Schedule::listed_entry`) against
# s34e (= HEAD c91261b's kernels) once more, ABBA: the varlen batch and its dense twin, the
# head-dim-64 persistent pick.
mkdir -p /tmp/g_s34e/cubin && xz -dc .gpu/s34e_slim/host.xz > /tmp/g_s34e/host && chmod +x /tmp/g_s34e/host
xz -dc .gpu/s34e_slim/kernels_sm_90a.cubin.xz > /tmp/g_s34e/cubin/kernels_sm_90a.cubin && cp .gpu/s34e_slim/kernels_sm_90a.ptx-fnv64 /tmp/g_s34e/cubin/
mkdir -p /tmp/g_s35e && ln -sf /tmp/g/host /tmp/g_s35e/host && ln -sfn /tmp/g/cubin /tmp/g_s35e/cubin
V="bench --varlen --shape 1,16,128,128 --kernel flash_ws_m128_n128_s2_pp_ov_ps_mbarrier --rounds 1"
S="bench --shape 4,16,2048,64 --shape 2,8,2048,64 --kernel flash_ws_m192_n128_s2_pp_ov_ps_mbarrier --rounds 1"
r() { local v=$1 n=$2; shift 2; FLASHRS_CUBIN_DIR=/tmp/g_$v/cubin s 120 ${n}_$v /tmp/g_$v/host "$@" --json /tmp/j/${n}_$v.json; }
i=0
for v in s34e s35e s35e s34e; do i=$((i+1)); r $v varlen$i $V; r $v d64_$i $S; done
for f in /tmp/l/d64*.log; do echo "$(basename $f .log) $(grep -E '^flash_ws' $f | awk '{printf "%s %s %s | ", $1, $2$3$4$5, $7}')"; done
for f in /tmp/l/varlen*.log; do echo "$(basename $f .log) $(grep -hE '^note: varlen' $f | grep -oE '(mbarrier_varlen [0-9.]+ us|bhsd\) [0-9.]+ us|takes [0-9.]+x)' | tr '\n' ' ')"; done
pack 6
