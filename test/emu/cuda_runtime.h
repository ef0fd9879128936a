/*
 The CUDA runtime on the CPU, for running this project's CUDA code without a GPU: the
 kernels' tests (test/test_kernels*_gpu.cu as build/test_kernels*_emu), the GPU trainer
 (build/train_gpt2_zero3_emu{,_fp32}, which test/gpu/test_gpu_trainer.sh can run) and the
 device engine's own test (test/emu/test_device_emu.cc). Device memory is host memory; every
 call does its work at once, so streams and events order nothing (an event queried is
 "not ready" every other time, to no effect). Beside it here: cuda_bf16.h, cublas_v2.h,
 cublasLt.h, cub's radix sort, nvtx3 and nccl.h.

 Kernels run through emu_launch: the Makefile rewrites each `k<<<grid, block, smem,
 stream>>>(args)` to `emu_launch(k, grid, block, smem, stream)(args)`. The blocks run one
 after another; a block's threads are fibers (see emu_switch) on this one OS thread, each run
 until it reaches a barrier: __syncthreads waits for the whole block, __syncwarp and the
 shuffles for the thread's warp. A barrier that some threads of its block (or warp) can
 never reach, because they returned or wait at another barrier, stops the test with a
 message: on a GPU that is undefined behaviour or a hang. __shared__ variables are
 static (one copy, shared by the block's fibers; blocks do not overlap), dynamic shared
 memory is a fresh buffer per block filled with NaN (0xff bytes), so a read of a word
 nothing wrote shows.

 It finds indexing, partitioning and barrier mistakes, and checks the arithmetic against
 the CPU ops; it does not model memory ordering between threads beyond the barriers,
 warp-synchronous code without a barrier, timing, or anything of the hardware's.
*/
#ifndef EMU_CUDA_RUNTIME_H
#define EMU_CUDA_RUNTIME_H

#include <stddef.h>    // size_t
#include <stdio.h>     // fprintf
#include <stdlib.h>    // malloc, free, abort
#include <string.h>    // memcpy, memset
#include <ucontext.h>  // the threads of a block as fibers
#include <sys/mman.h>  // their stacks
#include <unistd.h>    // getpid: each process's "GPU" its own UUID
#include <tuple>       // a launch's arguments, kept for every block
#include <utility>     // std::apply

typedef enum {
    cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2, cudaErrorNotReady = 600
} cudaError_t;
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
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
struct cudaUUID_t { char bytes[16]; };
struct cudaDeviceProp {
    char name[256];
    cudaUUID_t uuid;
    int major, minor, multiProcessorCount;
    size_t sharedMemPerBlock, sharedMemPerBlockOptin, totalGlobalMem;
};

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct alignas(16) float4 { float x, y, z, w; };
extern dim3 blockIdx, threadIdx, blockDim, gridDim;  // defined once, by the test (EMU_DEFINE_GLOBALS)

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
// `extern __shared__ T name[];` is rewritten to EMU_DYNAMIC_SMEM(T, name): the block's buffer
extern void* emu_dynamic_smem;
#define EMU_DYNAMIC_SMEM(T, name) static T*& name = reinterpret_cast<T*&>(emu_dynamic_smem)

// ----------------------------------------------------------------------------
// the fibers of one block

enum { EMU_RUN, EMU_AT_BLOCK, EMU_AT_WARP, EMU_DONE };
#define EMU_STACK_BYTES (256 * 1024)
#define EMU_MAX_THREADS 1024

// Switching fibers: ucontext's swapcontext makes a system call (the signal mask) at every
// switch, which dominated the emulated trainer's time; on x86-64 outside AddressSanitizer
// (which must see stack switches through swapcontext) a fiber switch is emu_switch below:
// save the callee-saved registers on the current stack, swap stack pointers, restore.
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define EMU_FAST_SWITCH 1
extern "C" void emu_switch(void** save_sp, void* load_sp);
__asm__(".text\n"
        "emu_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n");
#endif

struct EmuFiber { ucontext_t ctx; void* sp; int state; };
struct EmuBlock {
    ucontext_t main;
    void* main_sp;
    EmuFiber* fibers;
    char* stacks;
    int n, cur;
    void (*body)(void*);
    void* arg;
    unsigned long long xchg[EMU_MAX_THREADS];  // the shuffles' exchange slots
};
extern EmuBlock emu_block;
extern size_t emu_smem_optin;
extern size_t emu_device_bytes;  // what cudaMalloc holds

static inline void emu_fail(const char* what) {
    fprintf(stderr, "emulated CUDA: %s (block %u,%u, thread %u,%u)\n", what, blockIdx.x, blockIdx.y, threadIdx.x, threadIdx.y);
    abort();
}

static inline void emu_set_thread(int t) {
    threadIdx = dim3((unsigned)t % blockDim.x, ((unsigned)t / blockDim.x) % blockDim.y, (unsigned)t / (blockDim.x * blockDim.y));
}

// a fiber stops at a barrier and hands control back to the block's scheduler
static inline void emu_wait(int state) {
    EmuFiber* f = &emu_block.fibers[emu_block.cur];
    f->state = state;
#ifdef EMU_FAST_SWITCH
    emu_switch(&f->sp, emu_block.main_sp);
#else
    swapcontext(&f->ctx, &emu_block.main);
#endif
}

static void emu_fiber_main(void) {
    emu_block.body(emu_block.arg);
    emu_wait(EMU_DONE);  // never resumed
}

// runs one block: every fiber until it waits or ends, then releases the warps all of whose
// threads wait at a warp barrier, or else the block when all of it waits at __syncthreads
static inline void emu_run_block(int n, void (*body)(void*), void* arg) {
    EmuBlock* b = &emu_block;
    if (b->stacks == NULL) {
        b->stacks = (char*)mmap(NULL, (size_t)EMU_MAX_THREADS * EMU_STACK_BYTES, PROT_READ | PROT_WRITE,
                                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        b->fibers = (EmuFiber*)calloc(EMU_MAX_THREADS, sizeof(EmuFiber));
        if (b->stacks == MAP_FAILED || b->fibers == NULL) { fprintf(stderr, "emulated CUDA: out of memory\n"); abort(); }
    }
    if (n < 1 || n > EMU_MAX_THREADS) { emu_fail("block size out of range"); }
    b->n = n; b->body = body; b->arg = arg;
    for (int t = 0; t < n; t++) {
        EmuFiber* f = &b->fibers[t];
        char* stack = b->stacks + (size_t)t * EMU_STACK_BYTES;
#ifdef EMU_FAST_SWITCH
        // a fresh stack as emu_switch leaves one: six saved registers (zero), then the
        // address emu_switch returns to, entered with the stack as after a call
        void** top = (void**)(stack + EMU_STACK_BYTES);
        top[-1] = NULL;                          // the return address emu_fiber_main never uses
        top[-2] = (void*)&emu_fiber_main;
        for (int r = 3; r <= 8; r++) { top[-r] = NULL; }
        f->sp = &top[-8];
#else
        getcontext(&f->ctx);
        f->ctx.uc_stack.ss_sp = stack;
        f->ctx.uc_stack.ss_size = EMU_STACK_BYTES;
        f->ctx.uc_link = NULL;
        makecontext(&f->ctx, emu_fiber_main, 0);
#endif
        f->state = EMU_RUN;
    }
    for (;;) {
        for (int t = 0; t < n; t++) {
            if (b->fibers[t].state != EMU_RUN) { continue; }
            b->cur = t;
            emu_set_thread(t);
#ifdef EMU_FAST_SWITCH
            emu_switch(&b->main_sp, b->fibers[t].sp);
#else
            swapcontext(&b->main, &b->fibers[t].ctx);
#endif
        }
        int done = 0, at_block = 0, released = 0;
        for (int w = 0; w * 32 < n; w++) {
            int lo = w * 32, hi = lo + 32 < n ? lo + 32 : n, at_warp = 0;
            for (int t = lo; t < hi; t++) { at_warp += b->fibers[t].state == EMU_AT_WARP; }
            if (at_warp == hi - lo) {
                for (int t = lo; t < hi; t++) { b->fibers[t].state = EMU_RUN; }
                released = 1;
            }
        }
        if (released) { continue; }
        for (int t = 0; t < n; t++) {
            done += b->fibers[t].state == EMU_DONE;
            at_block += b->fibers[t].state == EMU_AT_BLOCK;
        }
        if (done == n) { return; }
        if (at_block == n) {
            for (int t = 0; t < n; t++) { b->fibers[t].state = EMU_RUN; }
            continue;
        }
        // some wait where the others can never come
        for (int t = 0; t < n; t++) {
            if (b->fibers[t].state == EMU_AT_WARP || b->fibers[t].state == EMU_AT_BLOCK) { emu_set_thread(t); break; }
        }
        emu_fail(at_block > 0 && done > 0 ? "__syncthreads that some threads of the block returned before"
                                          : "a warp barrier (__syncwarp or a shuffle) that some of its lanes never reach");
    }
}

static inline void __syncthreads(void) { emu_wait(EMU_AT_BLOCK); }
static inline void __syncwarp(unsigned = 0xffffffffu) { emu_wait(EMU_AT_WARP); }

template <typename T> static inline T __shfl_xor_sync(unsigned, T v, int lane_mask) {
    static_assert(sizeof(T) <= 8, "shuffle of a type over 8 bytes");
    int t = emu_block.cur;
    memcpy(&emu_block.xchg[t], &v, sizeof(T));
    __syncwarp();
    int src = (t & ~31) | ((t & 31) ^ lane_mask);
    if (src >= emu_block.n) { emu_fail("shuffle from a lane past the block's end"); }
    T r;
    memcpy(&r, &emu_block.xchg[src], sizeof(T));
    __syncwarp();  // every lane has read before any slot is written again
    return r;
}

// CUDA's integer min and max (the device math library's overloads)
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }

static inline unsigned int __float_as_uint(float x) { unsigned int u; memcpy(&u, &x, 4); return u; }
static inline float __uint_as_float(unsigned int u) { float x; memcpy(&x, &u, 4); return x; }

// kernel<<<grid, block, smem, stream>>>(args) becomes emu_launch(kernel, grid, block, smem, stream)(args)
template <typename... P> struct EmuLaunch {
    void (*kernel)(P...);
    dim3 grid, block;
    size_t smem;
    template <typename... A> void operator()(A... args) const {
        struct Bound { void (*k)(P...); std::tuple<P...> a; } bound{kernel, std::tuple<P...>(static_cast<P>(args)...)};
        auto body = [](void* p) { Bound* bd = (Bound*)p; std::apply(bd->k, bd->a); };
        if (smem > 48 * 1024 && smem > emu_smem_optin) { fprintf(stderr, "emulated CUDA: %zu bytes of dynamic shared memory without cudaFuncSetAttribute\n", smem); abort(); }
        if ((size_t)block.x * block.y * block.z > EMU_MAX_THREADS) { fprintf(stderr, "emulated CUDA: a block of over %d threads\n", EMU_MAX_THREADS); abort(); }
        gridDim = grid;
        blockDim = block;
        for (unsigned bz = 0; bz < grid.z; bz++) {
            for (unsigned by = 0; by < grid.y; by++) {
                for (unsigned bx = 0; bx < grid.x; bx++) {
                    blockIdx = dim3(bx, by, bz);
                    void* sm = NULL;
                    if (smem > 0) { sm = malloc(smem); memset(sm, 0xff, smem); }
                    emu_dynamic_smem = sm;
                    emu_run_block((int)(block.x * block.y * block.z), body, &bound);
                    free(sm);
                    emu_dynamic_smem = NULL;
                }
            }
        }
    }
};
template <typename... P>
static inline EmuLaunch<P...> emu_launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem = 0, cudaStream_t = NULL) {
    return EmuLaunch<P...>{kernel, grid, block, smem};
}

// ----------------------------------------------------------------------------
// the runtime's calls

// allocations: poisoned (0xff bytes: NaN as floats) so that reading memory nothing wrote
// shows; "device" ones are counted for cudaMemGetInfo (the size in a 16-byte header)
static inline void* emu_alloc(size_t n) {
    void* p = malloc(n > 0 ? n : 1);
    if (p != NULL) { memset(p, 0xff, n); }
    return p;
}
static inline cudaError_t cudaMalloc(void** p, size_t n) {
    char* b = (char*)emu_alloc(n + 16);
    if (b == NULL) { *p = NULL; return cudaErrorMemoryAllocation; }
    memcpy(b, &n, sizeof(n));
    emu_device_bytes += n;
    *p = b + 16;
    return cudaSuccess;
}
template <typename T> static inline cudaError_t cudaMalloc(T** p, size_t n) { return cudaMalloc((void**)p, n); }
static inline cudaError_t cudaMallocHost(void** p, size_t n) { *p = emu_alloc(n); return *p ? cudaSuccess : cudaErrorMemoryAllocation; }
template <typename T> static inline cudaError_t cudaMallocHost(T** p, size_t n) { return cudaMallocHost((void**)p, n); }
static inline cudaError_t cudaFree(void* p) {
    if (p == NULL) { return cudaSuccess; }
    char* b = (char*)p - 16;
    size_t n;
    memcpy(&n, b, sizeof(n));
    emu_device_bytes -= n;
    free(b);
    return cudaSuccess;
}
template <typename T> static inline cudaError_t cudaMallocAsync(T** p, size_t n, cudaStream_t) { return cudaMalloc((void**)p, n); }
static inline cudaError_t cudaFreeAsync(void* p, cudaStream_t) { return cudaFree(p); }
static inline cudaError_t cudaFreeHost(void* p) { free(p); return cudaSuccess; }
static inline cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind) { memmove(dst, src, n); return cudaSuccess; }
static inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind k, cudaStream_t = NULL) { return cudaMemcpy(dst, src, n, k); }
static inline cudaError_t cudaMemset(void* p, int v, size_t n) { memset(p, v, n); return cudaSuccess; }
static inline cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t = NULL) { memset(p, v, n); return cudaSuccess; }

static inline cudaError_t cudaStreamCreate(cudaStream_t* s) { *s = new EmuStream(); return cudaSuccess; }
static inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) { return cudaStreamCreate(s); }
static inline cudaError_t cudaStreamDestroy(cudaStream_t s) { delete s; return cudaSuccess; }
static inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
static inline cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
static inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) { *e = new EmuEvent(); return cudaSuccess; }
static inline cudaError_t cudaEventDestroy(cudaEvent_t e) { delete e; return cudaSuccess; }
static inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t = NULL) { e->recorded = 1; return cudaSuccess; }
// "not ready" every other time, so that both ways through zero_dev_wait run (the work is
// done either way)
static inline cudaError_t cudaEventQuery(cudaEvent_t) {
    static int calls = 0;
    return (calls++ % 2) ? cudaErrorNotReady : cudaSuccess;
}
static inline cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned) { return cudaSuccess; }
static inline cudaError_t cudaGetLastError(void) { return cudaSuccess; }
static inline cudaError_t cudaSetDevice(int) { return cudaSuccess; }
static inline cudaError_t cudaGetDevice(int* d) { *d = 0; return cudaSuccess; }
static inline cudaError_t cudaGetDeviceCount(int* n) { *n = 1; return cudaSuccess; }
static inline cudaError_t cudaMemGetInfo(size_t* free_b, size_t* total_b) {
    *total_b = (size_t)1 << 36;
    *free_b = *total_b - emu_device_bytes;
    return cudaSuccess;
}
static inline cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
static inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) {
    memset(p, 0, sizeof(*p));
    snprintf(p->name, sizeof(p->name), "emulated on the CPU");
    long long id = (long long)getpid();  // each process its own "GPU": ranks do not share one
    memcpy(p->uuid.bytes, &id, sizeof(id));
    p->major = 9; p->multiProcessorCount = 1;
    p->sharedMemPerBlock = 48 * 1024; p->sharedMemPerBlockOptin = 227 * 1024; p->totalGlobalMem = (size_t)1 << 32;
    return cudaSuccess;
}
template <typename K> static inline cudaError_t cudaFuncSetAttribute(K, cudaFuncAttribute, int v) {
    if ((size_t)v > emu_smem_optin) { emu_smem_optin = (size_t)v; }
    return cudaSuccess;
}
static inline const char* cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "emulated CUDA error"; }

// the globals above, in the one file that defines EMU_DEFINE_GLOBALS before including
#ifdef EMU_DEFINE_GLOBALS
dim3 blockIdx, threadIdx, blockDim, gridDim;
void* emu_dynamic_smem = NULL;
EmuBlock emu_block;
size_t emu_smem_optin = 0;
size_t emu_device_bytes = 0;
#endif

#endif // EMU_CUDA_RUNTIME_H
