# Session 38, call 2 (H200): s38b = the persistent flash_decode walk (PTX fnv d8b8399391de5adf):
# flash_decode_m16_n128_w8_s3_ps_mbarrier beside the pick it would replace. Correctness first
# (splitkv, decode and edge sets with LSE, both layouts; 200 random problems; determinism;
# memcheck and racecheck), then issue #11's decode set with torch in the same run, three rounds.
GPU_DIR=.gpu/s38b source evidence/session35/scripts/common.sh
p() { pack 2 > /dev/null; }
PS=flash_decode_m16_n128_w8_s3_ps_mbarrier
PICK=flash_decode_m16_n128_w8_s3_mbarrier
s 150 verify_ps $H verify --shapes splitkv,decode,odd,edge --kernel $PS --kernel $PICK --lse --layout bhsd,bshd --json /tmp/j/verify_ps.json; p
tail -3 /tmp/l/verify_ps.log
s 100 verify_ps_random $H verify --random 200 --kernel $PS --json /tmp/j/verify_ps_random.json; p
tail -2 /tmp/l/verify_ps_random.log
s 60 repeat_ps $H verify --repeat 3 --shapes splitkv --kernel $PS; p
tail -1 /tmp/l/repeat_ps.log
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
s 90 san_memcheck_ps $CS --tool memcheck --print-limit 20 $H verify --shapes splitkv,edge --seed 7 --lse --kernel $PS; p
for tool in racecheck synccheck; do
  s 90 san_${tool}_ps $CS --tool $tool --print-limit 20 $H verify --shapes splitkv --dtype f16 --seed 7 --kernel $PS; p
done
s 300 bench_ps $H bench --shapes decode --kernel $PS --kernel $PICK --peers torch --rounds 3 --json /tmp/j/bench_ps.json; p
grep -A8 "speedup" /tmp/l/bench_ps.log | tail -9
grep -E "_ps_mbarrier|w8_s3_mbarrier " /tmp/l/bench_ps.log | tail -12
for f in /tmp/l/*.log; do echo "$(basename $f): $(grep -E '^PASS|^FAIL|test result|ERROR SUMMARY|RACECHECK SUMMARY' $f | tail -1)"; done
