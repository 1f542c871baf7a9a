# Session 22, call 5: this tree (u4 = the committed build, PTX fnv d130286419d17091): the GPU tests
# (tests/gpu.rs, tests/api_gpu.rs: the caller-stream launches now take their workspace from
# Gpu::slice_buffers; tests/fp8_gpu.rs with its 144-row-block cases) and verify of every e4m3
# variant.
source evidence/session22/scripts/common.sh
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
for t in gpu api_gpu fp8_gpu; do s 280 test_$t /tmp/g/tests/$t --include-ignored --test-threads=1; done
s 120 verify_fp8 $H verify --dtype e4m3 --layout bhsd,bshd --lse --json /tmp/j/verify_fp8_h100.json
pack 5
