/*
 llmc/cuda_common.cuh for the emulated device engine (test/test_device_emu.cc): fp32
 only (floatX = float), the GPU clock from the host's.
*/
#ifndef LLMC_CUDA_COMMON_CUH
#define LLMC_CUDA_COMMON_CUH

#include <stdio.h>          // fprintf
#include <stdlib.h>         // exit
#include <time.h>           // clock_gettime
#include <cuda_runtime.h>   // the emulated runtime (test/emu)

#ifndef ENABLE_FP32
#error "the emulated device engine is fp32 only: build with -DENABLE_FP32"
#endif

static inline void cuda_check(cudaError_t err, const char* file, int line) {
    if (err != cudaSuccess) {
        fprintf(stderr, "error: CUDA: %s [%s:%d]\n", cudaGetErrorString(err), file, line);
        exit(EXIT_FAILURE);
    }
}
#define cudaCheck(err) cuda_check((err), __FILE__, __LINE__)

typedef float floatX;
#define PRECISION_MODE "fp32"
static inline float to_float(float x) { return x; }
template <typename T> static inline T from_float(float x);
template <> inline float from_float<float>(float x) { return x; }

#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))

static inline unsigned long long gpu_clock_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

#endif // LLMC_CUDA_COMMON_CUH
