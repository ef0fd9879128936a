/*
 Common pieces of the CUDA trainer's kernels: checked wrappers that report file and
 line, and warp reductions. The precision of parameters and activations (floatX: bf16,
 or fp32 with -DENABLE_FP32 for testing against the CPU trainer) and its conversions are
 the engine's (zero3/cuda_util.cuh): the kernels compute on what the engine hands out.
*/
#ifndef LLMC_CUDA_COMMON_CUH
#define LLMC_CUDA_COMMON_CUH

#include <stdio.h>          // fprintf
#include <stdlib.h>         // exit
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

#endif // LLMC_CUDA_COMMON_CUH
