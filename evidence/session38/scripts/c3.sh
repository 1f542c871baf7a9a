# Session 38, call 3 (H200): s38c = s38b with the walk's producer looking tiles up by multiplies
# (`Divisor`) instead of three divisions per refill (PTX fnv db289e5b814a1ec7). The persistent
# walk against the grid pick on the decode set and the wave probes, torch in the same run, three
# rounds; then its splitkv set (LSE) and 100 random problems.
GPU_DIR=.gpu/s38c source evidence/session35/scripts/common.sh
p() { pack 3 > /dev/null; }
PS=flash_decode_m16_n128_w8_s3_ps_mbarrier
PICK=flash_decode_m16_n128_w8_s3_mbarrier
s 300 bench_ps $H bench --shapes decode --shape 33,4,1,8192,128 --shape 66,4,1,8192,128 --kernel $PS --kernel $PICK --peers torch --rounds 3 --json /tmp/j/bench_ps.json; p
grep -A9 "speedup" /tmp/l/bench_ps.log | tail -10
grep -E "_ps_mbarrier |w8_s3_mbarrier " /tmp/l/bench_ps.log | head -16
s 120 verify_ps $H verify --shapes splitkv,edge --kernel $PS --lse --json /tmp/j/verify_ps.json; p
tail -2 /tmp/l/verify_ps.log
s 100 verify_ps_random $H verify --random 100 --kernel $PS; p
tail -1 /tmp/l/verify_ps_random.log
