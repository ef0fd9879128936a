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

// ----------------------------------------------------------------------------
// column sums of partial sums, in a fixed order: the last step of the deterministic
// reductions over rows (layernorm's dweight and dbias, the matmuls' dbias). Their first
// kernels leave a (nparts, C) fp32 array of sums over row chunks; this adds the chunks per
// column without atomics: thread (tx, ty) of block x adds chunks ty, ty + 8, ... of column
// 32x + tx in order, then a fixed tree over the 8 thread rows, so every column's sum has
// the same order on every run and GPU.
#define PARTIALS_ROWS 8

// out0 (C,) += the column sums of part (nparts, C); out1 (C,), when gridDim.y is 2, += those
// of part + nparts * C. grid (CEIL_DIV(C, 32), 1 or 2), block (32, PARTIALS_ROWS).
__global__ void partials_add_kernel(floatX* out0, floatX* out1, const float* part, int nparts, int C) {
    __shared__ float sums[PARTIALS_ROWS][32];
    int tx = threadIdx.x, ty = threadIdx.y, c = blockIdx.x * 32 + tx;
    floatX* out = blockIdx.y == 0 ? out0 : out1;
    const float* p = part + (size_t)blockIdx.y * nparts * C;
    float acc = 0.0f;
    if (c < C) {
        for (int k = ty; k < nparts; k += PARTIALS_ROWS) { acc += p[(size_t)k * C + c]; }
    }
    sums[ty][tx] = acc;
    __syncthreads();
    for (int stride = PARTIALS_ROWS / 2; stride > 0; stride /= 2) {
        if (ty < stride) { sums[ty][tx] += sums[ty + stride][tx]; }
        __syncthreads();
    }
    if (ty == 0 && c < C) { out[c] = from_float<floatX>(to_float(out[c]) + sums[0][tx]); }
}

// out0 (C,) += column sums of part (nparts, C); out1 (C,), unless NULL, += those of the
// next (nparts, C) of part. Queued on s.
static inline void partials_add(floatX* out0, floatX* out1, const float* part, int nparts, int C, cudaStream_t s) {
    dim3 grid(CEIL_DIV(C, 32), out1 != NULL ? 2 : 1), block(32, PARTIALS_ROWS);
    partials_add_kernel<<<grid, block, 0, s>>>(out0, out1, part, nparts, C);
    cudaCheck(cudaGetLastError());
}

#endif // LLMC_CUDA_COMMON_CUH
