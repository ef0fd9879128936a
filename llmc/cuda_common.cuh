/*
 Common pieces of the CUDA trainer's kernels: checked wrappers that report file and
 line, the precision of parameters and activations (bf16 by default, fp32 with
 PRECISION=FP32 for testing against the CPU trainer), and small device helpers.
*/
#ifndef LLMC_CUDA_COMMON_CUH
#define LLMC_CUDA_COMMON_CUH

#include <stdio.h>          // fprintf
#include <stdlib.h>         // exit
#include <time.h>           // clock_gettime (host builds of gpu_clock_ns)
#include <cuda_runtime.h>   // cudaError_t, cudaGetErrorString, streams
#include <cuda_bf16.h>      // __nv_bfloat16 and its conversions
#include <cublas_v2.h>      // cublasStatus_t for cublasCheck

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

// ----------------------------------------------------------------------------
// precision: floatX is the type of parameters, gradients and activations on the
// device; master weights and AdamW moments are always fp32

#if defined(ENABLE_FP32)
typedef float floatX;
#define PRECISION_MODE "fp32"
#else
typedef __nv_bfloat16 floatX;
#define PRECISION_MODE "bf16"
#endif

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))

// sum over a warp (all 32 lanes get the result)
__device__ __forceinline__ float warp_reduce_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) { v += __shfl_xor_sync(0xffffffffu, v, offset); }
    return v;
}

__device__ __forceinline__ float warp_reduce_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) { v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset)); }
    return v;
}

// the GPU's global clock (%globaltimer), in nanoseconds: timing on the GPU itself (built
// by a host compiler, for test/emu's CPU emulation: the host's monotonic clock)
__device__ __forceinline__ unsigned long long gpu_clock_ns(void) {
#if defined(__CUDACC__)
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
#else
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
#endif
}

#endif // LLMC_CUDA_COMMON_CUH
