/*
 Common pieces of the CUDA trainer's kernels: checked wrappers that report file and
 line, and warp reductions. The precision of parameters and activations (floatX: bf16,
 or fp32 with -DENABLE_FP32 for testing against the CPU trainer) and its conversions are
 the engine's (zero3/cuda_util.cuh): the kernels compute on what the engine hands out.
*/
#ifndef LLMC_CUDA_COMMON_CUH
#define LLMC_CUDA_COMMON_CUH

#include <stdio.h>          // fprintf
#include <stdint.h>         // uintptr_t for the alignment test
#include <stdlib.h>         // exit
#include <initializer_list> // aligned128's list of pointers
#include <cuda_runtime.h>   // cudaError_t, cudaGetErrorString, streams
#include <cublas_v2.h>      // cublasStatus_t for cublasCheck
#include "zero3/cuda_util.cuh"  // floatX, PRECISION_MODE, to_float/from_float, CEIL_DIV

// ----------------------------------------------------------------------------
// checked wrappers: print file:line and exit (top-level code only)

static inline void cuda_check(cudaError_t err, const char* file, int line) {
    if (err != cudaSuccess) {
        fprintf(stderr, "error: CUDA: %s [%s:%d]\n", cudaGetErrorString(err), file, line);
        exit(EXIT_FAILURE);
    }
}
#define cudaCheck(err) cuda_check((err), __FILE__, __LINE__)

static inline void cublas_check(cublasStatus_t status, const char* file, int line) {
    if (status != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "error: cuBLAS status %d [%s:%d]\n", (int)status, file, line);
        exit(EXIT_FAILURE);
    }
}
#define cublasCheck(status) cublas_check((status), __FILE__, __LINE__)

// sum over a warp (all 32 lanes get the result)
__device__ __forceinline__ float warp_reduce_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) { v += __shfl_xor_sync(0xffffffffu, v, offset); }
    return v;
}

__device__ __forceinline__ float warp_reduce_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) { v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset)); }
    return v;
}

// ----------------------------------------------------------------------------
// Packs of N consecutive floatX moved by one load or store. N = X128 is 16 bytes (8 bf16 or
// 4 fp32; nvcc emits ld.global.v4 / st.global.v4 for it): a warp moves 512 contiguous bytes
// an instruction instead of 64 (bf16), with fewer instructions and more bytes in flight.
// The memory-bound kernels are templates on N and are launched with N = X128 when every
// pointer they get is 16-byte aligned and their rows are a multiple of X128 elements (so
// every row stays aligned), with N = 1 otherwise: one kernel, the same arithmetic.
#define X128 ((int)(16 / sizeof(floatX)))
template <int N> struct alignas(N * sizeof(floatX)) xpack { floatX v[N]; };

template <int N> __device__ __forceinline__ xpack<N> load_pack(const floatX* p) {
    return *reinterpret_cast<const xpack<N>*>(p);
}
template <int N> __device__ __forceinline__ void store_pack(floatX* p, const xpack<N>& x) {
    *reinterpret_cast<xpack<N>*>(p) = x;
}

// true when every pointer of the list may be read or written 16 bytes at a time
static inline bool aligned128(std::initializer_list<const void*> ptrs) {
    for (const void* p : ptrs) {
        if (((uintptr_t)p & 15u) != 0) { return false; }
    }
    return true;
}

// the pack a launcher uses: X128 when its rows (or its whole count) of n elements are a
// multiple of X128 and every pointer it passes is 16-byte aligned, else 1
static inline int xpack_width(size_t n, std::initializer_list<const void*> ptrs) {
    return n % X128 == 0 && aligned128(ptrs) ? X128 : 1;
}

// blocks of `block` threads for n elements, N a thread; at least one (a launch of none is
// an error; n may be 0)
static inline unsigned xpack_blocks(size_t n, int N, int block) {
    size_t blocks = CEIL_DIV(CEIL_DIV(n, (size_t)N), (size_t)block);
    return blocks > 0 ? (unsigned)blocks : 1u;
}

#endif // LLMC_CUDA_COMMON_CUH
