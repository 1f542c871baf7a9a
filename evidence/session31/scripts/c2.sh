# Session 31, call 2 (H100), right after call 1: FA3's second half, then the GPU tests of s31a
# (this tree: causal problems from one wave on now go to the persistent twins, which walk the
# host's item table; kernels unchanged since s30d, PTX fnv 871c1859d375f759); `api_gpu` goes
# through the library's dispatch.
cp .fa4/b/*.whl /tmp/fa4/ 2>/dev/null; bash .fa4/b/install.sh b || exit 3
GPU_DIR=.gpu/s31a source evidence/session31/scripts/common.sh
s 100 test_api_gpu /tmp/g/tests/api_gpu --include-ignored --test-threads 1
s 300 test_gpu /tmp/g/tests/gpu --include-ignored --test-threads 1
pack 2
