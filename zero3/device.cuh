/*
 The device engine: the ZeRO engine on the GPU, the GPU trainer's fast path. The calls
 are zero3/zero.h's (through zero_dev_ops), in the order of the use schedule, whose every
 decision (keep, release, prefetch, the reduction window) is zero3/schedule.h's, as in the
 host engine.

 Stages, all state on the GPU, one GPU per rank, collectives over NCCL
 (zero3/nccl.cuh) on their own stream:
   0  parameters and gradients whole (floatX), fp32 master and AdamW moments whole; each
      unit's gradient all-reduced on the last micro-step as soon as its backward is done
   1  the same, but reduce-scattered; fp32 master and moments of this rank's shards;
      the updated shards all-gathered in place after the step
   2  + gradients sharded: each unit's gradient lives in a buffer from a small pool only
      during its backward, is reduce-scattered at every micro-step and added into fp32
      shard accumulators; the buffer goes back to the pool
   3  + parameters sharded: this rank keeps its floatX shards; a unit is gathered into a
      pooled buffer before each use, with the next units prefetched, and released after,
      unless it is small (persistent) or used again soon
 --offload-optimizer cpu (stages 1-3, ZeRO-Offload): the fp32 master and AdamW moments
 live in pinned host memory. Each unit's reduced gradient shard is copied to the host on
 a copy stream of its own (copy_out) as soon as its reduction is done on the last
 micro-step, overlapping the backward of the units below; at the step the SIMD CPU Adam
 (zero3/cpu_adam.h) updates the shards and writes the floatX compute copy, which goes back
 on another (copy_in): downloads and uploads go opposite ways over PCIe, and on one stream
 the next step's gradient copies would queue behind the last update's upload (with dpu, the
 whole model's shards issued at the end of the step before).
 With dpu (ZeRO-Offload's one-step delayed parameter update, --dpu 1) the CPU Adam of
 step i runs on a thread while the GPU computes step i+1 with the parameters of step i-1;
 its result is uploaded at the end of step i+1. NVMe and parameter offload are the host
 engine's (the GPU trainer's host-staged backend, zero3/staged.cuh).

 Beyond one node (stage 3; the host engine's modes, zero3/host.h, on NCCL). The ranks learn
 their node (zero_comm_node) and each communicator its span over the nodes
 (zero3/nccl.cuh). MiCS (mics_shard_size S): everything above runs inside groups of S
 consecutive ranks (`nccl`), and each unit's accumulated gradient shard is all-reduced
 across the groups (`rep`, the ranks of the same index in every group) on the last
 micro-step, right after its reduction; the mean divides by every rank (dp_world). hpZ
 (zero_hpz_partition_size P): a unit's first gather in a step, from the shards, also keeps
 this rank's 1/P slice of it (`sec`); its later gathers in that step (the backward's) are
 all-gathers of those slices inside the group of P consecutive ranks (`hpz`, inside a node
 when P divides the node), never across the whole world; an update makes the slices stale.
 qwZ: the gathers from the shards move int8 blocks (zero_nccl_allgather_q); qgZ: the
 reduce-scatters of stages 2-3 move int8 blocks in hops, summed in fp32 into `wide_out`
 (zero_nccl_reduce_scatter_q). The quantised collectives share one scratch buffer
 (`qscratch`): they all run on the one collective stream, in order.

 Gradients are reduced in floatX unless the configuration says fp32
 (--communication-data-type fp32; in the bf16 build, wherever NCCL runs): then each unit's
 bf16 gradient is widened into an fp32 buffer on the NCCL stream, reduced in fp32, and the
 result kept and used in fp32: stage 0 all-reduces into a whole fp32 gradient (4 bytes per
 parameter more) that the norm and AdamW read; stage 1 reduce-scatters into fp32 shards
 (in place of the bf16 ones: 2 bytes per parameter / N more), which AdamW or, offloaded,
 the CPU Adam reads; stages 2-3 reduce-scatter into an fp32 shard added into the fp32
 accumulators. One fp32 buffer of the largest unit (and at stages 2-3 one of its shard)
 serves every unit: the widening, the collective and the accumulation of a unit are all on
 the NCCL stream, in order, so the next unit's widening starts after they are done.
 In bf16 each hop of NCCL's ring rounds the partial sum to bf16: the fp32 reduction is
 exact to fp32 rounding whatever the number of ranks, at twice the bytes.

 [Note: the host never waits inside a step without offload]
 Nothing is allocated in a step, and the gradient norm, the clipping factor and the ranks'
 all-reduce of the norm stay on the GPU; the norm reaches the host after the trainer's
 end-of-step synchronization (zero_dev_stats). Ordering is by events only: a pooled buffer
 is reused after the stream that last used it has passed an event recorded then (a
 parameter buffer after the compute stream's kernels that read it, recorded at release;
 a gradient buffer after its reduce-scatter, recorded on the NCCL stream). Gathers wait
 for the compute stream's AdamW at the start of each pass; the compute stream waits for a
 gather's event at the unit's fetch, and for the oldest reduction's event when the window
 behind is full. With offload the copy-out stream waits for an event recorded on the NCCL
 stream after each unit's last reduction, the copy-in stream for one recorded on the
 compute stream after the step's work and collectives (a join), and the compute stream
 for one recorded on the copy-in stream after the uploads; the host waits for the copy-out
 stream (the gradient shards) before the CPU Adam, and for the copy-in stream before the
 CPU Adam writes an h_params buffer again (and, with dpu, for the previous update).

 The pools are sized at init by walking the schedule (zero_schedule_peak): the decisions
 depend only on the schedule and the configuration.

 Waiting on communication is measured on the GPU (zero_dev_wait): each time the compute
 stream waits for a collective or a copy that has not ended when the wait is issued, the
 GPU's clock is read as the stream reaches the wait and again when it is over.

 Errors return -1 with zero_error; the caller stops the job.
*/
#ifndef ZERO3_DEVICE_CUH
#define ZERO3_DEVICE_CUH

#include <stdlib.h>              // calloc, free
#include <string.h>              // memset
#include <mpi.h>                 // MPI_Comm: the ranks, over which the NCCL communicator is made
#include <pthread.h>             // --dpu: the CPU Adam of step i runs while the GPU does step i+1
#include <omp.h>                 // omp_set_num_threads: the update thread's OpenMP team
#include "zero3/util.h"          // zero_error, zero_now_ms
#include "zero3/cuda_util.cuh"   // floatX, zero_cuda, the conversion kernels, gpu_clock_ns
#include "zero3/adamw.cuh"       // adamw_update_cuda, global_norm_squared, the scale kernels
#include "zero3/plan.h"          // ZeroPlan: padded units and shards
#include "zero3/config.h"        // ZeroConfig
#include "zero3/zero.h"          // the interface: ZeroOps, ZeroModel, ZeroStats
#include "zero3/schedule.h"      // ZeroSchedule: the uses and their decisions
#include "zero3/checkpoint.h"    // ZeroStateHeader: this engine's part of a checkpoint
#include "zero3/nccl.cuh"        // ZeroNccl: the collectives' stream and events; the quantised collectives
#include "zero3/comm.h"          // zero_comm_node, zero_comm_span: the nodes
#include "zero3/cpu_adam.h"      // cpu_adam_step: offload's SIMD AdamW

#if defined(ENABLE_FP32)
#define NCCL_FLOATX ncclFloat32
#else
#define NCCL_FLOATX ncclBfloat16
#endif

// acc (n,) fp32 += got (n,) floatX or fp32: a reduced gradient shard into its accumulator
template <typename T>
__global__ void zero_dev_accumulate_kernel(float* acc, const T* got, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { acc[i] += to_float(got[i]); }
}

#define ZERO_DEV_MAX_POOLS 16  // distinct unit sizes (GPT-2 has 3)

typedef struct {
    floatX* buf;          // (elems)
    floatX* rs_out;       // gradient buffers: the reduce-scatter's output, (elems / world); NULL with comm32
    int unit;             // the unit it holds, -1 when free
    cudaEvent_t free_ev;  // the last use of buf is done once this event has passed
    cudaEvent_t ready_ev; // parameter buffers: the gather into buf is done
} ZeroDevBuf;

typedef struct {
    size_t elems;         // a unit's padded size
    int count;            // buffers
    int next;             // where the search for a free buffer starts: round robin from the last one taken
    ZeroDevBuf* bufs;     // (count)
} ZeroDevPool;

// --dpu: what the update thread is given, and what it returns (rc, ms)
struct ZeroDev;
typedef struct {
    struct ZeroDev* d;
    const void* grads;
    floatX* out;                  // the updated floatX shards
    float lr, weight_decay, grad_scale;
    int t, rc;
    double ms;
    char msg[1024];               // the thread's error (zero_error's buffer is per thread)
} ZeroDevUpdate;

typedef struct ZeroDev {
    ZeroPlan plan;
    ZeroConfig cfg;
    ZeroSchedule sched;
    MPI_Comm comm;                // the ranks (NCCL's communicator is made over it)
    int stage, world, rank, use_nccl;   // world, rank: of the shard group (everyone without MiCS)
    ZeroNccl nccl;                // the shard group's collectives
    ZeroNccl rep;                 // MiCS: the ranks holding the same shards in the other groups (unused: zeroed)
    ZeroNccl hpz;                 // hpZ: the secondary group, consecutive ranks of the shard group (unused: zeroed)
    int dp_world;                 // every data-parallel rank: the mean gradient's divisor
    int nodes, per_node;          // where the job's ranks are, for the report (per_node 0: uneven)
    floatX* sec;                  // (padded_total / hpz.world) hpZ: this rank's slice of every unit
    unsigned char* sec_ok;        // (num_units) hpZ: the slice holds the current parameters
    unsigned char* qscratch;      // qwZ / qgZ: the quantised blocks of one collective
    cudaStream_t compute;
    int num_tensors;
    ZeroTensor* tensors;
    float beta1, beta2, eps;
    int shards_written;           // stage 3: the compute stream wrote shard_params since the last pass began (step, load)
    // parameters (floatX)
    floatX* params;               // (padded_total) stages 0-2
    floatX* shard_params;         // (shard_total) stage 3: this rank's shards
    floatX** unit_ptr;            // (num_units) stage 3: where the unit is gathered (persistent: its own buffer)
    ZeroDevBuf** unit_buf;        // (num_units) stage 3: its pooled buffer (NULL: persistent or not gathered)
    ZeroDevPool ppool[ZERO_DEV_MAX_POOLS];
    int nppool;
    // gradients
    floatX* grads;                // (padded_total) stages 0-1
    floatX* gshard;               // (shard_total) stage 1: reduced shards (not with comm32)
    float* acc;                   // (shard_total) stages 2-3: fp32 accumulators
    int comm32;                   // gradients reduced in fp32 (--communication-data-type fp32, bf16 build, NCCL in use)
    float* grads32;               // (padded_total) stage 0 with comm32: the whole gradient, widened and all-reduced
    float* gshard32;              // (shard_total) stage 1 with comm32: the reduced shards, in place of gshard
    float* wide;                  // (largest padded unit) stages 1-3 with comm32: a unit's gradient widened for its reduce-scatter
    float* wide_out;              // (largest shard) stages 2-3 with comm32: its reduced shard, on its way to the accumulator
    ZeroDevBuf** grad_buf;        // (num_units) stages 2-3: the unit's gradient buffer during its backward
    ZeroDevPool gpool[ZERO_DEV_MAX_POOLS];
    int ngpool;
    cudaEvent_t* reduced_ev;      // (num_units) recorded on the NCCL stream after the unit's reduction
    // AdamW
    float* master;                // (opt_elems) fp32
    float* m;
    float* v;
    size_t opt_elems;             // padded_total (stage 0) or shard_total
    float* norm_scratch;          // GLOBAL_NORM_SCRATCH_FLOATS
    float* norm_out;              // (3,): [0] this rank's squared norm, [1] AdamW's gradient scale, [2] the norm
    double* norm_sum;             // (1,) the squared norm summed over ranks
    float* host_norm;             // (2,) pinned: [0] AdamW's gradient scale (read by offload's CPU Adam), [1] the step's norm
    // waiting on communication (zero_dev_wait)
    unsigned long long* wait_clock; // (2,) on the GPU: [0] when the compute stream reached a wait, [1] the waits' total (ns)
    double host_wait_ms;          // the host's waits for the gradient copies (offload), cumulative
    // --offload-optimizer cpu: master, m, v above are pinned host arrays
    int offload;
    cudaStream_t copy_out;        // gradient shards out (device to host)
    cudaStream_t copy_in;         // updated parameter shards in (host to device)
    cudaEvent_t reduced_out_ev;   // NCCL stream -> copy_out: a unit's shard is reduced
    cudaEvent_t upload_ev;        // compute stream -> copy_in: the parameters' readers and writers so far are done
    cudaEvent_t copied_ev;        // copy_in -> compute stream: the updated shards are in
    void* h_grads_buf[2];         // (shard_total) pinned: the reduced shards, floatX (stage 1) or fp32 (stages 2-3);
    void* h_grads;                //   two with dpu (one being updated from, one being filled), h_grads the one filled
    int dpu;                      // the CPU Adam of a step overlaps the next step (on `update_thread`)
    int update_pending;           // a thread is updating; its result is not uploaded yet
    int omp_threads;              // the CPU Adam's OpenMP threads (this rank's share of the node's cores), 0: default
    pthread_t update_thread;
    ZeroDevUpdate update_args;
    floatX* h_params_buf[2];      // (shard_total) pinned: the updated compute-copy shards; two with dpu
    floatX* h_params;             //   (one being uploaded, one being written by the thread), h_params the one written next
    double moved_d2h, moved_h2d;  // bytes copied (cumulative)
    double update_ms;             // the CPU Adam's wall time (cumulative)
    // accounting (bytes on the GPU, and pinned on the host)
    double bytes_params, bytes_grads, bytes_optimizer, bytes_buffers;
    double host_bytes_grads, host_bytes_optimizer, host_bytes_params;
} ZeroDev;

// a zeroed device allocation, counted into *bytes
static void* zero_dev_alloc(size_t nbytes, double* bytes) {
    void* p = NULL;
    if (cudaMalloc(&p, nbytes > 0 ? nbytes : 16) != cudaSuccess) {
        zero_error("zero device: out of GPU memory allocating %.1f MiB", nbytes / 1048576.0);
        return NULL;
    }
    if (cudaMemset(p, 0, nbytes > 0 ? nbytes : 16) != cudaSuccess) { cudaFree(p); zero_error("zero device: cudaMemset failed"); return NULL; }
    *bytes += (double)nbytes;
    return p;
}

// a zeroed pinned host allocation, counted into *bytes
static void* zero_dev_alloc_host(size_t nbytes, double* bytes) {
    void* p = NULL;
    if (cudaMallocHost(&p, nbytes > 0 ? nbytes : 16) != cudaSuccess) {
        zero_error("zero device: out of pinned host memory allocating %.1f MiB", nbytes / 1048576.0);
        return NULL;
    }
    memset(p, 0, nbytes > 0 ? nbytes : 16);
    *bytes += (double)nbytes;
    return p;
}

// ----------------------------------------------------------------------------
// waiting on communication

// clock (2,): see ZeroDev.wait_clock; one thread each
__global__ void zero_dev_wait_start_kernel(unsigned long long* clock) { clock[0] = gpu_clock_ns(); }
__global__ void zero_dev_wait_stop_kernel(unsigned long long* clock) { clock[1] += gpu_clock_ns() - clock[0]; }

// The compute stream waits for ev (recorded at the end of collectives or copies), timed on
// the GPU: one kernel reads the clock as the stream reaches the wait, another adds the time
// elapsed once it is over. When ev has already passed at issue time the stream cannot
// stall on it, and neither kernel is queued. Each timed wait costs two launches (a few
// microseconds), and a wait that stalls nothing still counts the gap between the two
// kernels: the figure is an upper bound, fine at the scale of a collective.
static int zero_dev_wait(ZeroDev* d, cudaEvent_t ev) {
    cudaError_t q = cudaEventQuery(ev);
    if (q != cudaSuccess && q != cudaErrorNotReady) { return zero_cuda(q, "cudaEventQuery"); }
    int timed = q == cudaErrorNotReady;
    // the runtime keeps "not ready" as its last error: cleared here, or the launch check
    // below would report it as the launch's failure
    if (timed) { (void)cudaGetLastError(); }
    if (timed) {
        zero_dev_wait_start_kernel<<<1, 1, 0, d->compute>>>(d->wait_clock);
        if (zero_cuda(cudaGetLastError(), "the wait clock") != 0) { return -1; }
    }
    if (zero_cuda(cudaStreamWaitEvent(d->compute, ev, 0), "cudaStreamWaitEvent") != 0) { return -1; }
    if (timed) {
        zero_dev_wait_stop_kernel<<<1, 1, 0, d->compute>>>(d->wait_clock);
        return zero_cuda(cudaGetLastError(), "the wait clock");
    }
    return 0;
}

// the compute stream waits for the collectives issued so far
static int zero_dev_join(ZeroDev* d) {
    if (zero_cuda(cudaEventRecord(d->nccl.done, d->nccl.stream), "cudaEventRecord") != 0) { return -1; }
    return zero_dev_wait(d, d->nccl.done);
}

// ----------------------------------------------------------------------------
// pools of unit-sized buffers

static ZeroDevPool* zero_dev_pool_for(ZeroDevPool* pools, int* npools, size_t elems) {
    for (int i = 0; i < *npools; i++) { if (pools[i].elems == elems) { return &pools[i]; } }
    if (*npools == ZERO_DEV_MAX_POOLS) { zero_error("zero device: more than %d distinct unit sizes", ZERO_DEV_MAX_POOLS); return NULL; }
    ZeroDevPool* p = &pools[(*npools)++];
    memset(p, 0, sizeof(*p));
    p->elems = elems;
    return p;
}

// a free buffer of unit u's size
static ZeroDevBuf* zero_dev_take(ZeroDev* d, ZeroDevPool* pools, int npools, int u) {
    ZeroDevPool* p = NULL;
    for (int i = 0; i < npools; i++) { if (pools[i].elems == d->plan.units[u].padded) { p = &pools[i]; } }
    // round robin: a buffer just freed is taken last, so its reduce-scatter (or its
    // readers) can finish while another buffer is in use
    for (int k = 0; p != NULL && k < p->count; k++) {
        int i = (p->next + k) % p->count;
        if (p->bufs[i].unit < 0) {
            p->bufs[i].unit = u;
            p->next = (i + 1) % p->count;
            return &p->bufs[i];
        }
    }
    zero_error("zero device: no free buffer for unit %d (pool of %d): the schedule differs from the one at init",
               u, p != NULL ? p->count : 0);
    return NULL;
}

// allocates count buffers in each pool (with the reduce-scatter's output: gradient pools)
static int zero_dev_pools_alloc(ZeroDev* d, ZeroDevPool* pools, int npools, int with_rs) {
    for (int i = 0; i < npools; i++) {
        ZeroDevPool* p = &pools[i];
        p->next = 0;
        p->bufs = (ZeroDevBuf*)calloc(p->count, sizeof(ZeroDevBuf));
        if (p->bufs == NULL) { return zero_error("zero device: out of memory"); }
        for (int k = 0; k < p->count; k++) {
            ZeroDevBuf* b = &p->bufs[k];
            b->unit = -1;
            b->buf = (floatX*)zero_dev_alloc(p->elems * sizeof(floatX), &d->bytes_buffers);
            if (b->buf == NULL) { return -1; }
            if (with_rs) {
                b->rs_out = (floatX*)zero_dev_alloc(p->elems / d->world * sizeof(floatX), &d->bytes_buffers);
                if (b->rs_out == NULL) { return -1; }
            }
            if (zero_cuda(cudaEventCreateWithFlags(&b->free_ev, cudaEventDisableTiming), "cudaEventCreate") != 0 ||
                zero_cuda(cudaEventCreateWithFlags(&b->ready_ev, cudaEventDisableTiming), "cudaEventCreate") != 0) {
                return -1;
            }
        }
    }
    return 0;
}

static void zero_dev_pools_free(ZeroDevPool* pools, int npools) {
    for (int i = 0; i < npools; i++) {
        for (int k = 0; pools[i].bufs != NULL && k < pools[i].count; k++) {
            ZeroDevBuf* b = &pools[i].bufs[k];
            cudaFree(b->buf);
            cudaFree(b->rs_out);
            if (b->free_ev != NULL) { cudaEventDestroy(b->free_ev); }
            if (b->ready_ev != NULL) { cudaEventDestroy(b->ready_ev); }
        }
        free(pools[i].bufs);
    }
}

// ----------------------------------------------------------------------------
// stage 3 gathers

// gathers unit u (the schedule counts it in flight) into a pooled buffer on the NCCL
// stream, once the buffer's last readers are done: this rank's shard in place, then the
// all-gather; ready_ev marks the end
static int zero_dev_gather(ZeroDev* d, int u) {
    const ZeroUnit* pu = &d->plan.units[u];
    ZeroDevBuf* b = zero_dev_take(d, d->ppool, d->nppool, u);
    if (b == NULL) { return -1; }
    cudaStream_t ns = d->nccl.stream;
    if (zero_cuda(cudaStreamWaitEvent(ns, b->free_ev, 0), "cudaStreamWaitEvent") != 0) { return -1; }
    size_t part = d->sec != NULL ? pu->padded / (size_t)d->hpz.world : 0;  // hpZ: a slice
    floatX* slice = d->sec != NULL ? d->sec + pu->full_offset / (size_t)d->hpz.world : NULL;
    if (d->sec != NULL && d->sec_ok[u]) {
        // hpZ: the slices inside the secondary group hold the unit (this step's first gather
        // left them there): gathered from them, never across the whole world
        if (zero_cuda(cudaMemcpyAsync(b->buf + (size_t)d->hpz.rank * part, slice, part * sizeof(floatX),
                                      cudaMemcpyDeviceToDevice, ns), "copying an hpZ slice") != 0 ||
            zero_nccl_allgather(&d->hpz, b->buf, part, NCCL_FLOATX, u) != 0) {
            return -1;
        }
    } else {
        if (zero_cuda(cudaMemcpyAsync(b->buf + (size_t)d->rank * pu->shard, d->shard_params + pu->shard_offset,
                                      pu->shard * sizeof(floatX), cudaMemcpyDeviceToDevice, ns), "copying a shard") != 0) {
            return -1;
        }
        int rc = d->cfg.quantized_weights ? zero_nccl_allgather_q<floatX>(&d->nccl, b->buf, pu->shard, d->qscratch, u)
                                          : zero_nccl_allgather(&d->nccl, b->buf, pu->shard, NCCL_FLOATX, u);
        if (rc != 0) { return -1; }
        if (d->sec != NULL) {  // hpZ: this rank's slice kept for the unit's next gathers
            if (zero_cuda(cudaMemcpyAsync(slice, b->buf + (size_t)d->hpz.rank * part, part * sizeof(floatX),
                                          cudaMemcpyDeviceToDevice, ns), "keeping an hpZ slice") != 0) {
                return -1;
            }
            d->sec_ok[u] = 1;
        }
    }
    if (zero_cuda(cudaEventRecord(b->ready_ev, ns), "cudaEventRecord") != 0) { return -1; }
    d->unit_ptr[u] = b->buf;
    d->unit_buf[u] = b;
    return 0;
}

// unit u's gathered copy is no longer needed: its buffer is free once the compute
// stream's kernels issued so far (the readers) are done
static int zero_dev_ungather(ZeroDev* d, int u) {
    ZeroDevBuf* b = d->unit_buf[u];
    zero_schedule_freed(&d->sched, u);
    if (b == NULL) { return 0; }
    if (zero_cuda(cudaEventRecord(b->free_ev, d->compute), "cudaEventRecord") != 0) { return -1; }
    b->unit = -1;
    d->unit_ptr[u] = NULL;
    d->unit_buf[u] = NULL;
    return 0;
}

// starts the gathers the schedule's window ahead asks for, after the use before `from`
static int zero_dev_prefetch(ZeroDev* d, int from) {
    int ahead[64];  // prefetch_depth <= 64 (zero3/config.h)
    int n = zero_schedule_prefetch(&d->sched, from, ahead);
    for (int k = 0; k < n; k++) {
        if (zero_dev_gather(d, ahead[k]) != 0) { return -1; }
    }
    return 0;
}

// ----------------------------------------------------------------------------
// the model's calls

static int zero_dev_begin(void* impl, int pass, int last_micro) {
    ZeroDev* d = (ZeroDev*)impl;
    if (zero_schedule_begin(&d->sched, pass, last_micro) != 0) { return -1; }
    if (!d->sched.gathers) { return 0; }
    // the gathers of this pass read shards that the last step's AdamW (or a load) wrote
    if (d->shards_written) {
        if (zero_nccl_after(&d->nccl, d->compute) != 0) { return -1; }
        d->shards_written = 0;
    }
    return zero_dev_prefetch(d, 0);
}

static int zero_dev_fetch(void* impl, int u, void** out) {
    ZeroDev* d = (ZeroDev*)impl;
    ZeroSchedule* s = &d->sched;
    if (zero_schedule_at(s, u, "fetch") != 0) { return -1; }
    if (!s->gathers) {
        *out = d->params + d->plan.units[u].full_offset;
        return 0;
    }
    if (s->state[u] == ZERO_UNIT_NOT_LIVE) {
        zero_schedule_started(s, u);
        if (zero_dev_gather(d, u) != 0) { return -1; }
    }
    if (d->unit_buf[u] != NULL && zero_dev_wait(d, d->unit_buf[u]->ready_ev) != 0) { return -1; }
    zero_schedule_gathered(s, u);
    if (zero_dev_prefetch(d, s->pos + 1) != 0) { return -1; }
    *out = d->unit_ptr[u];
    return 0;
}

static int zero_dev_release(void* impl, int u) {
    ZeroDev* d = (ZeroDev*)impl;
    int rc = zero_schedule_release(&d->sched, u);
    if (rc < 0) { return -1; }
    return rc == 1 ? zero_dev_ungather(d, u) : 0;
}

// the unit's gradient buffer (padded), accumulated into by the backward
static int zero_dev_grad(void* impl, int u, void** out) {
    ZeroDev* d = (ZeroDev*)impl;
    if (zero_schedule_grad(&d->sched, u) != 0) { return -1; }
    if (d->stage < 2) {
        *out = d->grads + d->plan.units[u].full_offset;
        return 0;
    }
    if (d->grad_buf[u] == NULL) {
        ZeroDevBuf* b = zero_dev_take(d, d->gpool, d->ngpool, u);
        if (b == NULL) { return -1; }
        // zeroed once its last reduce-scatter has read it
        if (zero_dev_wait(d, b->free_ev) != 0 ||
            zero_cuda(cudaMemsetAsync(b->buf, 0, d->plan.units[u].padded * sizeof(floatX), d->compute), "cudaMemsetAsync") != 0) {
            return -1;
        }
        d->grad_buf[u] = b;
    }
    *out = d->grad_buf[u]->buf;
    return 0;
}

// bytes of an element of the reduced gradient shards (stages 1-3): floatX at stage 1, fp32
// when reduced in fp32 and in the accumulators of stages 2-3
static size_t zero_dev_shard_grad_bytes(const ZeroDev* d) {
    return d->stage == 1 && !d->comm32 ? sizeof(floatX) : sizeof(float);
}

// dst (n,) fp32 <- src (n,) floatX on the NCCL stream: a gradient widened for a reduction in
// fp32, after the compute stream's writes (the caller's zero_nccl_after), before the collective
static int zero_dev_widen(ZeroDev* d, float* dst, const floatX* src, size_t n) {
    zero_to_float_kernel<<<(unsigned)CEIL_DIV(n, (size_t)256), 256, 0, d->nccl.stream>>>(dst, src, n);
    return zero_cuda(cudaGetLastError(), "widening a gradient to fp32");
}

// offload: unit u's reduced gradient shard (complete: the last micro-step's reduction was
// just issued on the NCCL stream) to the host, on the copy-out stream
static int zero_dev_copy_out(ZeroDev* d, int u) {
    if (!d->offload) { return 0; }
    const ZeroUnit* pu = &d->plan.units[u];
    size_t gb = zero_dev_shard_grad_bytes(d);
    const char* src = d->stage >= 2 ? (const char*)(d->acc + pu->shard_offset)
                    : d->comm32 ? (const char*)(d->gshard32 + pu->shard_offset) : (const char*)(d->gshard + pu->shard_offset);
    if (zero_cuda(cudaEventRecord(d->reduced_out_ev, d->nccl.stream), "cudaEventRecord") != 0 ||
        zero_cuda(cudaStreamWaitEvent(d->copy_out, d->reduced_out_ev, 0), "cudaStreamWaitEvent") != 0 ||
        zero_cuda(cudaMemcpyAsync((char*)d->h_grads + pu->shard_offset * gb, src, pu->shard * gb,
                                  cudaMemcpyDeviceToHost, d->copy_out), "copying a gradient shard out") != 0) {
        return -1;
    }
    d->moved_d2h += (double)pu->shard * gb;
    return 0;
}

// The unit's gradient is complete for this micro-step: its collective goes on the NCCL
// stream, after the compute stream's kernels so far (the backward that wrote it). When
// the schedule's window behind is full, the compute stream first waits for the oldest
// reductions (reduce_bucket_size).
static int zero_dev_reduce(void* impl, int u) {
    ZeroDev* d = (ZeroDev*)impl;
    ZeroSchedule* s = &d->sched;
    const ZeroUnit* pu = &d->plan.units[u];
    if (zero_schedule_reduce(s, u) != 0) { return -1; }
    if (d->stage < 2 && (!d->use_nccl || !s->last_micro)) { return 0; }  // accumulate locally until the boundary
    while (zero_schedule_reduce_full(s, u)) {
        if (zero_dev_wait(d, d->reduced_ev[zero_schedule_reduce_oldest(s)]) != 0) { return -1; }
    }
    if (zero_nccl_after(&d->nccl, d->compute) != 0) { return -1; }
    ZeroDevBuf* b = d->grad_buf[u];
    unsigned grid = (unsigned)CEIL_DIV(pu->shard, (size_t)256);
    if (d->stage == 0 && d->comm32) {
        float* g = d->grads32 + pu->full_offset;
        if (zero_dev_widen(d, g, d->grads + pu->full_offset, pu->padded) != 0 ||
            zero_nccl_allreduce(&d->nccl, g, pu->padded, ncclFloat32, u) != 0) {
            return -1;
        }
    } else if (d->stage == 0) {
        if (zero_nccl_allreduce(&d->nccl, d->grads + pu->full_offset, pu->padded, NCCL_FLOATX, u) != 0) { return -1; }
    } else if (d->stage == 1 && d->comm32) {
        if (zero_dev_widen(d, d->wide, d->grads + pu->full_offset, pu->padded) != 0 ||
            zero_nccl_reduce_scatter(&d->nccl, d->wide, d->gshard32 + pu->shard_offset, pu->shard, ncclFloat32, u) != 0) {
            return -1;
        }
    } else if (d->stage == 1) {
        if (zero_nccl_reduce_scatter(&d->nccl, d->grads + pu->full_offset, d->gshard + pu->shard_offset, pu->shard, NCCL_FLOATX, u) != 0) { return -1; }
    } else {
        d->grad_buf[u] = NULL;
        if (d->cfg.quantized_gradients) {  // qgZ: int8 hops, summed in fp32 into wide_out
            if (zero_nccl_reduce_scatter_q<floatX>(&d->nccl, b->buf, d->wide_out, pu->shard, d->qscratch, u) != 0) { return -1; }
            zero_dev_accumulate_kernel<float><<<grid, 256, 0, d->nccl.stream>>>(d->acc + pu->shard_offset, d->wide_out, pu->shard);
        } else if (d->comm32) {
            if (zero_dev_widen(d, d->wide, b->buf, pu->padded) != 0 ||
                zero_nccl_reduce_scatter(&d->nccl, d->wide, d->wide_out, pu->shard, ncclFloat32, u) != 0) {
                return -1;
            }
            zero_dev_accumulate_kernel<float><<<grid, 256, 0, d->nccl.stream>>>(d->acc + pu->shard_offset, d->wide_out, pu->shard);
        } else {
            if (zero_nccl_reduce_scatter(&d->nccl, b->buf, b->rs_out, pu->shard, NCCL_FLOATX, u) != 0) { return -1; }
            zero_dev_accumulate_kernel<floatX><<<grid, 256, 0, d->nccl.stream>>>(d->acc + pu->shard_offset, b->rs_out, pu->shard);
        }
        if (zero_cuda(cudaGetLastError(), "the accumulate kernel") != 0 ||
            zero_cuda(cudaEventRecord(b->free_ev, d->nccl.stream), "cudaEventRecord") != 0) {
            return -1;
        }
        b->unit = -1;
        // MiCS: the step's sum of this group, all-reduced with the other groups' (the
        // same shard on each) once it is complete
        if (d->rep.world > 1 && s->last_micro &&
            zero_nccl_allreduce(&d->rep, d->acc + pu->shard_offset, pu->shard, ncclFloat32, u) != 0) {
            return -1;
        }
    }
    if (zero_cuda(cudaEventRecord(d->reduced_ev[u], d->nccl.stream), "cudaEventRecord") != 0) { return -1; }
    zero_schedule_reduce_started(s, u);
    return s->last_micro ? zero_dev_copy_out(d, u) : 0;
}

// every use made; stage 3 releases what the pass kept. The window behind starts empty in
// the next pass: its reductions are ordered by the buffers' events and the step's join.
static int zero_dev_end(void* impl) {
    ZeroDev* d = (ZeroDev*)impl;
    if (zero_schedule_end(&d->sched) != 0) { return -1; }
    while (zero_schedule_reduce_oldest(&d->sched) >= 0) {}
    for (int u = 0; d->sched.gathers && u < d->plan.num_units; u++) {
        if (!d->sched.persistent[u] && zero_dev_ungather(d, u) != 0) { return -1; }
    }
    return 0;
}

// ----------------------------------------------------------------------------
// the optimizer step

// stage 3: the persistent units get this rank's updated shard and every other rank's
static int zero_dev_refresh_persistent(ZeroDev* d) {
    for (int u = 0; u < d->plan.num_units; u++) {
        if (!d->sched.persistent[u]) { continue; }
        const ZeroUnit* pu = &d->plan.units[u];
        if (zero_cuda(cudaMemcpyAsync(d->unit_ptr[u] + (size_t)d->rank * pu->shard, d->shard_params + pu->shard_offset,
                                      pu->shard * sizeof(floatX), cudaMemcpyDeviceToDevice, d->nccl.stream), "copying a shard") != 0 ||
            zero_nccl_allgather(&d->nccl, d->unit_ptr[u], pu->shard, NCCL_FLOATX, u) != 0) {
            return -1;
        }
    }
    return 0;
}

// offload: the SIMD CPU Adam over this rank's part of every tensor, from the gradient
// shards at `grads`, writing the fp32 master and moments and the floatX compute copy
// (out: an h_params buffer). Called on the step's thread, or on update_thread with dpu.
static int zero_dev_cpu_update(ZeroDev* d, const void* grads, floatX* out, float lr, float weight_decay, float grad_scale, int t) {
    CpuAdamParams hp = {lr, d->beta1, d->beta2, d->eps, 0.0f, grad_scale, t};
    size_t gb = zero_dev_shard_grad_bytes(d);
    CpuAdamDtype gt = gb == 2 ? CPU_ADAM_BF16 : CPU_ADAM_FP32;
    CpuAdamDtype ot = sizeof(floatX) == 2 ? CPU_ADAM_BF16 : CPU_ADAM_FP32;
    for (int i = 0; i < d->num_tensors; i++) {
        const ZeroTensor* tr = &d->tensors[i];
        size_t off, sh, n;  // this rank's part of the tensor (zero3/plan.h)
        int in = zero_plan_tensor_part(&d->plan, tr->unit, d->rank, tr->offset, tr->offset + tr->size, &off, &sh, &n);
        if (in < 0) { return -1; }
        if (in == 0) { continue; }
        hp.weight_decay = tr->decay ? weight_decay : 0.0f;
        if (cpu_adam_step(d->master + sh, (const char*)grads + sh * gb, gt, d->m + sh, d->v + sh, n, &hp,
                          out + sh, ot) != 0) {
            return -1;
        }
    }
    return 0;
}

static void* zero_dev_update_main(void* arg) {
    ZeroDevUpdate* a = (ZeroDevUpdate*)arg;
    if (a->d->omp_threads > 0) { omp_set_num_threads(a->d->omp_threads); }  // a new thread has the default team size
    double t0 = zero_now_ms();
    a->rc = zero_dev_cpu_update(a->d, a->grads, a->out, a->lr, a->weight_decay, a->grad_scale, a->t);
    a->ms = zero_now_ms() - t0;
    if (a->rc != 0) { snprintf(a->msg, sizeof(a->msg), "%s", zero_errmsg()); }
    return NULL;
}

// after an update: every rank's updated shards to every rank, in place (stages 1-2), or
// the persistent units refreshed (stage 3); the next forward waits on the GPU
static int zero_dev_share_params(ZeroDev* d) {
    cudaStream_t s = d->compute;
    if (d->stage == 1 || d->stage == 2) {
        if (zero_nccl_after(&d->nccl, s) != 0 || zero_nccl_group_start(&d->nccl, "all-gather of the updated shards", -1) != 0) { return -1; }
        for (int u = 0; u < d->plan.num_units; u++) {  // one group: NCCL schedules them together
            if (zero_nccl_allgather(&d->nccl, d->params + d->plan.units[u].full_offset, d->plan.units[u].shard, NCCL_FLOATX, u) != 0) {
                zero_nccl_group_end();
                return -1;
            }
        }
        if (zero_nccl_group_end() != 0 || zero_dev_join(d) != 0) { return -1; }
    } else if (d->stage == 3) {
        if (zero_nccl_after(&d->nccl, s) != 0 || zero_dev_refresh_persistent(d) != 0 || zero_dev_join(d) != 0) { return -1; }
        d->shards_written = 1;
        if (d->sec_ok != NULL) { memset(d->sec_ok, 0, (size_t)d->plan.num_units); }  // hpZ: slices of the old parameters
    }
    return 0;
}

// offload: the updated floatX shards (src, an h_params buffer) to the GPU on the copy-in
// stream, the compute stream waiting for them; then every rank's shards to every rank
static int zero_dev_upload(ZeroDev* d, const floatX* src) {
    cudaStream_t s = d->compute;
    // the copies overwrite parameters that work queued on the compute stream (and the
    // gathers on the NCCL stream) may still read: after both
    if (d->use_nccl && zero_dev_join(d) != 0) { return -1; }
    if (zero_cuda(cudaEventRecord(d->upload_ev, s), "cudaEventRecord") != 0 ||
        zero_cuda(cudaStreamWaitEvent(d->copy_in, d->upload_ev, 0), "cudaStreamWaitEvent") != 0) {
        return -1;
    }
    for (int u = 0; u < d->plan.num_units; u++) {
        const ZeroUnit* pu = &d->plan.units[u];
        floatX* dst = d->stage == 3 ? d->shard_params + pu->shard_offset : d->params + pu->full_offset + (size_t)d->rank * pu->shard;
        if (zero_cuda(cudaMemcpyAsync(dst, src + pu->shard_offset, pu->shard * sizeof(floatX),
                                      cudaMemcpyHostToDevice, d->copy_in), "copying a parameter shard in") != 0) {
            return -1;
        }
        d->moved_h2d += (double)pu->shard * sizeof(floatX);
    }
    if (zero_cuda(cudaEventRecord(d->copied_ev, d->copy_in), "cudaEventRecord") != 0 || zero_dev_wait(d, d->copied_ev) != 0) {
        return -1;
    }
    return zero_dev_share_params(d);
}

// dpu: waits for the pending CPU update and uploads its result (at the end of the next
// step, and before anything reads the master or needs the latest parameters: checkpoints,
// the end of training)
static int zero_dev_flush(void* impl) {
    ZeroDev* d = (ZeroDev*)impl;
    if (!d->update_pending) { return 0; }
    if (pthread_join(d->update_thread, NULL) != 0) { return zero_error("zero device: joining the CPU Adam thread failed"); }
    d->update_pending = 0;
    if (d->update_args.rc != 0) { return zero_error("zero device: CPU Adam thread: %s", d->update_args.msg); }
    d->update_ms += d->update_args.ms;
    // the thread wrote update_args.out; the upload from it runs on the copy-in stream while
    // the next thread writes the other buffer (see zero_dev_step)
    return zero_dev_upload(d, d->update_args.out);
}

// offload: the CPU Adam of this step (the gradient shards are on the host), on the step's
// thread, or (dpu) on a thread of its own while the GPU computes the next step
static int zero_dev_offload_step(ZeroDev* d, const ZeroStep* st, float grad_scale) {
    if (isnan(grad_scale)) {  // a skipped step (adamw_skip_kernel): no update; --dpu's pending one still lands
        return zero_dev_flush(d);
    }
    if (!d->dpu) {
        double t0 = zero_now_ms();
        if (zero_dev_cpu_update(d, d->h_grads, d->h_params, st->lr, st->weight_decay, grad_scale, st->t) != 0) { return -1; }
        d->update_ms += zero_now_ms() - t0;
        return zero_dev_upload(d, d->h_params);
    }
    // The previous step's update goes to the GPU now (its upload queued on the copy-in
    // stream), this step's starts on a thread from the gradients just copied, into the
    // other h_params buffer: the one uploaded a step ago, which the copy-in stream's
    // synchronization in zero_dev_step finished. The next step's copies fill the other gradient buffer. Its result is
    // shared with the ranks when it is uploaded.
    if (zero_dev_flush(d) != 0) { return -1; }
    d->h_params = d->h_params == d->h_params_buf[0] ? d->h_params_buf[1] : d->h_params_buf[0];
    memset(&d->update_args, 0, sizeof(d->update_args));
    d->update_args.d = d;
    d->update_args.grads = d->h_grads;
    d->update_args.out = d->h_params;
    d->update_args.lr = st->lr;
    d->update_args.weight_decay = st->weight_decay;
    d->update_args.grad_scale = grad_scale;
    d->update_args.t = st->t;
    if (pthread_create(&d->update_thread, NULL, zero_dev_update_main, &d->update_args) != 0) {
        return zero_error("zero device: starting the CPU Adam thread failed");
    }
    d->update_pending = 1;
    d->h_grads = d->h_grads == d->h_grads_buf[0] ? d->h_grads_buf[1] : d->h_grads_buf[0];
    return 0;
}

// Global norm of the mean gradient, clipping, AdamW on this rank's part of every tensor
// (one launch each; an element's stochastic rounding bits depend on its place in the
// padded model, so every stage draws the same bits for it), then the updated parameters
// go to every rank. The gradients are sums over ranks: the 1/world of the mean is folded
// into AdamW's gradient scale. The norm, its sum over ranks (an NCCL all-reduce) and the
// scale are computed on the GPU, where AdamW reads the scale: without offload the host does
// not wait. With offload the CPU Adam waits for the scale, and for the gradient copies anyway.
static int zero_dev_step(void* impl, const ZeroStep* st) {
    ZeroDev* d = (ZeroDev*)impl;
    cudaStream_t s = d->compute;
    if (d->use_nccl && zero_dev_join(d) != 0) { return -1; }  // the reductions are done
    int rc = 0;
    if (d->stage == 0 && d->comm32) { rc = global_norm_squared(d->norm_out, d->norm_scratch, d->grads32, d->plan.padded_total, s); }
    else if (d->stage == 0) { rc = global_norm_squared(d->norm_out, d->norm_scratch, d->grads, d->plan.padded_total, s); }
    else if (d->stage == 1 && d->comm32) { rc = global_norm_squared(d->norm_out, d->norm_scratch, d->gshard32, d->plan.shard_total, s); }
    else if (d->stage == 1) { rc = global_norm_squared(d->norm_out, d->norm_scratch, d->gshard, d->plan.shard_total, s); }
    else { rc = global_norm_squared(d->norm_out, d->norm_scratch, d->acc, d->plan.shard_total, s); }
    if (rc != 0) { return -1; }
    // this rank's squared norm widened to double, summed over ranks at stages 1-3 (each rank
    // holds the squares of its shards), then the scale and the norm: all on the GPU
    adamw_norm_widen_kernel<<<1, 1, 0, s>>>(d->norm_sum, d->norm_out);
    if (zero_cuda(cudaGetLastError(), "the norm's widening") != 0) { return -1; }
    if (d->stage >= 1 && d->world > 1) {  // 8 bytes, left out of the model's traffic counters (the host engine's scalar sums are too)
        if (zero_nccl_after(&d->nccl, s) != 0 || zero_nccl_watch_begin(d->nccl.stream, "all-reduce of the gradient norm", -1) != 0 ||
            zero_nccl_watched(zero_nccl_error(ncclAllReduce(d->norm_sum, d->norm_sum, 1, ncclFloat64, ncclSum, d->nccl.comm,
                                                            d->nccl.stream), "the norm's all-reduce")) != 0 ||
            zero_dev_join(d) != 0) {
            return -1;
        }
    }
    adamw_grad_scale_kernel<<<1, 1, 0, s>>>(d->norm_out + 1, d->norm_out + 2, d->norm_sum, d->dp_world, st->grad_clip);
    adamw_skip_kernel<<<1, 1, 0, s>>>(d->norm_out + 1, d->norm_out + 2, st->skip);  // NaN scale: AdamW changes nothing
    // the scale and the norm to the host: read after the trainer's end-of-step
    // synchronization (zero_dev_stats), or at once with offload, whose CPU Adam needs the scale
    if (zero_cuda(cudaGetLastError(), "the gradient scale") != 0 ||
        zero_cuda(cudaMemcpyAsync(d->host_norm, d->norm_out + 1, 2 * sizeof(float), cudaMemcpyDeviceToHost, s),
                  "copying the norm") != 0) {
        return -1;
    }
    float grad_scale = 1.0f;  // the CPU Adam's copy (offload)
    if (d->offload) {
        if (zero_gpu_wait(s, NULL, "waiting for the norm") != 0) { return -1; }
        grad_scale = d->host_norm[0];
        // every gradient shard is on the host once the copy-out stream is through; before
        // the accumulators the copies read from are cleared below
        double w0 = zero_now_ms();
        if (zero_gpu_wait(d->copy_out, NULL, "waiting for the gradient copies") != 0) { return -1; }
        d->host_wait_ms += zero_now_ms() - w0;
        // every earlier upload from an h_params buffer is done before the CPU Adam writes
        // one again (the compute stream, just synchronized, waited for them too: this keeps
        // the guarantee where it is needed)
        if (zero_gpu_wait(d->copy_in, NULL, "waiting for the uploads") != 0) { return -1; }
    }
    unsigned int run_seed = (unsigned int)(st->seed ^ (st->seed >> 32));
    const float* scale_dev = d->norm_out + 1;  // AdamW on the GPU reads it there
    for (int i = 0; !d->offload && i < d->num_tensors; i++) {
        const ZeroTensor* tr = &d->tensors[i];
        // this rank's part of the tensor: at `off` in the padded model (the rounding bits,
        // and the compute copy at stages 0-2), at `sh` in the shard buffers (stages 1-3)
        size_t off = d->plan.units[tr->unit].full_offset + tr->offset, sh = 0, n = tr->size;
        if (d->stage >= 1) {
            int in = zero_plan_tensor_part(&d->plan, tr->unit, d->rank, tr->offset, tr->offset + tr->size, &off, &sh, &n);
            if (in < 0) { return -1; }
            if (in == 0) { continue; }  // no element of this tensor in this rank's shard
        }
        float wd = tr->decay ? st->weight_decay : 0.0f;
        if (d->stage == 0 && d->comm32) {
            rc = adamw_update_cuda(d->params + off, d->master + off, d->grads32 + off, d->m + off, d->v + off, n,
                                   st->lr, d->beta1, d->beta2, d->eps, wd, grad_scale, st->t, run_seed, s, off, scale_dev);
        } else if (d->stage == 0) {
            rc = adamw_update_cuda(d->params + off, d->master + off, d->grads + off, d->m + off, d->v + off, n,
                                   st->lr, d->beta1, d->beta2, d->eps, wd, grad_scale, st->t, run_seed, s, off, scale_dev);
        } else if (d->stage == 1 && d->comm32) {
            rc = adamw_update_cuda(d->params + off, d->master + sh, d->gshard32 + sh, d->m + sh, d->v + sh, n,
                                   st->lr, d->beta1, d->beta2, d->eps, wd, grad_scale, st->t, run_seed, s, off, scale_dev);
        } else if (d->stage == 1) {
            rc = adamw_update_cuda(d->params + off, d->master + sh, d->gshard + sh, d->m + sh, d->v + sh, n,
                                   st->lr, d->beta1, d->beta2, d->eps, wd, grad_scale, st->t, run_seed, s, off, scale_dev);
        } else {
            floatX* p = d->stage == 2 ? d->params + off : d->shard_params + sh;
            rc = adamw_update_cuda(p, d->master + sh, d->acc + sh, d->m + sh, d->v + sh, n,
                                   st->lr, d->beta1, d->beta2, d->eps, wd, grad_scale, st->t, run_seed, s, off, scale_dev);
        }
        if (rc != 0) { return -1; }
    }
    // the next step accumulates from zero (stages 2-3 zero each unit's buffer when taken)
    if (d->stage < 2 && zero_cuda(cudaMemsetAsync(d->grads, 0, d->plan.padded_total * sizeof(floatX), s), "cudaMemsetAsync") != 0) {
        return -1;
    }
    if (d->stage >= 2 && zero_cuda(cudaMemsetAsync(d->acc, 0, d->plan.shard_total * sizeof(float), s), "cudaMemsetAsync") != 0) {
        return -1;
    }
    return d->offload ? zero_dev_offload_step(d, st, grad_scale) : zero_dev_share_params(d);
}

// ----------------------------------------------------------------------------
// what the engine reports

// the compute stream's waits on communication so far, plus the host's for the gradient
// copies; the last step's norm. Synchronizes the compute stream: between steps.
static int zero_dev_stats(void* impl, ZeroStats* out) {
    ZeroDev* d = (ZeroDev*)impl;
    unsigned long long total = 0;
    // the step first, watched (zero3/nccl_watch.cuh): a copy into pageable memory waits for it unwatched
    if (zero_gpu_wait(d->compute, NULL, "waiting for the step") != 0 ||
        zero_cuda(cudaMemcpyAsync(&total, d->wait_clock + 1, sizeof(total), cudaMemcpyDeviceToHost, d->compute),
                  "reading the wait clock") != 0 ||
        zero_cuda(cudaStreamSynchronize(d->compute), "cudaStreamSynchronize") != 0) {
        return -1;
    }
    out->norm = d->host_norm[1];
    out->wait_ms = (double)total * 1e-6 + d->host_wait_ms;
    // every communicator's traffic: the shard group's, MiCS's replicas', hpZ's group's
    const ZeroNccl* cs[3] = {&d->nccl, &d->rep, &d->hpz};
    memset(out->comm_bytes, 0, sizeof(out->comm_bytes));
    memset(out->link_bytes, 0, sizeof(out->link_bytes));
    for (int i = 0; i < 3; i++) { zero_stats_add_traffic(out, cs[i]->bytes, cs[i]->link_bytes); }
    out->links_known = 1;
    out->nodes = d->nodes;
    out->ranks_per_node = d->per_node;
    out->moved[ZERO_MOVE_D2H] = d->moved_d2h;
    out->moved[ZERO_MOVE_H2D] = d->moved_h2d;
    out->update_ms = d->update_ms;
    out->mem[ZERO_MEM_PARAMS] = d->bytes_params;
    out->mem[ZERO_MEM_GRADS] = d->bytes_grads;
    out->mem[ZERO_MEM_OPTIMIZER] = d->bytes_optimizer;
    out->mem[ZERO_MEM_BUFFERS] = d->bytes_buffers;
    out->mem[ZERO_MEM_HOST_PARAMS] = d->host_bytes_params;
    out->mem[ZERO_MEM_HOST_GRADS] = d->host_bytes_grads;
    out->mem[ZERO_MEM_HOST_OPTIMIZER] = d->host_bytes_optimizer;
    out->mem_peak = d->bytes_params + d->bytes_grads + d->bytes_optimizer + d->bytes_buffers;  // allocated once, at init
    out->padded_total = d->plan.padded_total;
    return 0;
}

// ----------------------------------------------------------------------------
// checkpoints

// bytes of a device or pinned host array streamed through a bounded host buffer
static int zero_dev_stream(FILE* fp, void* arr, size_t bytes, int writing) {
    const size_t chunk = (size_t)64 << 20;
    char* buf = (char*)malloc(bytes < chunk ? (bytes > 0 ? bytes : 1) : chunk);
    if (buf == NULL) { return zero_error("zero device: out of memory for the checkpoint buffer"); }
    int rc = 0;
    for (size_t off = 0; off < bytes && rc == 0; off += chunk) {
        size_t n = bytes - off < chunk ? bytes - off : chunk;
        if (writing) {
            rc = zero_cuda(cudaMemcpy(buf, (const char*)arr + off, n, cudaMemcpyDefault), "reading the state");
            if (rc == 0 && fwrite(buf, 1, n, fp) != n) { rc = zero_error("zero device: writing the state failed: %s", strerror(errno)); }
        } else {
            if (fread(buf, 1, n, fp) != n) { rc = zero_error("zero device: the state is truncated"); }
            if (rc == 0) { rc = zero_cuda(cudaMemcpy((char*)arr + off, buf, n, cudaMemcpyDefault), "writing the state"); }
        }
    }
    free(buf);
    return rc;
}

// the compute copy a resume needs (bf16: it comes from stochastic rounding, so it is
// saved, not recomputed): the whole model at stages 0-2, this rank's shards at stage 3
static floatX* zero_dev_param_state(const ZeroDev* d, size_t* elems) {
    *elems = d->stage < 3 ? d->plan.padded_total : d->plan.shard_total;
    return d->stage < 3 ? d->params : d->shard_params;
}

static ZeroStateHeader zero_dev_state_header(const ZeroDev* d) {
    size_t np = 0;
    zero_dev_param_state(d, &np);
    return zero_state_header("device", d->stage, &d->plan, sizeof(floatX), 3 * d->opt_elems * sizeof(float) + np * sizeof(floatX));
}

// This rank's part of a checkpoint (zero3/checkpoint.h): the section header ("device"),
// then the fp32 master, m and v (opt_elems each: the padded model at stage 0, this rank's
// shards after), then the compute copy (zero_dev_param_state). A pending --dpu update is
// applied first.
static int zero_dev_save(void* impl, FILE* fp) {
    ZeroDev* d = (ZeroDev*)impl;
    if (zero_dev_flush(d) != 0 || zero_gpu_wait(d->compute, NULL, "waiting for the state") != 0) { return -1; }
    ZeroStateHeader h = zero_dev_state_header(d);
    size_t np = 0, n = d->opt_elems * sizeof(float);
    floatX* pstate = zero_dev_param_state(d, &np);
    if (zero_state_write_header(fp, &h) != 0 || zero_dev_stream(fp, d->master, n, 1) != 0 || zero_dev_stream(fp, d->m, n, 1) != 0 ||
        zero_dev_stream(fp, d->v, n, 1) != 0 || zero_dev_stream(fp, pstate, np * sizeof(floatX), 1) != 0) {
        return -1;
    }
    return 0;
}

// reads what zero_dev_save wrote into an engine of the same partition and precision; the
// persistent units of stage 3 are then gathered again from the shards
static int zero_dev_load(void* impl, FILE* fp) {
    ZeroDev* d = (ZeroDev*)impl;
    ZeroStateHeader want = zero_dev_state_header(d);
    size_t np = 0, n = d->opt_elems * sizeof(float);
    floatX* pstate = zero_dev_param_state(d, &np);
    if (zero_dev_flush(d) != 0 || zero_gpu_wait(d->compute, NULL, "waiting before the load") != 0 ||
        zero_state_read_header(fp, &want) != 0 || zero_dev_stream(fp, d->master, n, 0) != 0 ||
        zero_dev_stream(fp, d->m, n, 0) != 0 || zero_dev_stream(fp, d->v, n, 0) != 0 ||
        zero_dev_stream(fp, pstate, np * sizeof(floatX), 0) != 0) {
        return -1;
    }
    if (d->stage != 3) { return 0; }
    d->shards_written = 1;
    if (d->sec_ok != NULL) { memset(d->sec_ok, 0, (size_t)d->plan.num_units); }  // hpZ: slices of the old parameters
    if (zero_nccl_after(&d->nccl, d->compute) != 0 || zero_dev_refresh_persistent(d) != 0 || zero_dev_join(d) != 0) { return -1; }
    return 0;
}

// This rank's range of unit u's fp32 master (ZeroOps.master_shard): its shard's real
// elements, from the whole master (stage 0) or the shards (1-3), on the GPU or, with
// offload, in pinned host memory (cudaMemcpyDefault takes either)
static int zero_dev_master_shard(void* impl, int u, size_t* begin, size_t* n, float* out) {
    ZeroDev* d = (ZeroDev*)impl;
    const ZeroUnit* pu = &d->plan.units[u];
    *begin = (size_t)d->rank * pu->shard;
    *n = zero_plan_shard_numel(&d->plan, u, d->rank);
    if (out == NULL || *n == 0) { return 0; }
    if (zero_dev_flush(d) != 0) { return -1; }  // --dpu: the pending update is part of the master
    if (zero_gpu_wait(d->compute, NULL, "waiting for the master") != 0) { return -1; }
    const float* src = d->master + (d->stage == 0 ? pu->full_offset + *begin : pu->shard_offset);
    return zero_cuda(cudaMemcpy(out, src, *n * sizeof(float), cudaMemcpyDefault), "copying the master");
}

// ----------------------------------------------------------------------------
// init and teardown

// the pools: stage 3's gather buffers, as many of each size as the schedule ever holds;
// stages 2-3's gradient buffers, two per size when several units have it (one being
// written while the other is reduced), plus one more if the embedding (unit 0) has it
// too, since its gradient is open for the whole backward
static int zero_dev_pools_init(ZeroDev* d) {
    const ZeroPlan* p = &d->plan;
    for (int u = 0; d->stage == 3 && u < p->num_units; u++) {
        if (d->sched.persistent[u]) { continue; }
        ZeroDevPool* pp = zero_dev_pool_for(d->ppool, &d->nppool, p->units[u].padded);
        if (pp == NULL) { return -1; }
        if (pp->count == 0 && (pp->count = zero_schedule_peak(&d->sched, pp->elems)) < 0) { return zero_error("zero device: out of memory"); }
        if (pp->count == 0) { pp->count = 1; }
    }
    if (zero_dev_pools_alloc(d, d->ppool, d->nppool, 0) != 0) { return -1; }
    if (d->stage < 2) { return 0; }
    int units_of[ZERO_DEV_MAX_POOLS] = {0};
    for (int u = 0; u < p->num_units; u++) {
        ZeroDevPool* gp = zero_dev_pool_for(d->gpool, &d->ngpool, p->units[u].padded);
        if (gp == NULL) { return -1; }
        units_of[gp - d->gpool]++;
    }
    for (int i = 0; i < d->ngpool; i++) {
        ZeroDevPool* gp = &d->gpool[i];
        gp->count = units_of[i] < 2 ? units_of[i] : 2;
        if (units_of[i] > 1 && gp->elems == p->units[0].padded) { gp->count++; }
    }
    return zero_dev_pools_alloc(d, d->gpool, d->ngpool, !d->comm32 && !d->cfg.quantized_gradients);  // those reduce into d->wide_out
}

// The initial parameters (zero3/zero.h's [Note: partitioned init]), unit by unit: this
// rank's shard filled on the host (one shard-sized buffer) and uploaded into an fp32 unit
// buffer on the GPU, the ranks' agreement that every fill succeeded, the unit all-gathered
// there where this rank holds it whole (stages 0-2, persistent units); then the master
// (whole or this rank's shard) and the floatX compute copy.
static int zero_dev_fill_params(ZeroDev* d, const ZeroInit* in) {
    const ZeroPlan* p = &d->plan;
    size_t largest = 0, largest_shard = 0;
    for (int u = 0; u < p->num_units; u++) {
        if (p->units[u].padded > largest) { largest = p->units[u].padded; }
        if (p->units[u].shard > largest_shard) { largest_shard = p->units[u].shard; }
    }
    float* host_shard = (float*)malloc(largest_shard * sizeof(float));
    double scratch_bytes = 0;
    float* dev_unit = (float*)zero_dev_alloc(largest * sizeof(float), &scratch_bytes);
    int rc = host_shard != NULL && dev_unit != NULL ? 0 : zero_error("zero device: out of memory for the initial parameters");
    for (int u = 0; u < p->num_units && rc == 0; u++) {
        const ZeroUnit* pu = &p->units[u];
        size_t n = zero_plan_shard_numel(p, u, d->rank);
        int whole = d->stage < 3 || d->sched.persistent[u];
        float* mine = dev_unit + (size_t)d->rank * pu->shard;
        memset(host_shard, 0, pu->shard * sizeof(float));  // the padding is zero
        rc = zero_fill_agree(d->comm, n > 0 && in->fill(in->fill_ctx, u, (size_t)d->rank * pu->shard, n, host_shard) != 0);
        if (rc == 0) { rc = zero_cuda(cudaMemcpy(mine, host_shard, pu->shard * sizeof(float), cudaMemcpyHostToDevice), "uploading a shard"); }
        if (rc == 0) { rc = zero_cuda(cudaDeviceSynchronize(), "uploading a shard"); }  // before the NCCL stream reads it
        if (rc == 0 && whole && d->world > 1) {
            rc = zero_nccl_allgather(&d->nccl, dev_unit, pu->shard, ncclFloat32, u);
            if (rc == 0) { rc = zero_gpu_wait(d->nccl.stream, NULL, "gathering a unit"); }
        }
        if (rc == 0 && d->stage == 0) {
            rc = zero_cuda(cudaMemcpy(d->master + pu->full_offset, dev_unit, pu->padded * sizeof(float), cudaMemcpyDeviceToDevice), "copying");
        } else if (rc == 0) {  // (cudaMemcpyDefault: the master may be pinned host memory)
            rc = zero_cuda(cudaMemcpy(d->master + pu->shard_offset, mine, pu->shard * sizeof(float), cudaMemcpyDefault), "copying");
        }
        if (rc != 0) { break; }
        if (d->stage < 3) {
            zero_to_floatx_kernel<<<(unsigned)CEIL_DIV(pu->padded, (size_t)256), 256>>>(d->params + pu->full_offset, dev_unit, pu->padded);
        } else {
            zero_to_floatx_kernel<<<(unsigned)CEIL_DIV(pu->shard, (size_t)256), 256>>>(d->shard_params + pu->shard_offset, mine, pu->shard);
            if (d->sched.persistent[u]) {
                zero_to_floatx_kernel<<<(unsigned)CEIL_DIV(pu->padded, (size_t)256), 256>>>(d->unit_ptr[u], dev_unit, pu->padded);
            }
        }
        rc = zero_cuda(cudaGetLastError(), "launching the conversion");
        if (rc == 0) { rc = zero_cuda(cudaDeviceSynchronize(), "converting a unit"); }  // dev_unit is reused next
    }
    free(host_shard);
    cudaFree(dev_unit);
    d->shards_written = 1;
    return rc;
}

// The communicators (in the host engine's layout, zero3/host.h's zero_host_comms_init): the
// shard group (everyone, or MiCS's groups of mics_shard_size consecutive ranks), the
// replicas (MiCS), the secondary group (hpZ), each over NCCL and told where the nodes are.
// NCCL whenever the engine communicates; at one rank stages 1-3 still run it (the
// collectives are then copies), so the whole path runs on a single GPU.
static int zero_dev_comms_init(ZeroDev* d) {
    const ZeroConfig* cfg = &d->cfg;
    int wrank = 0, wsize = 0, node = 0;
    if (MPI_Comm_rank(d->comm, &wrank) != MPI_SUCCESS || MPI_Comm_size(d->comm, &wsize) != MPI_SUCCESS) {
        return zero_error("zero device: the MPI communicator is unusable");
    }
    if (zero_comm_node(d->comm, cfg->ranks_per_node, &node) != 0) { return -1; }
    ZeroSpan all;
    if (zero_comm_span(d->comm, node, &all) != 0) { return -1; }
    d->nodes = all.nodes;
    d->per_node = all.span == ZERO_SPAN_UNEVEN ? 0 : all.per_node;
    d->dp_world = wsize;
    int S = cfg->mics_shard_size > 0 ? cfg->mics_shard_size : wsize;
    if (wsize % S != 0) { return zero_error("zero device: mics_shard_size %d does not divide the %d ranks", S, wsize); }
    MPI_Comm group = MPI_COMM_NULL, reps = MPI_COMM_NULL, sec = MPI_COMM_NULL;
    int rc = 0;
    if (MPI_Comm_split(d->comm, wrank / S, wrank, &group) != MPI_SUCCESS ||
        MPI_Comm_split(d->comm, wrank % S, wrank, &reps) != MPI_SUCCESS) {
        rc = zero_error("zero device: MPI_Comm_split (the shard groups) failed");
        goto done;
    }
    MPI_Comm_rank(group, &d->rank);
    MPI_Comm_size(group, &d->world);
    d->use_nccl = d->world > 1 || d->stage >= 1;
    if (d->use_nccl && zero_nccl_init(&d->nccl, group, node, NULL) != 0) { rc = -1; goto done; }
    if (S < wsize && zero_nccl_init(&d->rep, reps, node, &d->nccl) != 0) { rc = -1; goto done; }
    if (cfg->hpz_partition_size > 1) {
        int P = cfg->hpz_partition_size;
        if (P > d->world || d->world % P != 0) {
            rc = zero_error("zero device: zero_hpz_partition_size %d does not divide the %d ranks", P, d->world);
            goto done;
        }
        if (MPI_Comm_split(group, d->rank / P, d->rank, &sec) != MPI_SUCCESS) {
            rc = zero_error("zero device: MPI_Comm_split (the hpZ groups) failed");
            goto done;
        }
        if (zero_nccl_init(&d->hpz, sec, node, &d->nccl) != 0) { rc = -1; goto done; }
    }
done:
    if (group != MPI_COMM_NULL) { MPI_Comm_free(&group); }
    if (reps != MPI_COMM_NULL) { MPI_Comm_free(&reps); }
    if (sec != MPI_COMM_NULL) { MPI_Comm_free(&sec); }
    return rc;
}

// ZeRO++'s buffers (stage 3): hpZ's slices; the quantised collectives' scratch, for the
// largest unit; qgZ's fp32 reduced shard (wide_out, shared with the fp32 reductions)
static int zero_dev_zeropp_init(ZeroDev* d) {
    const ZeroPlan* p = &d->plan;
    size_t scratch = 0, largest_shard = 0;
    for (int u = 0; u < p->num_units; u++) {
        size_t sh = p->units[u].shard;
        if (sh > largest_shard) { largest_shard = sh; }
        size_t qw = d->cfg.quantized_weights ? (size_t)d->world * zero_quant_bytes(sh) : 0;
        size_t qg = d->cfg.quantized_gradients ? zero_nccl_rs_q_scratch(&d->nccl, sh) : 0;
        if (qw > scratch) { scratch = qw; }
        if (qg > scratch) { scratch = qg; }
    }
    if (scratch > 0 && (d->qscratch = (unsigned char*)zero_dev_alloc(scratch, &d->bytes_buffers)) == NULL) { return -1; }
    if ((d->comm32 || d->cfg.quantized_gradients) && d->stage >= 2 &&
        (d->wide_out = (float*)zero_dev_alloc(largest_shard * sizeof(float), &d->bytes_buffers)) == NULL) {
        return -1;
    }
    if (d->hpz.world > 1) {
        d->sec = (floatX*)zero_dev_alloc(p->padded_total / (size_t)d->hpz.world * sizeof(floatX), &d->bytes_params);
        d->sec_ok = (unsigned char*)calloc((size_t)p->num_units, 1);
        if (d->sec == NULL || d->sec_ok == NULL) { return zero_error("zero device: out of memory for hpZ's slices"); }
    }
    return 0;
}

// Builds the device engine over in->comm (one GPU per rank, the device set) for
// in->model, its work ordered after in->stream, the model's.
static int zero_dev_init(void* impl, const ZeroInit* in) {
    ZeroDev* d = (ZeroDev*)impl;
    const ZeroConfig* cfg = in->cfg;
    int num_units = in->model->num_units;
    memset(d, 0, sizeof(*d));
    d->cfg = *cfg;
    d->stage = cfg->stage;
    d->compute = (cudaStream_t)in->stream;
    d->comm = in->comm;
    d->beta1 = in->beta1; d->beta2 = in->beta2; d->eps = in->eps;
    if (cfg->offload_optimizer == ZERO_OFFLOAD_NVME || cfg->offload_param != ZERO_OFFLOAD_NONE) {
        return zero_error("zero device: NVMe and parameter offload run on the host backend (--zero-backend host)");
    }
    d->offload = cfg->offload_optimizer == ZERO_OFFLOAD_CPU;
    d->dpu = in->dpu;
    d->omp_threads = in->threads;
    if (d->offload && d->stage == 0) { return zero_error("zero device: optimizer offload needs ZeRO stage 1 or more"); }
    if (d->dpu && !d->offload) { return zero_error("zero device: --dpu delays the CPU Adam's update: it needs --offload-optimizer cpu"); }
    if (zero_dev_comms_init(d) != 0) { return -1; }
    if (zero_plan_init(&d->plan, in->model->unit_numel, num_units, d->world, d->rank, sizeof(floatX)) != 0 ||
        zero_schedule_init(&d->sched, in->model, &d->plan, cfg) != 0) {
        return -1;
    }
    const ZeroPlan* p = &d->plan;
    d->num_tensors = in->model->num_tensors;
    d->tensors = (ZeroTensor*)malloc(d->num_tensors * sizeof(ZeroTensor));
    d->unit_ptr = (floatX**)calloc(num_units, sizeof(floatX*));
    d->unit_buf = (ZeroDevBuf**)calloc(num_units, sizeof(ZeroDevBuf*));
    d->grad_buf = (ZeroDevBuf**)calloc(num_units, sizeof(ZeroDevBuf*));
    d->reduced_ev = (cudaEvent_t*)calloc(num_units, sizeof(cudaEvent_t));
    if (!d->tensors || !d->unit_ptr || !d->unit_buf || !d->grad_buf || !d->reduced_ev) { return zero_error("zero device: out of memory"); }
    memcpy(d->tensors, in->model->tensors, d->num_tensors * sizeof(ZeroTensor));
    for (int u = 0; u < num_units; u++) {
        if (zero_cuda(cudaEventCreateWithFlags(&d->reduced_ev[u], cudaEventDisableTiming), "cudaEventCreate") != 0) { return -1; }
    }
    // fp32 reductions of bf16 gradients (fp32 ones are reduced in fp32 anyway; without NCCL,
    // one rank at stage 0, nothing is reduced)
    d->comm32 = cfg->comm_dtype == ZERO_COMM_FP32 && sizeof(floatX) != sizeof(float) && d->use_nccl;

    // the model states
    size_t np = p->padded_total, ns = p->shard_total;
    d->opt_elems = d->stage == 0 ? np : ns;
    if (d->stage < 3) {
        if ((d->params = (floatX*)zero_dev_alloc(np * sizeof(floatX), &d->bytes_params)) == NULL) { return -1; }
    } else if ((d->shard_params = (floatX*)zero_dev_alloc(ns * sizeof(floatX), &d->bytes_params)) == NULL) {
        return -1;
    }
    if (d->stage < 2 && (d->grads = (floatX*)zero_dev_alloc(np * sizeof(floatX), &d->bytes_grads)) == NULL) { return -1; }
    if (d->stage == 1 && !d->comm32 && (d->gshard = (floatX*)zero_dev_alloc(ns * sizeof(floatX), &d->bytes_grads)) == NULL) { return -1; }
    if (d->stage >= 2 && (d->acc = (float*)zero_dev_alloc(ns * sizeof(float), &d->bytes_grads)) == NULL) { return -1; }
    if (d->comm32) {  // the fp32 reductions' buffers (see the top of the file)
        size_t largest = 0, largest_shard = 0;
        for (int u = 0; u < num_units; u++) {
            if (p->units[u].padded > largest) { largest = p->units[u].padded; }
            if (p->units[u].shard > largest_shard) { largest_shard = p->units[u].shard; }
        }
        if ((d->stage == 0 && (d->grads32 = (float*)zero_dev_alloc(np * sizeof(float), &d->bytes_grads)) == NULL) ||
            (d->stage == 1 && (d->gshard32 = (float*)zero_dev_alloc(ns * sizeof(float), &d->bytes_grads)) == NULL) ||
            (d->stage >= 1 && (d->wide = (float*)zero_dev_alloc(largest * sizeof(float), &d->bytes_buffers)) == NULL)) {
            return -1;
        }
    }
    if (zero_dev_zeropp_init(d) != 0) { return -1; }
    if (d->offload) {
        size_t gb = zero_dev_shard_grad_bytes(d);
        if ((d->master = (float*)zero_dev_alloc_host(ns * sizeof(float), &d->host_bytes_optimizer)) == NULL ||
            (d->m = (float*)zero_dev_alloc_host(ns * sizeof(float), &d->host_bytes_optimizer)) == NULL ||
            (d->v = (float*)zero_dev_alloc_host(ns * sizeof(float), &d->host_bytes_optimizer)) == NULL ||
            (d->h_grads_buf[0] = zero_dev_alloc_host(ns * gb, &d->host_bytes_grads)) == NULL ||
            (d->dpu && (d->h_grads_buf[1] = zero_dev_alloc_host(ns * gb, &d->host_bytes_grads)) == NULL) ||
            (d->h_params_buf[0] = (floatX*)zero_dev_alloc_host(ns * sizeof(floatX), &d->host_bytes_params)) == NULL ||
            (d->dpu && (d->h_params_buf[1] = (floatX*)zero_dev_alloc_host(ns * sizeof(floatX), &d->host_bytes_params)) == NULL)) {
            return -1;
        }
        d->h_grads = d->h_grads_buf[0];
        d->h_params = d->h_params_buf[0];
        if (zero_cuda(cudaStreamCreateWithFlags(&d->copy_out, cudaStreamNonBlocking), "creating the copy-out stream") != 0 ||
            zero_cuda(cudaStreamCreateWithFlags(&d->copy_in, cudaStreamNonBlocking), "creating the copy-in stream") != 0 ||
            zero_cuda(cudaEventCreateWithFlags(&d->reduced_out_ev, cudaEventDisableTiming), "cudaEventCreate") != 0 ||
            zero_cuda(cudaEventCreateWithFlags(&d->upload_ev, cudaEventDisableTiming), "cudaEventCreate") != 0 ||
            zero_cuda(cudaEventCreateWithFlags(&d->copied_ev, cudaEventDisableTiming), "cudaEventCreate") != 0) {
            return -1;
        }
    } else if ((d->master = (float*)zero_dev_alloc(d->opt_elems * sizeof(float), &d->bytes_optimizer)) == NULL ||
               (d->m = (float*)zero_dev_alloc(d->opt_elems * sizeof(float), &d->bytes_optimizer)) == NULL ||
               (d->v = (float*)zero_dev_alloc(d->opt_elems * sizeof(float), &d->bytes_optimizer)) == NULL) {
        return -1;
    }
    if ((d->norm_scratch = (float*)zero_dev_alloc(GLOBAL_NORM_SCRATCH_FLOATS * sizeof(float), &d->bytes_buffers)) == NULL ||
        (d->norm_out = (float*)zero_dev_alloc(3 * sizeof(float), &d->bytes_buffers)) == NULL ||
        (d->norm_sum = (double*)zero_dev_alloc(sizeof(double), &d->bytes_buffers)) == NULL ||
        (d->wait_clock = (unsigned long long*)zero_dev_alloc(2 * sizeof(unsigned long long), &d->bytes_buffers)) == NULL ||
        zero_cuda(cudaMallocHost((void**)&d->host_norm, 2 * sizeof(float)), "cudaMallocHost") != 0) {
        return -1;
    }
    d->host_norm[0] = d->host_norm[1] = 0.0f;

    // stage 3: the persistent units in buffers of their own, gathered for the whole run
    for (int u = 0; d->stage == 3 && u < num_units; u++) {
        if (!d->sched.persistent[u]) { continue; }
        d->unit_ptr[u] = (floatX*)zero_dev_alloc(p->units[u].padded * sizeof(floatX), &d->bytes_buffers);
        if (d->unit_ptr[u] == NULL) { return -1; }
        zero_schedule_gathered(&d->sched, u);
    }
    if (zero_dev_pools_init(d) != 0) { return -1; }
    return zero_dev_fill_params(d, in);
}

static void zero_dev_free(void* impl) {
    ZeroDev* d = (ZeroDev*)impl;
    if (d == NULL) { return; }
    if (d->compute != NULL) { cudaStreamSynchronize(d->compute); }
    if (d->copy_out != NULL) { cudaStreamSynchronize(d->copy_out); }
    if (d->copy_in != NULL) { cudaStreamSynchronize(d->copy_in); }
    zero_nccl_free(&d->hpz);  // (sharing the shard group's stream: first)
    zero_nccl_free(&d->rep);
    if (d->use_nccl) { zero_nccl_free(&d->nccl); }
    cudaFree(d->sec); cudaFree(d->qscratch); free(d->sec_ok);
    zero_dev_pools_free(d->ppool, d->nppool);
    zero_dev_pools_free(d->gpool, d->ngpool);
    for (int u = 0; d->unit_ptr != NULL && u < d->plan.num_units; u++) {
        if (d->sched.persistent != NULL && d->sched.persistent[u]) { cudaFree(d->unit_ptr[u]); }
    }
    for (int u = 0; d->reduced_ev != NULL && u < d->plan.num_units; u++) {
        if (d->reduced_ev[u] != NULL) { cudaEventDestroy(d->reduced_ev[u]); }
    }
    cudaFree(d->params); cudaFree(d->shard_params); cudaFree(d->grads); cudaFree(d->gshard); cudaFree(d->acc);
    cudaFree(d->grads32); cudaFree(d->gshard32); cudaFree(d->wide); cudaFree(d->wide_out);
    if (d->offload) {
        if (d->update_pending) { pthread_join(d->update_thread, NULL); }  // it writes these
        cudaFreeHost(d->master); cudaFreeHost(d->m); cudaFreeHost(d->v); cudaFreeHost(d->h_params_buf[0]);
        if (d->h_params_buf[1] != NULL) { cudaFreeHost(d->h_params_buf[1]); }
        cudaFreeHost(d->h_grads_buf[0]);
        if (d->h_grads_buf[1] != NULL) { cudaFreeHost(d->h_grads_buf[1]); }
        if (d->copy_out != NULL) { cudaStreamDestroy(d->copy_out); }
        if (d->copy_in != NULL) { cudaStreamDestroy(d->copy_in); }
        if (d->reduced_out_ev != NULL) { cudaEventDestroy(d->reduced_out_ev); }
        if (d->upload_ev != NULL) { cudaEventDestroy(d->upload_ev); }
        if (d->copied_ev != NULL) { cudaEventDestroy(d->copied_ev); }
    } else {
        cudaFree(d->master); cudaFree(d->m); cudaFree(d->v);
    }
    cudaFree(d->norm_scratch); cudaFree(d->norm_out); cudaFree(d->norm_sum); cudaFree(d->wait_clock);
    if (d->host_norm != NULL) { cudaFreeHost(d->host_norm); }
    free(d->tensors); free(d->unit_ptr); free(d->unit_buf); free(d->grad_buf); free(d->reduced_ev);
    zero_schedule_free(&d->sched);
    zero_plan_free(&d->plan);
    free(d);
}

static const ZeroOps zero_dev_ops = {
    "device", zero_dev_begin, zero_dev_fetch, zero_dev_release, zero_dev_grad, zero_dev_reduce, zero_dev_end,
    zero_dev_step, zero_dev_flush, zero_dev_stats, zero_dev_save, zero_dev_load, zero_dev_master_shard, zero_dev_free,
};

// A device engine behind z (see ZeroInit). On failure nothing is left allocated.
static int zero_dev_create(Zero* z, const ZeroInit* in) {
    return zero_create(z, &zero_dev_ops, calloc(1, sizeof(ZeroDev)), zero_dev_init, in);
}

#endif // ZERO3_DEVICE_CUH
