/*
 The CUDA runtime as the device engine (zero3/device.cuh) uses it, on the CPU, for
 test/test_device_emu.cc: device memory is host memory, every call does its work at
 once (so streams and events order nothing; an event queried is "not ready" every other
 time, to no effect), and kernels run through emu_launch, one thread after another (only
 kernels without barriers or warp exchanges). It checks the engine's logic (offsets, pools, schedules,
 collectives, the offload and --dpu hand-offs) without a GPU; it cannot find races
 between streams.
*/
#ifndef EMU_CUDA_RUNTIME_H
#define EMU_CUDA_RUNTIME_H

#include <stddef.h>   // size_t
#include <stdlib.h>   // malloc, free
#include <string.h>   // memcpy, memset

typedef enum { cudaSuccess = 0, cudaErrorMemoryAllocation = 2, cudaErrorNotReady = 600 } cudaError_t;
typedef enum {
    cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3, cudaMemcpyDefault = 4
} cudaMemcpyKind;
typedef struct EmuStream* cudaStream_t;   // never dereferenced: work is done at the call
typedef struct EmuEvent* cudaEvent_t;
struct EmuStream { int unused; };
struct EmuEvent { int recorded; };
#define cudaStreamNonBlocking 1
#define cudaEventDisableTiming 2

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
extern dim3 blockIdx, threadIdx, blockDim, gridDim;  // defined by the test

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline

// kernel<<<grid, block[, smem, stream]>>>(args) is rewritten to emu_launch(kernel, grid,
// block[, smem, stream])(args) when the test is built: every block, every thread in turn
template <typename... P> struct EmuLaunch {
    void (*kernel)(P...);
    dim3 grid, block;
    template <typename... A> void operator()(A... args) const {
        gridDim = grid;
        blockDim = block;
        for (unsigned bx = 0; bx < grid.x; bx++) {
            for (unsigned tx = 0; tx < block.x; tx++) {
                blockIdx = dim3(bx);
                threadIdx = dim3(tx);
                kernel(args...);
            }
        }
    }
};
template <typename... P>
static inline EmuLaunch<P...> emu_launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t = 0, cudaStream_t = NULL) {
    return EmuLaunch<P...>{kernel, grid, block};
}

// allocations: poisoned (0xff bytes: NaN as floats) so that reading memory nothing wrote shows
static inline cudaError_t cudaMalloc(void** p, size_t n) {
    *p = malloc(n);
    if (*p == NULL) { return cudaErrorMemoryAllocation; }
    memset(*p, 0xff, n);
    return cudaSuccess;
}
template <typename T> static inline cudaError_t cudaMalloc(T** p, size_t n) { return cudaMalloc((void**)p, n); }
static inline cudaError_t cudaMallocHost(void** p, size_t n) { return cudaMalloc(p, n); }
static inline cudaError_t cudaFree(void* p) { free(p); return cudaSuccess; }
static inline cudaError_t cudaFreeHost(void* p) { free(p); return cudaSuccess; }
static inline cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind) { memmove(dst, src, n); return cudaSuccess; }
static inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind k, cudaStream_t) { return cudaMemcpy(dst, src, n, k); }
static inline cudaError_t cudaMemset(void* p, int v, size_t n) { memset(p, v, n); return cudaSuccess; }
static inline cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t) { memset(p, v, n); return cudaSuccess; }

static inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) { *s = new EmuStream(); return cudaSuccess; }
static inline cudaError_t cudaStreamDestroy(cudaStream_t s) { delete s; return cudaSuccess; }
static inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
static inline cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
static inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) { *e = new EmuEvent(); return cudaSuccess; }
static inline cudaError_t cudaEventDestroy(cudaEvent_t e) { delete e; return cudaSuccess; }
static inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) { e->recorded = 1; return cudaSuccess; }
// "not ready" every other time, so that both of zero_dev_wait's paths run (the work is
// done either way)
static inline cudaError_t cudaEventQuery(cudaEvent_t) {
    static int calls = 0;
    return (calls++ % 2) ? cudaErrorNotReady : cudaSuccess;
}
static inline cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned) { return cudaSuccess; }
static inline cudaError_t cudaGetLastError(void) { return cudaSuccess; }
static inline cudaError_t cudaSetDevice(int) { return cudaSuccess; }
static inline const char* cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "emulated CUDA error"; }

#endif // EMU_CUDA_RUNTIME_H
