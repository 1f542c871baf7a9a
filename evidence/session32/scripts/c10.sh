# Session 32, call 10 (H100): s32e, the three GPU test binaries (call 9 ran them without
# --include-ignored, so they ran nothing).
GPU_DIR=.gpu/s32e source evidence/session32/scripts/common.sh
for t in gpu api_gpu fp8_gpu; do s 250 test_$t /tmp/g/tests/$t --include-ignored --test-threads 1; done
pack 10
