/*
 The CUDA runtime on the CPU, for running this project's CUDA code without a GPU: the
 kernels' tests (test/gpu/test_kernels*_gpu.cu as build/test_kernels*_emu), the GPU trainer
 (build/train_gpt2_zero3_emu{,_fp32}, which test/gpu/test_gpu_trainer.sh runs) and the
 device engine's own test (test/emu/test_device_emu.cc). Beside it here: emu_device.h (the
 memory, the streams as queues run out of order by a seeded scheduler, and the race
 checker: read its top), cuda_bf16.h, cublas_v2.h, cublasLt.h, cub's radix sort, nvtx3 and
 nccl.h.

 Kernels run through emu_launch: the Makefile rewrites each `k<<<grid, block, smem,
 stream>>>(args)` to `emu_launch(k, grid, block, smem, stream)(args)`, which checks the
 launch as the hardware does (grid.y and grid.z at most 65535, at most 1024 threads a block,
 dynamic shared memory over 48 KB only after cudaFuncSetAttribute for that kernel, static
 and dynamic shared memory together within the opt-in limit) and queues the kernel with its
 arguments. A failed launch runs nothing and leaves its error for cudaGetLastError, as on a
 GPU. When the kernel runs, its blocks run one after another; a block's threads are fibers
 (see emu_switch) on this one OS thread, each run until it reaches a barrier:
 __syncthreads waits for the whole block, __syncwarp and the shuffles for the thread's
 warp. A barrier that some threads of its block (or warp) can never reach, because they
 returned or wait at another barrier, stops the test with a message: on a GPU that is
 undefined behaviour or a hang. __shared__ variables are statics, registered as they are
 first reached and filled with 0xff bytes (NaN as floats) before every block, and dynamic
 shared memory is a fresh 0xff-filled buffer per block: a read of a word nothing in the
 block wrote shows. The tensor cores' warp operations of llmc/mma.cuh (mma.sync m16n8k16
 bf16, ldmatrix, cp.async) are warp barriers too: each lane's part is computed from all the
 lanes' operands as the PTX ISA lays the fragments out (emu_mma_bf16_16816), and cp.async's
 copies land at their wait, their destination poisoned from the issue.

 cudaGetLastError returns and clears the last error any call returned (cudaErrorNotReady
 from a query included, as the real runtime does); cudaPeekAtLastError keeps it. Copies
 check their kind against where the pointers live. Queries (cudaEventQuery, cudaStreamQuery)
 repeated with no other call between are a host polling, that is waiting: each one that
 finds its work not done runs a step of the GPU (emu_query_begin), as a synchronize would.

 What these headers declare for the project's code (every name not the emulator's own emu_*)
 is CUDA's, value for value and signature for signature: test/emu/test_headers.sh compares
 them with the real headers wherever nvcc is installed.

 It finds indexing, partitioning, barrier and stream-ordering mistakes, and checks the
 arithmetic against the CPU ops; it does not model memory ordering between threads beyond
 the barriers, warp-synchronous code without a barrier, timing, or the hardware's speed.
*/
#ifndef EMU_CUDA_RUNTIME_H
#define EMU_CUDA_RUNTIME_H

#include <stddef.h>    // size_t
#include <stdio.h>     // fprintf
#include <stdlib.h>    // malloc, free, abort, getenv, strtoull
#include <string.h>    // memcpy, memset
#include <math.h>      // fmaf: __fmaf_rn
#include <ucontext.h>  // the threads of a block as fibers
#include <sys/mman.h>  // their stacks
#include <unistd.h>    // getpid: each process's "GPU" its own UUID
#include <tuple>       // a launch's arguments, kept for every block
#include <utility>     // std::apply
#include <map>         // the shared memory each kernel opted into
#include <vector>      // cp.async's queued copies
#include "emu_device.h"  // memory, streams, the race checker

typedef enum {
    cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2, cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidResourceHandle = 400, cudaErrorNotReady = 600
} cudaError_t;
typedef enum {
    cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3, cudaMemcpyDefault = 4
} cudaMemcpyKind;
typedef struct EmuStream* cudaStream_t;   // NULL: the legacy default stream
typedef struct EmuEvent* cudaEvent_t;
struct EmuStream { int id; };
struct EmuEvent {  // its most recent record
    int recorded, stream;
    unsigned seq;
    EmuClock clock;
    int timing;       // created without cudaEventDisableTiming: each record stamps the host's clock when it runs
    double stamp_ms;
};
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
struct uint3 { unsigned x, y, z; };
struct alignas(16) float4 { float x, y, z, w; };
// defined once, by the test (EMU_DEFINE_GLOBALS); const on a GPU, set here by the launcher
extern uint3 blockIdx, threadIdx;
extern dim3 blockDim, gridDim;

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
// each `__shared__ T name[...];` is followed (the Makefile's rewrite) by its registration,
// run once: the launcher fills every registered variable with 0xff bytes before each block
struct EmuSharedVar { void* p; size_t n; const void* kernel; };
inline std::vector<EmuSharedVar> emu_shared_vars;
inline const void* emu_kernel_running;  // the kernel whose blocks run now
static inline int emu_shared_register(void* p, size_t n) {
    emu_shared_vars.push_back(EmuSharedVar{p, n, emu_kernel_running});
    memset(p, 0xff, n);
    return 1;
}
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
// (which must see stack switches through swapcontext; the kernel-address callbacks of
// EMU_TRACK need nothing of the kind) a fiber switch is emu_switch below:
// save the callee-saved registers on the current stack, swap stack pointers, restore.
#if defined(__x86_64__) && (!defined(__SANITIZE_ADDRESS__) || defined(EMU_TRACK))
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

// a cp.async copy waiting in its thread's queue: group ~0u until committed
struct EmuAsyncCopy {
    void* dst;
    const void* src;
    int bytes;
    bool valid;      // false: zero-fill, nothing read (src-size 0)
    unsigned group;
};

// a fiber's state is 16 bytes, so that the scheduler's scans over a block of 1024 read 16 KiB
// (the ucontexts, about 1 KiB each, only where the fast switch is not used: ctxs)
struct EmuFiber { void* sp; int state; };
struct EmuBlock {
    ucontext_t main;
    void* main_sp;
    EmuFiber* fibers;
    ucontext_t* ctxs;
    char* stacks;
    int n, cur;
    void (*body)(void*);
    void* arg;
    // the shuffles' exchange slots, two sets used in turn by each lane's successive
    // shuffles (xchg_turn): a lane that has passed shuffle k's barrier knows every lane of
    // its warp has read the slots of shuffle k-1, so k+1 may write them again, and a
    // shuffle needs one warp barrier instead of two (most of a kernel's switches)
    unsigned long long xchg[2][EMU_MAX_THREADS];
    unsigned char xchg_turn[EMU_MAX_THREADS];
    // the same for the tensor cores' operands, up to 8 words a lane (an mma's A and B in one
    // exchange: one warp barrier instead of three)
    unsigned wide[2][EMU_MAX_THREADS][8];
    unsigned char wide_turn[EMU_MAX_THREADS];
    unsigned long long blocks_run;  // (for the lagging warp's draw)
    // cp.async: each thread's copies not yet done (until a wait takes their group), and the
    // groups it has committed
    std::vector<EmuAsyncCopy> cp_pending[EMU_MAX_THREADS];
    unsigned cp_groups[EMU_MAX_THREADS];
};
extern EmuBlock emu_block;

static inline void emu_fail(const char* what) {
    fprintf(stderr, "emulated CUDA: %s (block %u,%u, thread %u,%u)\n", what, blockIdx.x, blockIdx.y, threadIdx.x, threadIdx.y);
    abort();
}

static EMU_NO_TRACK inline void emu_set_thread(int t) {
    // (a 1-D block, nearly every kernel's, needs no divisions: they cost as much as the switch)
    if (blockDim.y == 1 && blockDim.z == 1) { threadIdx.x = (unsigned)t; threadIdx.y = threadIdx.z = 0; return; }
    threadIdx = uint3{(unsigned)t % blockDim.x, ((unsigned)t / blockDim.x) % blockDim.y, (unsigned)t / (blockDim.x * blockDim.y)};
}

// a fiber stops at a barrier and hands control back to the block's scheduler
static EMU_NO_TRACK inline void emu_wait(int state) {
    EmuFiber* f = &emu_block.fibers[emu_block.cur];
    f->state = state;
#ifdef EMU_FAST_SWITCH
    emu_switch(&f->sp, emu_block.main_sp);
#else
    swapcontext(&emu_block.ctxs[emu_block.cur], &emu_block.main);
#endif
}

static EMU_NO_TRACK void emu_fiber_main(void) {
    emu_block.body(emu_block.arg);
    emu_wait(EMU_DONE);  // never resumed
}

// runs one block: every fiber until it waits or ends, then releases the warps all of whose
// threads wait at a warp barrier, or else the block when all of it waits at __syncthreads
static EMU_NO_TRACK inline void emu_run_block(int n, void (*body)(void*), void* arg) {
    EmuBlock* b = &emu_block;
    if (b->stacks == NULL) {
        b->stacks = (char*)mmap(NULL, (size_t)EMU_MAX_THREADS * EMU_STACK_BYTES, PROT_READ | PROT_WRITE,
                                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        b->fibers = (EmuFiber*)calloc(EMU_MAX_THREADS, sizeof(EmuFiber));
        b->ctxs = (ucontext_t*)calloc(EMU_MAX_THREADS, sizeof(ucontext_t));
        if (b->stacks == MAP_FAILED || b->fibers == NULL || b->ctxs == NULL) { fprintf(stderr, "emulated CUDA: out of memory\n"); abort(); }
    }
    if (n < 1 || n > EMU_MAX_THREADS) { emu_fail("block size out of range"); }
    b->n = n; b->body = body; b->arg = arg;
    for (int t = 0; t < n; t++) {
        EmuFiber* f = &b->fibers[t];
        // The stacks are EMU_STACK_BYTES apart, a multiple of every cache's set span: with
        // their tops aligned alike, every fiber's live frames fall in the same few sets, and
        // in a block of more threads than the L2 has ways (16) each switch missed it. Each
        // top moves down by t cache lines (64 KiB at most of the 256), spreading the frames
        // over the sets: the emulated fp32 trainer's 10-step d2 run took 7.1-7.8 s without
        // this, 6.6 s with it.
        char* stack = b->stacks + (size_t)t * EMU_STACK_BYTES;
        size_t stack_bytes = EMU_STACK_BYTES - (size_t)t * 64;
#ifdef EMU_FAST_SWITCH
        // a fresh stack as emu_switch leaves one: six saved registers (zero), then the
        // address emu_switch returns to, entered with the stack as after a call
        void** top = (void**)(stack + stack_bytes);
        top[-1] = NULL;                          // the return address emu_fiber_main never uses
        top[-2] = (void*)&emu_fiber_main;
        for (int r = 3; r <= 8; r++) { top[-r] = NULL; }
        f->sp = &top[-8];
#else
        ucontext_t* ctx = &b->ctxs[t];
        getcontext(ctx);
        ctx->uc_stack.ss_sp = stack;
        ctx->uc_stack.ss_size = stack_bytes;
        ctx->uc_link = NULL;
        makecontext(ctx, emu_fiber_main, 0);
#endif
        f->state = EMU_RUN;
        b->xchg_turn[t] = 0;
        b->wide_turn[t] = 0;
        b->cp_pending[t].clear();  // (a block's copies never outlive it)
        b->cp_groups[t] = 0;
    }
    // [Note: the lagging warp] In a block of several warps, one (drawn from EMU_SEED and the
    // block's count) runs, and is released from its warp barriers, only when no other warp
    // can move: the others run as far ahead as the next __syncthreads lets them, which a GPU
    // allows.
    // A barrier missing between warps then shows: a warp that reuses a shared buffer the
    // lagging one still reads poisons it (cp.async's copies do at their issue), and one that
    // reads rows the lagging one has not copied yet reads the poison.
    int nwarps = (n + 31) / 32;
    int lag = nwarps > 1 ? (int)(((b->blocks_run++ + 1) * 0x9E3779B97F4A7C15ull + emu_dev.seed) % (unsigned long long)nwarps) : -1;
    for (;;) {
        int ran = 0;
        for (int pass = 0; pass < 2 && !ran; pass++) {  // the lagging warp's fibers only when no other could run
            for (int t = 0; t < n; t++) {
                if (b->fibers[t].state != EMU_RUN || (t / 32 == lag) != (pass == 1)) { continue; }
                b->cur = t;
                emu_set_thread(t);
#ifdef EMU_FAST_SWITCH
                emu_switch(&b->main_sp, b->fibers[t].sp);
#else
                swapcontext(&b->main, &b->ctxs[t]);
#endif
                ran = 1;
            }
        }
        int done = 0, at_block = 0, released = 0;
        for (int pass = 0; pass < 2 && !released; pass++) {  // the lagging warp only in a second pass
            for (int w = 0; w < nwarps; w++) {
                if ((w == lag) != (pass == 1)) { continue; }
                int lo = w * 32, hi = lo + 32 < n ? lo + 32 : n, at_warp = 0;
                for (int t = lo; t < hi; t++) { at_warp += b->fibers[t].state == EMU_AT_WARP; }
                if (at_warp == hi - lo) {
                    for (int t = lo; t < hi; t++) { b->fibers[t].state = EMU_RUN; }
                    released = 1;
                }
            }
        }
        if (released || ran) { continue; }
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

static EMU_NO_TRACK inline void __syncthreads(void) { emu_wait(EMU_AT_BLOCK); }
static EMU_NO_TRACK inline void __syncwarp(unsigned = 0xffffffffu) { emu_wait(EMU_AT_WARP); }

// width (a power of two up to 32) cuts the warp into groups of that many lanes: a lane whose
// partner (lane ^ lane_mask) is in a later group gets its own value back, as on a GPU
template <typename T> static inline EMU_NO_TRACK T __shfl_xor_sync(unsigned, T v, int lane_mask, int width = 32) {
    static_assert(sizeof(T) <= 8, "shuffle of a type over 8 bytes");
    if (width < 1 || width > 32 || (width & (width - 1)) != 0) { emu_fail("__shfl_xor_sync's width is not a power of two up to 32"); }
    int t = emu_block.cur;
    unsigned long long* slots = emu_block.xchg[emu_block.xchg_turn[t]];
    emu_block.xchg_turn[t] ^= 1;
    memcpy(&slots[t], &v, sizeof(T));
    __syncwarp();
    int lane = t & 31, group_end = (lane & (32 - width)) | (31 & (width - 1)), partner = lane ^ lane_mask;
    int src = (t & ~31) | (partner > group_end ? lane : partner);
    if (src >= emu_block.n) { emu_fail("shuffle from a lane past the block's end"); }
    T r;
    memcpy(&r, &slots[src], sizeof(T));
    return r;
}

// ----------------------------------------------------------------------------
// the tensor cores' warp operations (llmc/mma.cuh calls these where a host compiler builds
// it): every lane hands its operand to the warp through the shuffles' exchange slots, then
// computes its own part of the result from all of them, as the PTX ISA lays the fragments
// out (llmc/mma.cuh's [Note: fragment layouts]); cp.async's copies wait in the thread's
// queue until a cp.async.wait_group takes their group, so that a tile read before its wait
// reads the shared memory's poison, as it would read stale bytes on a GPU

// v from every lane of this thread's warp: the warp's 32 slots, valid until this lane's
// next-but-one exchange (see EmuBlock's xchg)
static inline EMU_NO_TRACK const unsigned long long* emu_warp_share(unsigned long long v, const char* what) {
    int t = emu_block.cur;
    if ((t | 31) >= emu_block.n) { emu_fail(what); }
    unsigned long long* slots = emu_block.xchg[emu_block.xchg_turn[t]];
    emu_block.xchg_turn[t] ^= 1;
    slots[t] = v;
    __syncwarp();
    return slots + (t & ~31);
}
static inline float emu_bf16_lo(unsigned v) { unsigned u = v << 16; float f; memcpy(&f, &u, 4); return f; }
static inline float emu_bf16_hi(unsigned v) { unsigned u = v & 0xffff0000u; float f; memcpy(&f, &u, 4); return f; }

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: d += A B over the warp, each output
// summed in fp32 over k in order (the products of bf16 are exact in fp32). The lane's rows of
// A come from the 4 lanes of its group (a[i]: rows g, + 8 for odd i; columns 2t, + 8 for
// i >= 2), its columns of B from the groups 2t and 2t + 1 (b[i]: rows 2t, + 8 for i = 1,
// column g)
static inline EMU_NO_TRACK void emu_mma_bf16_16816(float d[4], const unsigned a[4], const unsigned b[2]) {
    int t = emu_block.cur, lane = t & 31, g = lane >> 2, tq = lane & 3;
    if ((t | 31) >= emu_block.n) { emu_fail("mma.sync in a warp without all its 32 lanes"); }
    unsigned (*slots)[8] = emu_block.wide[emu_block.wide_turn[t]];
    emu_block.wide_turn[t] ^= 1;
    memcpy(slots[t], a, 4 * sizeof(unsigned));
    memcpy(slots[t] + 4, b, 2 * sizeof(unsigned));
    __syncwarp();
    const unsigned (*w)[8] = slots + (t & ~31);
    float A[2][16], B[2][16];  // this lane's rows g, g + 8 of A; its columns 2t, 2t + 1 of B
    for (int l = 0; l < 4; l++) {
        const unsigned* r = w[4 * g + l];
        for (int i = 0; i < 4; i++) {
            int col = 2 * l + 8 * (i >> 1);
            A[i & 1][col] = emu_bf16_lo(r[i]);
            A[i & 1][col + 1] = emu_bf16_hi(r[i]);
        }
    }
    for (int c = 0; c < 2; c++) {
        for (int l = 0; l < 4; l++) {
            const unsigned* r = w[4 * (2 * tq + c) + l];
            for (int i = 0; i < 2; i++) {
                B[c][2 * l + 8 * i] = emu_bf16_lo(r[4 + i]);
                B[c][2 * l + 8 * i + 1] = emu_bf16_hi(r[4 + i]);
            }
        }
    }
    for (int i = 0; i < 4; i++) {  // d[i]: row g (+ 8 for i >= 2), column 2t + (i & 1)
        float acc = d[i];
        for (int k = 0; k < 16; k++) { acc = fmaf(A[i >> 1][k], B[i & 1][k], acc); }
        d[i] = acc;
    }
}

// ldmatrix.sync.aligned.m8n8.x{count}[.trans].shared.b16: lanes 8i..8i+7 give matrix i's row
// addresses (16 bytes each, 16-byte aligned); r[i] = M_i[g][2t, 2t+1], or M_i[2t, 2t+1][g]
static inline EMU_NO_TRACK void emu_ldmatrix(unsigned* r, int count, int trans, const void* row) {
    if (((uintptr_t)row & 15) != 0 && (emu_block.cur & 31) < 8 * count) { emu_fail("ldmatrix: a row address not 16-byte aligned"); }
    const unsigned long long* s = emu_warp_share((unsigned long long)(uintptr_t)row, "ldmatrix in a warp without all its 32 lanes");
    int lane = emu_block.cur & 31, g = lane >> 2, t = lane & 3;
    for (int i = 0; i < count; i++) {
        unsigned short lo, hi;
        if (!trans) {
            const unsigned short* m = (const unsigned short*)(uintptr_t)s[8 * i + g];
            lo = m[2 * t]; hi = m[2 * t + 1];
        } else {
            lo = ((const unsigned short*)(uintptr_t)s[8 * i + 2 * t])[g];
            hi = ((const unsigned short*)(uintptr_t)s[8 * i + 2 * t + 1])[g];
        }
        r[i] = (unsigned)lo | (unsigned)hi << 16;
    }
}

// cp.async.cg.shared.global [dst], [src], bytes, src-size (valid ? bytes : 0): queued as the
// thread's, uncommitted; done when a wait takes its group. On a GPU the bytes may land at any
// moment in between, so the destination is poisoned at once: a thread that still reads it
// (a barrier missing before the buffer's reuse) reads NaN. The copy reads the global source
// as the kernel (recorded by the race checker) and zero-fills when not valid.
static inline void emu_cp_async(void* dst, const void* src, int bytes, bool valid) {
    if (((uintptr_t)dst | (uintptr_t)src) & (uintptr_t)(bytes - 1)) { emu_fail("cp.async: an address not aligned to its size"); }
    memset(dst, 0xff, (size_t)bytes);
    emu_block.cp_pending[emu_block.cur].push_back(EmuAsyncCopy{dst, src, bytes, valid, ~0u});
}
static inline EMU_NO_TRACK void emu_cp_async_commit(void) {
    int t = emu_block.cur;
    for (EmuAsyncCopy& c : emu_block.cp_pending[t]) {
        if (c.group == ~0u) { c.group = emu_block.cp_groups[t]; }
    }
    emu_block.cp_groups[t]++;
}
// cp.async.wait_group n: every committed group but the newest n done
static inline void emu_cp_async_wait(int n) {
    int t = emu_block.cur;
    std::vector<EmuAsyncCopy>& q = emu_block.cp_pending[t];
    unsigned done_below = emu_block.cp_groups[t] >= (unsigned)n ? emu_block.cp_groups[t] - (unsigned)n : 0;
    size_t keep = 0;
    for (size_t k = 0; k < q.size(); k++) {
        EmuAsyncCopy c = q[k];
        if (c.group == ~0u || c.group >= done_below) { q[keep++] = c; continue; }
        for (int w = 0; w < c.bytes / 4; w++) {  // word by word: the kernel's own (tracked) loads
            unsigned v = c.valid ? ((const unsigned*)c.src)[w] : 0u;
            ((unsigned*)c.dst)[w] = v;
        }
    }
    q.resize(keep);
}

// CUDA's integer min and max (the device math library's overloads)
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }

static inline unsigned int __float_as_uint(float x) { unsigned int u; memcpy(&u, &x, 4); return u; }
static inline float __uint_as_float(unsigned int u) { float x; memcpy(&x, &u, 4); return x; }

// the device's IEEE round-to-nearest intrinsics: one rounding each, never fused with
// anything around them (the volatile result is stored and read back, so g++ cannot contract
// it into an FMA whatever -ffp-contract or -march says); __fmaf_rn is C's fmaf, one rounding
static inline float __fmul_rn(float a, float b) { volatile float r = a * b; return r; }
static inline float __fadd_rn(float a, float b) { volatile float r = a + b; return r; }
static inline float __fdiv_rn(float a, float b) { volatile float r = a / b; return r; }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }

// ----------------------------------------------------------------------------
// errors: the last one any call returned, for cudaGetLastError

inline cudaError_t emu_last_error = cudaSuccess;
static inline cudaError_t emu_ret(cudaError_t e) {
    if (e != cudaSuccess) { emu_last_error = e; }
    return e;
}
static inline int emu_stream_id(cudaStream_t s) { return s == NULL ? 1 : s->id; }

// ----------------------------------------------------------------------------
// kernel launches

inline std::map<const void*, size_t> emu_smem_optin;      // per kernel, from cudaFuncSetAttribute
#define EMU_SMEM_DEFAULT (48 * 1024)
#define EMU_SMEM_OPTIN_MAX (227 * 1024)

// kernel<<<grid, block, smem, stream>>>(args) becomes emu_launch(kernel, grid, block, smem, stream)(args)
template <typename... P> struct EmuLaunch {
    void (*kernel)(P...);
    dim3 grid, block;
    size_t smem;
    cudaStream_t stream;
    const char* file;
    int line;
    template <typename... A> void operator()(A... args) const {
        // the hardware's limits: a launch outside them runs nothing and fails
        size_t threads = (size_t)block.x * block.y * block.z;
        auto it = emu_smem_optin.find((const void*)kernel);
        size_t limit = it == emu_smem_optin.end() ? EMU_SMEM_DEFAULT : it->second;
        size_t statics = 0;  // (known once the kernel has run: its variables register as reached)
        for (const EmuSharedVar& v : emu_shared_vars) { statics += v.kernel == (const void*)kernel ? v.n : 0; }
        if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535 ||
            threads == 0 || threads > EMU_MAX_THREADS || block.z > 64) {
            fprintf(stderr, "emulated CUDA: %s:%d: launch of grid (%u,%u,%u) block (%u,%u,%u) beyond the hardware's limits\n",
                    file, line, grid.x, grid.y, grid.z, block.x, block.y, block.z);
            emu_ret(cudaErrorInvalidConfiguration);
            return;
        }
        size_t total_limit = it == emu_smem_optin.end() ? EMU_SMEM_DEFAULT : EMU_SMEM_OPTIN_MAX;
        if (smem > limit || statics + smem > total_limit) {
            fprintf(stderr, "emulated CUDA: %s:%d: %zu bytes of dynamic shared memory (and %zu static), over the %zu this "
                    "kernel %s\n", file, line, smem, statics, limit,
                    it == emu_smem_optin.end() ? "may use without cudaFuncSetAttribute" : "opted into");
            emu_ret(cudaErrorInvalidValue);
            return;
        }
        struct Bound { void (*k)(P...); std::tuple<P...> a; dim3 grid, block; size_t smem, limit; const char* file; int line; };
        Bound bound{kernel, std::tuple<P...>(static_cast<P>(args)...), grid, block, smem, limit, file, line};
        EmuOp* op = emu_op_new(emu_stream_id(stream), "a kernel", file, line);
        op->track = 1;
        op->run = [bound](EmuOp*) {
            auto body = [](void* p) { const Bound* bd = (const Bound*)p; std::apply(bd->k, bd->a); };
            gridDim = bound.grid;
            blockDim = bound.block;
            emu_kernel_running = (const void*)bound.k;
            for (unsigned bz = 0; bz < bound.grid.z; bz++) {
                for (unsigned by = 0; by < bound.grid.y; by++) {
                    for (unsigned bx = 0; bx < bound.grid.x; bx++) {
                        blockIdx = uint3{bx, by, bz};
                        void* sm = NULL;
                        if (bound.smem > 0) { sm = malloc(bound.smem); memset(sm, 0xff, bound.smem); }
                        for (const EmuSharedVar& v : emu_shared_vars) { memset(v.p, 0xff, v.n); }
                        emu_dynamic_smem = sm;
                        emu_run_block((int)(bound.block.x * bound.block.y * bound.block.z), body, (void*)&bound);
                        free(sm);
                        emu_dynamic_smem = NULL;
                    }
                }
            }
        };
        emu_op_push(op);
    }
};
template <typename... P>
static inline EmuLaunch<P...> emu_launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem = 0, cudaStream_t s = NULL,
                                         const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    return EmuLaunch<P...>{kernel, grid, block, smem, s, file, line};
}

// host work queued on a stream as if it were a kernel (its accesses recorded the same way):
// for the tests' stand-ins of kernels and libraries
template <typename F>
static inline void emu_stream_work(cudaStream_t s, const char* what, F work, const char* file = __builtin_FILE(),
                                   int line = __builtin_LINE()) {
    EmuOp* op = emu_op_new(emu_stream_id(s), what, file, line);
    op->track = 1;
    op->run = [work](EmuOp*) { work(); };
    emu_op_push(op);
}
// the same with its accesses declared, not recorded (the libraries' stand-ins, whose
// arithmetic runs outside the instrumented code)
template <typename F>
static inline void emu_stream_declared(cudaStream_t s, const char* what, std::vector<EmuAccess> acc, F work,
                                       const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    EmuOp* op = emu_op_new(emu_stream_id(s), what, file, line);
    for (EmuAccess& a : acc) {
        if (a.hi > a.lo && emu_where((const void*)a.lo) != 0) { op->acc.push_back(a); }
    }
    op->run = [work](EmuOp*) { work(); };
    emu_op_push(op);
}
static inline EmuAccess emu_range(const void* p, size_t n, int write) {
    return EmuAccess{(uintptr_t)p, (uintptr_t)p + n, write};
}

// ----------------------------------------------------------------------------
// memory

static inline cudaError_t cudaMalloc(void** p, size_t n) {
    emu_tick();
    *p = emu_alloc(n, EMU_MEM_DEVICE);
    return *p != NULL ? cudaSuccess : emu_ret(cudaErrorMemoryAllocation);
}
template <typename T> static inline cudaError_t cudaMalloc(T** p, size_t n) { return cudaMalloc((void**)p, n); }
static inline cudaError_t cudaMallocHost(void** p, size_t n) {
    emu_tick();
    *p = emu_alloc(n, EMU_MEM_PINNED);
    return *p != NULL ? cudaSuccess : emu_ret(cudaErrorMemoryAllocation);
}
// (flags: cudaHostAlloc's; every pinned allocation here is the same)
template <typename T> static inline cudaError_t cudaMallocHost(T** p, size_t n, unsigned flags = 0) {
    if ((flags & ~7u) != 0) { return emu_ret(cudaErrorInvalidValue); }  // Portable | Mapped | WriteCombined
    return cudaMallocHost((void**)p, n);
}
// cudaFree and cudaFreeHost wait for the whole device first, as they do on a GPU
static inline cudaError_t cudaFree(void* p) {
    if (p == NULL) { return cudaSuccess; }
    emu_device_sync("cudaFree");
    return emu_free(p, EMU_MEM_DEVICE) == 0 ? cudaSuccess : emu_ret(cudaErrorInvalidValue);
}
static inline cudaError_t cudaFreeHost(void* p) {
    if (p == NULL) { return cudaSuccess; }
    emu_device_sync("cudaFreeHost");
    return emu_free(p, EMU_MEM_PINNED) == 0 ? cudaSuccess : emu_ret(cudaErrorInvalidValue);
}
template <typename T> static inline cudaError_t cudaMallocAsync(T** p, size_t n, cudaStream_t) { return cudaMalloc((void**)p, n); }
// stream-ordered: the memory goes once the stream has reached the free
static inline cudaError_t cudaFreeAsync(void* p, cudaStream_t s, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    if (p == NULL) { return cudaSuccess; }
    EmuOp* op = emu_op_new(emu_stream_id(s), "cudaFreeAsync", file, line);
    op->acc.push_back(emu_range(p, 1, 1));  // a write: nothing may still use it
    op->run = [p](EmuOp*) { emu_free(p, EMU_MEM_DEVICE); };
    emu_op_push(op);
    return cudaSuccess;
}

// the kind must say where the pointers live (emu_where's answers; pinned and pageable are
// both "host")
static inline int emu_kind_ok(int wd, int ws, cudaMemcpyKind k) {
    if (wd < 0 || ws < 0) { return 0; }  // freed or inside no allocation of the arena
    int dd = wd == EMU_MEM_DEVICE, sd = ws == EMU_MEM_DEVICE;
    switch (k) {
    case cudaMemcpyHostToHost: return !dd && !sd;
    case cudaMemcpyHostToDevice: return dd && !sd;
    case cudaMemcpyDeviceToHost: return !dd && sd;
    case cudaMemcpyDeviceToDevice: return dd && sd;
    case cudaMemcpyDefault: return 1;
    }
    return 0;
}

static inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind k, cudaStream_t s = NULL,
                                          const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    int wd = emu_where(dst), ws = emu_where(src);
    if (!emu_kind_ok(wd, ws, k)) {
        fprintf(stderr, "emulated CUDA: %s:%d: cudaMemcpy kind %d does not match where its pointers live\n", file, line, (int)k);
        return emu_ret(cudaErrorInvalidValue);
    }
    if (n == 0) { return cudaSuccess; }
    emu_find_range(dst, n, "cudaMemcpy's destination");
    emu_find_range(src, n, "cudaMemcpy's source");
    EmuOp* op = emu_op_new(emu_stream_id(s), "cudaMemcpy", file, line);
    if (ws != 0) { op->acc.push_back(emu_range(src, n, 0)); }
    if (wd != 0) { op->acc.push_back(emu_range(dst, n, 1)); }
    std::vector<char>* staged = NULL;
    if (ws == 0) {  // from pageable memory: staged at the call, as the driver does
        staged = new std::vector<char>((const char*)src, (const char*)src + n);
        src = staged->data();
    } else if (ws == EMU_MEM_PINNED) {  // from pinned memory: read when the copy runs
        op->src_lo = (uintptr_t)src; op->src_hi = (uintptr_t)src + n;
        op->src_sum = emu_checksum(op->src_lo, op->src_hi);
    }
    if (wd == EMU_MEM_PINNED) {  // into pinned memory: poisoned until the copy runs
        memset(dst, 0xff, n);
        op->dst_lo = (uintptr_t)dst; op->dst_hi = (uintptr_t)dst + n;
    }
    op->run = [dst, src, n, staged](EmuOp*) {
        memmove(dst, src, n);
        delete staged;
    };
    int sid = op->stream;
    unsigned seq = op->seq;
    EmuClock clock = op->clock;
    emu_op_push(op);
    if (wd == 0) { emu_host_wait(sid, seq, clock, "cudaMemcpyAsync into pageable memory"); }  // returns once done
    return cudaSuccess;
}
// synchronous: on the legacy default stream, and the host waits for it
static inline cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind k,
                                     const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    cudaError_t e = cudaMemcpyAsync(dst, src, n, k, NULL, file, line);
    if (e != cudaSuccess) { return e; }
    emu_stream_sync(1, "cudaMemcpy");
    return cudaSuccess;
}
static inline cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t s = NULL, const char* file = __builtin_FILE(),
                                          int line = __builtin_LINE()) {
    if (emu_where(p) <= 0) {
        fprintf(stderr, "emulated CUDA: %s:%d: cudaMemset of memory that is not the device's\n", file, line);
        return emu_ret(cudaErrorInvalidValue);
    }
    if (n == 0) { return cudaSuccess; }
    emu_find_range(p, n, "cudaMemset");
    EmuOp* op = emu_op_new(emu_stream_id(s), "cudaMemset", file, line);
    op->acc.push_back(emu_range(p, n, 1));
    op->run = [p, v, n](EmuOp*) { memset(p, v, n); };
    emu_op_push(op);
    return cudaSuccess;
}
// asynchronous with respect to the host (for device memory), on the legacy default stream
static inline cudaError_t cudaMemset(void* p, int v, size_t n, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    return cudaMemsetAsync(p, v, n, NULL, file, line);
}

// ----------------------------------------------------------------------------
// streams and events

static inline cudaError_t cudaStreamCreate(cudaStream_t* s) { *s = new EmuStream{emu_stream_new(1)}; return cudaSuccess; }
static inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) {
    *s = new EmuStream{emu_stream_new(!(flags & cudaStreamNonBlocking))};
    return cudaSuccess;
}
// (its queued work still runs, as on a GPU; the queue stays, unused)
static inline cudaError_t cudaStreamDestroy(cudaStream_t s) { delete s; return cudaSuccess; }
static inline cudaError_t cudaStreamSynchronize(cudaStream_t s) { emu_stream_sync(emu_stream_id(s), "cudaStreamSynchronize"); return cudaSuccess; }
static inline cudaError_t cudaDeviceSynchronize(void) { emu_device_sync("cudaDeviceSynchronize"); return cudaSuccess; }
static inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags) {
    *e = new EmuEvent();
    (*e)->timing = (flags & cudaEventDisableTiming) == 0;
    return cudaSuccess;
}
static inline cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, 0); }
static inline cudaError_t cudaEventDestroy(cudaEvent_t e) { delete e; return cudaSuccess; }
// the event becomes "everything issued on s so far" (its most recent record)
static inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = NULL) {
    if (e->timing) {  // (an operation of its own, for the stamp: only the timing events, which only benchmarks make)
        emu_stream_work(s, "cudaEventRecord's timestamp", [e]() {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            e->stamp_ms = ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
        });
    }
    EmuQueue* q = emu_queue(emu_stream_id(s));
    e->recorded = 1;
    e->stream = q->id;
    e->seq = q->seq;
    e->clock = q->clock;
    emu_tick();
    return cudaSuccess;
}
static inline int emu_event_done(cudaEvent_t e) { return !e->recorded || emu_queue(e->stream)->done >= e->seq; }
static inline cudaError_t cudaEventQuery(cudaEvent_t e) {
    if (emu_query_begin() && !emu_event_done(e)) { emu_step(); }  // (a polling host: see emu_query_begin)
    if (!emu_event_done(e)) { return emu_ret(cudaErrorNotReady); }
    if (e->recorded) { emu_join(&emu_dev.host, &e->clock); }
    return cudaSuccess;
}
// everything issued on s is done (then the host knows it happened, as after a synchronize), or
// cudaErrorNotReady
static inline cudaError_t cudaStreamQuery(cudaStream_t s) {
    EmuQueue* q = emu_queue(emu_stream_id(s));
    if (emu_query_begin() && q->done < q->seq) { emu_step(); }  // (a polling host: see emu_query_begin)
    if (q->done < q->seq) { return emu_ret(cudaErrorNotReady); }
    emu_join(&emu_dev.host, &q->clock);
    return cudaSuccess;
}
// the host's milliseconds between the two records' runs (the emulator's, not a GPU's time)
static inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
    if (!start->timing || !end->timing) { return emu_ret(cudaErrorInvalidResourceHandle); }
    if (!start->recorded || !end->recorded || !emu_event_done(start) || !emu_event_done(end)) { return emu_ret(cudaErrorNotReady); }
    *ms = (float)(end->stamp_ms - start->stamp_ms);
    return cudaSuccess;
}
static inline cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    if (e->recorded) { emu_host_wait(e->stream, e->seq, e->clock, "cudaEventSynchronize"); }
    return cudaSuccess;
}
// what s issues from now on comes after the event's most recent record (as of this call)
static inline cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) {
    EmuQueue* q = emu_queue(emu_stream_id(s));
    if (e->recorded) { emu_join(&q->clock, &e->clock); }
    emu_tick();
    return cudaSuccess;
}

static inline cudaError_t cudaGetLastError(void) { cudaError_t e = emu_last_error; emu_last_error = cudaSuccess; return e; }
static inline cudaError_t cudaPeekAtLastError(void) { return emu_last_error; }
static inline cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : emu_ret(cudaErrorInvalidValue); }
static inline cudaError_t cudaGetDevice(int* d) { *d = 0; return cudaSuccess; }
static inline cudaError_t cudaGetDeviceCount(int* n) { *n = 1; return cudaSuccess; }
// a GPU of 64 GiB, or EMU_DEVICE_MEMORY bytes (a test's small GPU: the trainer's -r -1 then
// finds too little room); what this process allocated is in use, the rest free
static inline cudaError_t cudaMemGetInfo(size_t* free_b, size_t* total_b) {
    const char* m = getenv("EMU_DEVICE_MEMORY");
    *total_b = m != NULL && *m != '\0' ? (size_t)strtoull(m, NULL, 10) : (size_t)1 << 36;
    *free_b = *total_b > emu_dev.device_bytes ? *total_b - emu_dev.device_bytes : 0;
    return cudaSuccess;
}
static inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) {
    memset(p, 0, sizeof(*p));
    snprintf(p->name, sizeof(p->name), "emulated on the CPU");
    long long id = (long long)getpid();  // each process its own "GPU": ranks do not share one
    memcpy(p->uuid.bytes, &id, sizeof(id));
    p->major = 9; p->multiProcessorCount = 1;
    p->sharedMemPerBlock = EMU_SMEM_DEFAULT; p->sharedMemPerBlockOptin = EMU_SMEM_OPTIN_MAX; p->totalGlobalMem = (size_t)1 << 32;
    return cudaSuccess;
}
// the two attributes the trainer reads for its memory rate (--profile-ops' floors): an H100
// SXM's, 2619 MHz on a 5120-bit bus (3.35 TB/s); any other attribute is refused
enum cudaDeviceAttr { cudaDevAttrMemoryClockRate = 36, cudaDevAttrGlobalMemoryBusWidth = 37 };
static inline cudaError_t cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int device) {
    if (device != 0) { return emu_ret(cudaErrorInvalidValue); }
    switch (attr) {
    case cudaDevAttrMemoryClockRate: *value = 2619000; return cudaSuccess;
    case cudaDevAttrGlobalMemoryBusWidth: *value = 5120; return cudaSuccess;
    }
    return emu_ret(cudaErrorInvalidValue);
}
// per kernel, as on a GPU: the opt-in of one kernel is not another's
template <typename K> static inline cudaError_t cudaFuncSetAttribute(K k, cudaFuncAttribute, int v) {
    if (v < 0 || (size_t)v > EMU_SMEM_OPTIN_MAX) { return emu_ret(cudaErrorInvalidValue); }
    emu_smem_optin[(const void*)k] = (size_t)v;
    return cudaSuccess;
}
static inline const char* cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorNotReady: return "device not ready";
    default: return "emulated CUDA error";
    }
}

// the globals above, in the one file that defines EMU_DEFINE_GLOBALS before including
#ifdef EMU_DEFINE_GLOBALS
uint3 blockIdx, threadIdx;
dim3 blockDim, gridDim;
void* emu_dynamic_smem = NULL;
EmuBlock emu_block;
#endif

#endif // EMU_CUDA_RUNTIME_H
