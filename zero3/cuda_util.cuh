/*
 What the GPU engines (zero3/device.cuh, zero3/staged.cuh) need of CUDA: the compute
 precision, the conversions to and from it, an error-returning check, the GPU's clock.
 The trainer's kernels build on the same definitions (llmc/cuda_common.cuh includes this
 file), so the parameters an engine hands out are of the type the kernels compute in.

 floatX is the type of parameters, gradients and activations on the GPU: bf16, or fp32
 when built with -DENABLE_FP32 (for testing against the fp32 CPU trainer). The master
 weights and AdamW moments are always fp32.
*/
#ifndef ZERO3_CUDA_UTIL_CUH
#define ZERO3_CUDA_UTIL_CUH

#include <stddef.h>          // size_t
#include <time.h>            // clock_gettime (host builds of gpu_clock_ns)
#include <cuda_runtime.h>    // cudaError_t, cudaGetErrorString
#include <cuda_bf16.h>       // __nv_bfloat16 and its conversions
#include <stdio.h>           // snprintf: the NVTX ranges' names
#include <nvtx3/nvToolsExt.h> // nvtxRangePushA: the engine's movers on a profiler's timeline (header-only)
#include "zero3/util.h"      // zero_error

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

// An engine object is compiled for one floatX (zero3/device.cu, once per precision): 0 when
// the trainer's parameters (trainer_bytes each) are of that type, else -1 with a zero_error
// naming both, for the engine object of one precision linked into the other's build.
static inline int zero_gpu_check_floatx(size_t trainer_bytes, const char* engine) {
    if (trainer_bytes == sizeof(floatX)) { return 0; }
    return zero_error("zero %s engine: built for %s parameters (%zu bytes), the trainer's are %zu bytes: "
                      "link the engine object of the trainer's precision", engine, PRECISION_MODE, sizeof(floatX), trainer_bytes);
}

// 0, or -1 with a zero_error line naming `what` and CUDA's reason
static inline int zero_cuda(cudaError_t e, const char* what) {
    if (e == cudaSuccess) { return 0; }
    return zero_error("zero: %s: %s", what, cudaGetErrorString(e));
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

// NVTX ranges for a profiler's timeline (nsys): the engine's movers, each named with what it
// moves and the unit ("zero gather 5"), so that the timeline reads like the schedule; unit
// < 0: none. A range is the host's call that issues the work (its kernels and copies are
// tied to it by the profiler); without a profiler attached the calls do next to nothing.
static inline void zero_nvtx_push(const char* what, int unit) {
    char name[64];
    if (unit >= 0) { snprintf(name, sizeof(name), "zero %s %d", what, unit); } else { snprintf(name, sizeof(name), "zero %s", what); }
    nvtxRangePushA(name);
}
// ends the range and passes rc on: `zero_nvtx_push("gather", u); return zero_nvtx_popped(gather(u));`
static inline int zero_nvtx_popped(int rc) { nvtxRangePop(); return rc; }

// The engines' conversion kernels: static, as this file is included by the engines'
// translation unit (zero3/device.cu) and by the trainer's, which does not use them
// (maybe_unused: nvcc would say "declared but never referenced" there)

// floatX (n,) <- fp32 (n,), rounded to nearest: parameters uploaded from an fp32 master
[[maybe_unused]] static __global__ void zero_to_floatx_kernel(floatX* dst, const float* src, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { dst[i] = from_float<floatX>(src[i]); }
}

// fp32 (n,) <- floatX (n,): gradients on their way to an fp32 accumulator
[[maybe_unused]] static __global__ void zero_to_float_kernel(float* dst, const floatX* src, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { dst[i] = to_float(src[i]); }
}

#endif // ZERO3_CUDA_UTIL_CUH
