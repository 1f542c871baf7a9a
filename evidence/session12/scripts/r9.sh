# Session 12, call 9: t4 (t2's kernels, attend's raw e4m3 input): the raw path against --quantize and float64, and e4m3 verify.
source .gpux/s12/common_t4.sh
mkdir -p /tmp/raw
s 120 raw_e4m3 python3 .gpux/s12/raw_e4m3.py  # (evidence/session12/scripts/raw_e4m3.py) $H /tmp/raw
cat /tmp/l/raw_e4m3.log | tail -30
s 90 fp8_verify $H verify --dtype e4m3 --json /tmp/j/verify_fp8_t4.json
cp /tmp/raw/raw_e4m3.json /tmp/j/
cd /tmp/l && tar czf $OUT/logs9.tgz raw_e4m3.log fp8_verify.log; cd /tmp/j && tar czf $OUT/json9.tgz raw_e4m3.json verify_fp8_t4.json; ls $OUT
