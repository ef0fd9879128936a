/*
 The host-staged engine: the host engine (zero3/host.h) behind a GPU. The GPU trainer's
 backend for what the device engine does not do: NVMe optimizer offload, parameter
 offload, and several ranks sharing one GPU (the multi-rank GPU tests).

 The host engine gathers, releases, reduces and updates on the host over MPI, exactly as
 in the CPU trainer, whose tests cover that logic. The GPU holds a floatX copy of every
 unit and of its gradient, each unit on 256 bytes as in the device engine (zero3/plan.h:
 cuBLASLt sees a tensor at the same alignment on either backend):
   fetch    uploads the engine's fp32 unit, converted on the GPU, whenever it may differ
            from the copy: at every fetch at stage 3 (the engine gathered it), once per
            step otherwise (the step changed it)
   reduce   downloads the unit's gradient as fp32, adds it into the engine's gradient
            buffer and zeroes the device copy, at every micro-step, so that every stage
            does the same arithmetic
 The copies are synchronous (the engine may reuse its buffer as soon as the unit is
 released): this backend is for correctness and for model states that do not fit the
 GPU, not for speed.
*/
#ifndef ZERO3_STAGED_CUH
#define ZERO3_STAGED_CUH

#include <stdlib.h>              // calloc, free
#include <string.h>              // memset
#include "zero3/util.h"          // zero_error
#include "zero3/cuda_util.cuh"   // floatX, zero_cuda, the conversion kernels
#include "zero3/plan.h"          // ZeroPlan: the device copies' padded layout
#include "zero3/zero.h"          // the interface
#include "zero3/engine.h"        // ZeroOps, zero_create: what an engine implements
#include "zero3/host.h"          // the host engine underneath

typedef struct {
    ZeroHost* host;            // the engine, on the host
    cudaStream_t stream;       // the model's stream: the copies are ordered with its kernels
    ZeroPlan plan;             // the device copies: every unit padded to 256 bytes, one rank
    floatX* params;            // (padded_total) the parameters the kernels read
    floatX* grads;             // (padded_total) the gradients the kernels accumulate into
    int* fresh;                // (num_units) the device copy equals the engine's (until the next step)
    float* dev_stage;          // (largest unit) fp32 on the GPU: the conversions' other side
    float* host_stage;         // (largest unit) pinned fp32: a unit's gradient on its way to the engine
    double moved_h2d, moved_d2h;
    double bytes_device;       // params, grads and dev_stage
} ZeroStaged;

static int zero_staged_begin(void* impl, int pass, int last_micro) {
    return zero_host_begin(((ZeroStaged*)impl)->host, pass, last_micro);
}

static int zero_staged_fetch(void* impl, int u, void** out) {
    ZeroStaged* e = (ZeroStaged*)impl;
    void* src = NULL;
    if (zero_host_fetch(e->host, u, &src) != 0) { return -1; }
    floatX* dst = e->params + e->plan.units[u].full_offset;
    if (e->host->stage == 3 || !e->fresh[u]) {
        size_t n = e->plan.units[u].numel;
        if (zero_cuda(cudaMemcpyAsync(e->dev_stage, src, n * sizeof(float), cudaMemcpyHostToDevice, e->stream), "uploading a unit") != 0 ||
            zero_cuda(cudaStreamSynchronize(e->stream), "cudaStreamSynchronize") != 0) {
            return -1;
        }
        zero_to_floatx_kernel<<<(unsigned)CEIL_DIV(n, (size_t)256), 256, 0, e->stream>>>(dst, e->dev_stage, n);
        if (zero_cuda(cudaGetLastError(), "the conversion to floatX") != 0) { return -1; }
        e->fresh[u] = 1;
        e->moved_h2d += (double)n * sizeof(float);
    }
    *out = dst;
    return 0;
}

static int zero_staged_release(void* impl, int u) { return zero_host_release(((ZeroStaged*)impl)->host, u); }

// the device copy of the unit's gradient; the engine's own is opened at the reduce
static int zero_staged_grad(void* impl, int u, void** out) {
    ZeroStaged* e = (ZeroStaged*)impl;
    if (zero_schedule_grad(&e->host->sched, u) != 0) { return -1; }  // (the use check; zero_host_grad repeats it harmlessly)
    *out = e->grads + e->plan.units[u].full_offset;
    return 0;
}

static int zero_staged_reduce(void* impl, int u) {
    ZeroStaged* e = (ZeroStaged*)impl;
    size_t n = e->plan.units[u].numel;
    floatX* g = e->grads + e->plan.units[u].full_offset;
    zero_to_float_kernel<<<(unsigned)CEIL_DIV(n, (size_t)256), 256, 0, e->stream>>>(e->dev_stage, g, n);
    if (zero_cuda(cudaGetLastError(), "the conversion to fp32") != 0 ||
        zero_cuda(cudaMemcpyAsync(e->host_stage, e->dev_stage, n * sizeof(float), cudaMemcpyDeviceToHost, e->stream), "downloading a gradient") != 0 ||
        zero_cuda(cudaMemsetAsync(g, 0, n * sizeof(floatX), e->stream), "cudaMemsetAsync") != 0 ||
        zero_cuda(cudaStreamSynchronize(e->stream), "cudaStreamSynchronize") != 0) {
        return -1;
    }
    e->moved_d2h += (double)n * sizeof(float);
    void* acc = NULL;
    if (zero_host_grad(e->host, u, &acc) != 0) { return -1; }
    float* a = (float*)acc;
    const float* got = e->host_stage;
    #pragma omp parallel for if (n > (1 << 16))
    for (long i = 0; i < (long)n; i++) { a[i] += got[i]; }
    return zero_host_reduce(e->host, u);
}

static int zero_staged_end(void* impl) { return zero_host_end(((ZeroStaged*)impl)->host); }

// the step on the host (SIMD CPU Adam, NVMe when offloaded); every unit is uploaded
// again at its next fetch
static int zero_staged_step(void* impl, const ZeroStep* st) {
    ZeroStaged* e = (ZeroStaged*)impl;
    if (zero_cuda(cudaStreamSynchronize(e->stream), "cudaStreamSynchronize") != 0 || zero_host_step(e->host, st) != 0) { return -1; }
    memset(e->fresh, 0, e->plan.num_units * sizeof(int));
    return 0;
}

static int zero_staged_flush(void* impl) { return zero_host_flush(((ZeroStaged*)impl)->host); }

// The host engine's figures, its model states counted as host memory whatever its own
// tags say (all of them live on the host here), and the GPU's copies as the device's.
static int zero_staged_stats(void* impl, ZeroStats* out) {
    ZeroStaged* e = (ZeroStaged*)impl;
    ZeroStats h;
    memset(&h, 0, sizeof(h));
    if (zero_host_stats(e->host, &h) != 0) { return -1; }
    *out = h;
    out->moved[ZERO_MOVE_H2D] = e->moved_h2d;  // the GPU's own traffic: the units up, the gradients down
    out->moved[ZERO_MOVE_D2H] = e->moved_d2h;
    double copy = (double)e->plan.padded_total * sizeof(floatX);
    out->mem[ZERO_MEM_PARAMS] = copy;
    out->mem[ZERO_MEM_GRADS] = copy;
    out->mem[ZERO_MEM_OPTIMIZER] = 0;
    out->mem[ZERO_MEM_BUFFERS] = e->bytes_device - 2 * copy;
    out->mem[ZERO_MEM_HOST_PARAMS] = h.mem[ZERO_MEM_PARAMS] + h.mem[ZERO_MEM_HOST_PARAMS];
    out->mem[ZERO_MEM_HOST_GRADS] = h.mem[ZERO_MEM_GRADS] + h.mem[ZERO_MEM_HOST_GRADS];
    out->mem[ZERO_MEM_HOST_OPTIMIZER] = h.mem[ZERO_MEM_OPTIMIZER] + h.mem[ZERO_MEM_HOST_OPTIMIZER];
    // + the pinned staging of one unit's gradient (as large as dev_stage)
    out->mem[ZERO_MEM_HOST_BUFFERS] = h.mem[ZERO_MEM_BUFFERS] + h.mem[ZERO_MEM_HOST_BUFFERS] + out->mem[ZERO_MEM_BUFFERS];
    out->mem_peak = e->bytes_device;
    return 0;
}

// the host engine's state: the same file as the CPU trainer's ("host" layout)
static int zero_staged_save(void* impl, FILE* fp) { return zero_host_save(((ZeroStaged*)impl)->host, fp); }

static int zero_staged_load(void* impl, FILE* fp) {
    ZeroStaged* e = (ZeroStaged*)impl;
    if (zero_host_load(e->host, fp) != 0) { return -1; }
    memset(e->fresh, 0, e->plan.num_units * sizeof(int));
    return 0;
}

static int zero_staged_state_shard(void* impl, int what, int u, size_t* begin, size_t* n, float* out) {
    return zero_host_state_shard(((ZeroStaged*)impl)->host, what, u, begin, n, out);
}

static int zero_staged_state_write(void* impl, int what, int u, size_t begin, size_t n, const float* in) {
    return zero_host_state_write(((ZeroStaged*)impl)->host, what, u, begin, n, in);
}

// the host engine's copies, and the GPU's: uploaded again at the unit's next fetch
static int zero_staged_state_commit(void* impl, int what, int u) {
    ZeroStaged* e = (ZeroStaged*)impl;
    if (zero_host_state_commit(e->host, what, u) != 0) { return -1; }
    if (what == ZERO_STATE_MASTER) { e->fresh[u] = 0; }
    return 0;
}

static int zero_staged_empty_cache(void* impl, double* freed) { return zero_host_empty_cache(((ZeroStaged*)impl)->host, freed); }

static void zero_staged_free(void* impl) {
    ZeroStaged* e = (ZeroStaged*)impl;
    if (e == NULL) { return; }
    if (e->stream != NULL) { cudaStreamSynchronize(e->stream); }
    zero_host_free(e->host);
    cudaFree(e->params);
    cudaFree(e->grads);
    cudaFree(e->dev_stage);
    if (e->host_stage != NULL) { cudaFreeHost(e->host_stage); }
    free(e->fresh);
    zero_plan_free(&e->plan);
    free(e);
}

static const ZeroOps zero_staged_ops = {
    .name = "host",
    .begin = zero_staged_begin, .fetch = zero_staged_fetch, .release = zero_staged_release,
    .grad = zero_staged_grad, .reduce = zero_staged_reduce, .end = zero_staged_end,
    .step = zero_staged_step, .flush = zero_staged_flush, .stats = zero_staged_stats,
    .save = zero_staged_save, .load = zero_staged_load,
    .state_shard = zero_staged_state_shard, .state_write = zero_staged_state_write,
    .state_commit = zero_staged_state_commit, .empty_cache = zero_staged_empty_cache, .free = zero_staged_free,
};

// the host engine, and the GPU's copies: whole floatX units padded to 256 bytes, zeroed,
// and the staging; ordered on in->stream, the model's
static int zero_staged_init(void* impl, const ZeroInit* in) {
    ZeroStaged* e = (ZeroStaged*)impl;
    if (zero_gpu_check_floatx(in->param_bytes, "host-staged") != 0) { return -1; }
    e->stream = (cudaStream_t)in->stream;
    const ZeroModel* model = in->model;
    e->host = (ZeroHost*)calloc(1, sizeof(ZeroHost));
    e->fresh = (int*)calloc(model->num_units, sizeof(int));
    if (e->host == NULL || e->fresh == NULL) { return zero_error("zero: out of memory for the host-staged engine"); }
    if (zero_host_init(e->host, in) != 0 ||
        zero_plan_init(&e->plan, model->unit_numel, model->num_units, 1, 0, sizeof(floatX)) != 0) {
        return -1;
    }
    size_t largest = 0;
    for (int u = 0; u < model->num_units; u++) { largest = e->plan.units[u].numel > largest ? e->plan.units[u].numel : largest; }
    size_t copy = e->plan.padded_total * sizeof(floatX);
    if (zero_cuda(cudaMalloc((void**)&e->params, copy), "allocating the parameters' copy") != 0 ||
        zero_cuda(cudaMalloc((void**)&e->grads, copy), "allocating the gradients' copy") != 0 ||
        zero_cuda(cudaMalloc((void**)&e->dev_stage, largest * sizeof(float)), "allocating the staging buffer") != 0 ||
        zero_cuda(cudaMallocHost((void**)&e->host_stage, largest * sizeof(float)), "allocating the pinned staging buffer") != 0 ||
        zero_cuda(cudaMemset(e->params, 0, copy), "cudaMemset") != 0 ||
        zero_cuda(cudaMemset(e->grads, 0, copy), "cudaMemset") != 0) {
        return -1;
    }
    e->bytes_device = 2.0 * copy + (double)largest * sizeof(float);
    return 0;
}

// A host-staged engine behind z (see ZeroInit). On failure nothing is left allocated.
// Defined once per program: zero3/device.cu (zero3/device.h).
int zero_staged_create(Zero** z, const ZeroInit* in) {
    return zero_create(z, &zero_staged_ops, calloc(1, sizeof(ZeroStaged)), zero_staged_init, in);
}

#endif // ZERO3_STAGED_CUH
