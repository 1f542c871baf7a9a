# Session 12, call 10: t5 (three consumers with 144- and 160-key tiles, experimental; they spill) against the 128-key pick at head dim 64, verify first.
source .gpux/s12/common_t5.sh
W="--kernel flash_ws_m192_n128_s2_pp_ov_mbarrier --kernel flash_ws_m192_n144_s2_pp_ov_mbarrier --kernel flash_ws_m192_n160_s2_pp_ov_mbarrier"
s 90 verify_wide $H verify $W --lse --shapes small,mission,long,odd,edge --json /tmp/j/verify_wide.json
for rep in 1 2; do
  s 60 wide_$rep $H bench $W --shapes large --shape 2,16,4096,64 --shape 1,16,8192,64 --iters 40 --json /tmp/j/wide_$rep.json
  s 60 widec_$rep $H bench $W --causal --shapes large --shape 2,16,4096,64 --iters 40 --json /tmp/j/widec_$rep.json
done
cd /tmp/l && tar czf $OUT/logs10.tgz verify_wide.log wide*.log; cd /tmp/j && tar czf $OUT/json10.tgz verify_wide.json wide*.json; ls $OUT
