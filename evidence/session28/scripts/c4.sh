# Session 28, call 4 (after call 3: `bash .fa4/a/install.sh a`): FA3's second half installed, then
# this tree's build (s28c, v41; carried as .gpu/s28m, without the test binaries, to stay under
# the carry limit beside FA3's half) traced at the `std` shapes that the persistent picks run.
set -e
cp .fa4/b/*.whl /tmp/fa4/ && bash .fa4/b/install.sh b
set +e
GPU_DIR=.gpu/s28m source evidence/session28/scripts/common.sh
K192=flash_ws_m192_n128_s2_pp_ov_ps_mbarrier; K128P=flash_ws_m128_n128_s2_pp_ov_ps_mbarrier
for sh in 2,8,2048,64 4,16,2048,64 2,16,4096,64; do s 60 tr192_${sh//,/x} $H trace --kernel $K192 --shape $sh --json /tmp/j/tr192_${sh//,/x}.json; done
for sh in 4,16,2048,128 2,16,4096,128; do s 60 tr128_${sh//,/x} $H trace --kernel $K128P --shape $sh --json /tmp/j/tr128_${sh//,/x}.json; done
for f in /tmp/l/tr*.log; do echo "## $f"; cat $f; done
pack 4
