#!/usr/bin/env bash
# The CUDA kernels, their GPU tests and the GPU trainer must keep compiling on machines without a GPU
# (CI): this builds them with the Makefile's rules (bf16 and fp32, sm_80 and sm_90 when
# no GPU is found). It checks compilation only; running them is `make test-gpu`, on a
# machine with a GPU. Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
pass=0; fail=0
if ! command -v "${NVCC:-nvcc}" > /dev/null; then
    echo "nvcc not found: the CUDA kernels were not compiled (install the CUDA toolkit)"
    echo "0 passed, 1 failed"
    exit 1
fi
for t in build/test_kernels_gpu build/test_kernels_gpu_fp32 build/test_kernels2_gpu build/test_kernels2_gpu_fp32 \
         train_gpt2_zero3 train_gpt2_zero3_fp32 build/gpu_probe; do
    if make -s "$t" > "/tmp/cuda_build.$$" 2>&1 && [ ! -s "/tmp/cuda_build.$$" ]; then
        echo "PASS $t compiles without warnings"; pass=$((pass + 1))
    else
        echo "FAIL $t:"; head -20 "/tmp/cuda_build.$$"; fail=$((fail + 1))
    fi
done
rm -f "/tmp/cuda_build.$$"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
