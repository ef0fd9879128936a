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
# CUDA_BUILD_JOBS builds at a time (default 2, make test's 2 cores), each with its own
# output, judged and printed in this order. The one built prerequisite they share, the GPU
# builds' library (build/lib/gpu/lib.a), is made first, alone: two makes that both find it
# missing would both remove and archive it, and one loses (ar: unable to copy the file)
J=${CUDA_BUILD_JOBS:-2}
targets=(build/test_kernels_gpu build/test_kernels_gpu_fp32 build/test_kernels2_gpu build/test_kernels2_gpu_fp32
         train_gpt2_zero3 train_gpt2_zero3_fp32 build/gpu_probe build/bench_attention)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
if make -s build/lib/gpu/lib.a > "$out/lib" 2>&1 && [ ! -s "$out/lib" ]; then
    echo "PASS the GPU builds' library compiles without warnings"; pass=$((pass + 1))
else
    echo "FAIL the GPU builds' library (build/lib/gpu/lib.a):"; head -20 "$out/lib"; fail=$((fail + 1))
fi
pids=(); rcs=()
for i in "${!targets[@]}"; do
    if [ "$i" -ge "$J" ]; then wait "${pids[$((i - J))]}"; rcs[i - J]=$?; fi
    make -s "${targets[$i]}" > "$out/$i" 2>&1 &
    pids[i]=$!
done
for i in "${!targets[@]}"; do
    t=${targets[$i]}
    [ -n "${rcs[$i]:-}" ] || { wait "${pids[$i]}"; rcs[i]=$?; }
    if [ "${rcs[$i]}" -eq 0 ] && [ ! -s "$out/$i" ]; then
        echo "PASS $t compiles without warnings"; pass=$((pass + 1))
    else
        echo "FAIL $t:"; head -20 "$out/$i"; fail=$((fail + 1))
    fi
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
