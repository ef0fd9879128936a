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
 its result is uploaded at the end of step i+1.
 --offload-param cpu (stage 3, with the optimizer's offload; ZeRO-Infinity's parameter
 tier): this rank's floatX shards live in pinned host memory (the h_params buffer the CPU
 Adam writes: nothing is uploaded after a step). A gather uploads the unit's shard on
 copy_in, inside the schedule's prefetch window, and its all-gather waits for that upload
 (up_ev). No shard-sized array is on the GPU: the gradient shards leave it unit by unit
 (grads_host): each reduce-scatter's output (the gradient buffer's own rs_out or rs32) goes
 on copy_out into a pinned slot of a small ring, the buffer is free once that copy is
 done, and the host adds the slot into its fp32 accumulators (h_grads) at the next release
 that finds the copy over (the mover's poll), or when it needs the slot; the step's start
 adds the rest, and the squared norm, summed in double unit by unit on the last micro-step,
 goes to the GPU for the ranks' sum. hpZ (a slice of every unit on the GPU) is refused.
 NVMe offload is the host engine's (the GPU trainer's host-staged backend, zero3/staged.cuh).

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

 The pools are sized at init by walking the pass driver with a counting mover
 (zero_pass_walk): the decisions depend only on the schedule and the configuration.

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
#include "zero3/util.h"          // zero_error, zero_now_ms, zero_clear
#include "zero3/cuda_util.cuh"   // floatX, zero_cuda, the conversion kernels, gpu_clock_ns
#include "zero3/adamw.cuh"       // adamw_update_cuda, global_norm_squared, the scale kernels
#include "zero3/plan.h"          // ZeroPlan: padded units and shards
#include "zero3/config.h"        // ZeroConfig
#include "zero3/zero.h"          // the interface: ZeroModel, ZeroStats
#include "zero3/engine.h"        // ZeroOps, zero_create: what an engine implements
#include "zero3/schedule.h"      // ZeroSchedule: the uses and their decisions
#include "zero3/pass.h"          // ZeroPass, ZeroMover: the pass driver and its moves
#include "zero3/checkpoint.h"    // ZeroStateHeader: this engine's part of a checkpoint
#include "zero3/nccl.cuh"        // ZeroNccl: the collectives' stream and events; the quantised collectives
#include "zero3/groups.h"        // zero_groups_split: the shard group, replicas and hpZ groups, the nodes
#include "zero3/cpu_adam.h"      // cpu_adam_step: offload's SIMD AdamW
#include "zero3/swap.h"          // ZeroSwap: the NVMe tiers (the host engine's module)
#include "zero3/dev_estimate.h"  // zero_dev_pool_counts: the pools, sized as --estimate counts them
#include "zero3/trace.cuh"       // ZeroTrace: the movers' spans for a trainer's timeline (zero_trace_begin)

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

#define ZERO_DEV_MAX_POOLS ZERO_DEV_EST_MAX_POOLS  // distinct unit sizes (GPT-2 has 3)

typedef struct {
    floatX* buf;          // (elems)
    floatX* rs_out;       // gradient buffers: the reduce-scatter's output, (elems / world); NULL with comm32
    float* rs32;          // gradient buffers with the shards sent to the host, reduced in fp32 (comm32, qgZ):
                          //   the reduced shard, (elems / world), in place of the shared wide_out
    int unit;             // the unit it holds, -1 when free
    cudaEvent_t free_ev;  // the last use of buf is done once this event has passed
    cudaEvent_t ready_ev; // parameter buffers: the gather into buf is done
    cudaEvent_t up_ev;    // parameter buffers, parameter offload: this rank's shard is uploaded into buf
} ZeroDevBuf;

// Parameter offload: a reduced gradient shard on its way to the host accumulators, in a
// pinned slot of the largest shard (fp32 bytes) until the host has added it in
#define ZERO_DEV_SLOTS ZERO_DEV_EST_GRAD_SLOTS
typedef struct {
    void* host;           // (largest shard) fp32, or floatX (widened as it is added)
    cudaEvent_t done;     // the copy into host is over (recorded on copy_out)
    int unit, last_micro, x;   // x: host holds floatX
} ZeroDevSlot;

// --offload-param nvme: a pinned buffer a shard read from NVMe is uploaded from
// (offload_param.buffer_count of them)
typedef struct {
    floatX* buf;          // (largest shard on NVMe, 4 KiB-rounded) 4 KiB-aligned inside `alloc`, for O_DIRECT
    void* alloc;
    cudaEvent_t up_ev;    // the upload from buf is done (recorded on copy_in)
    int used;             // up_ev was recorded
    int reading;          // the unit a read ahead fills buf with, -1: none
} ZeroDevStage;

typedef struct {
    size_t elems;         // a unit's padded size
    int count;            // buffers
    int next;             // where the search for a free buffer starts: round robin from the last one taken
    ZeroDevBuf* bufs;     // (count)
    int rs, rs32;         // the buffers carry rs_out, rs32 (zero_dev_pools_alloc's with_rs, with_rs32)
} ZeroDevPool;

// --dpu: what the update thread is given, and what it returns (rc, ms)
struct ZeroDev;
typedef struct {
    struct ZeroDev* d;
    const void* grads;
    floatX* out;                  // the updated floatX shards
    float lr, weight_decay, grad_scale;
    int t, rc;
    double t0, ms;                // its start on the host's clock, its time (ms)
    char msg[1024];               // the thread's error (zero_error's buffer is per thread)
} ZeroDevUpdate;

// One piece of the step's update: a tensor (stage 0) or a tensor's part of this rank's
// shard (stages 1-3), with the arrays AdamW reads and writes found at init. The GPU's
// AdamW reads the gradient at grad32 or gradx, whichever the stage and the reductions'
// precision keep (the other is NULL); offload's CPU Adam reads the host's copies, at sh.
typedef struct {
    floatX* param;                // the compute copy: the full buffer (stages 0-2) or the shard (3)
    float* master;
    float* m;
    float* v;
    const float* grad32;          // fp32: comm32's buffers, or the accumulators of stages 2-3
    const floatX* gradx;          // floatX: stages 0-1 reducing in floatX
    size_t n;
    size_t off;                   // its place in the padded model: the stochastic rounding's bits
    size_t sh;                    // its place in the shard buffers: offload's gradient and compute copies
    int unit;
    int decay;
} ZeroDevPiece;

// The step's layout: what the stage, the reductions' precision and the offload choice make
// of the optimizer step, resolved once at init (zero_dev_step_plan_init), so that
// zero_dev_step follows it without asking them again.
typedef struct {
    const float* norm32;          // the gradient the norm is taken over: fp32 ...
    const floatX* normx;          // ... or floatX (the other NULL)
    size_t norm_n;
    int norm_allreduce;           // each rank holds the squares of its shards only: summed over the ranks
    ZeroDevPiece* pieces;         // (npieces) in tensor order
    int npieces;
    // the update: AdamW's kernels (and *grad_scale stays 1: they read the scale on the
    // GPU), or with offload the waits that let the CPU Adam start (*grad_scale read back)
    int (*update)(struct ZeroDev* d, const ZeroStep* st, float* grad_scale);
    void* clear;                  // the accumulated gradient cleared after the update, clear_bytes of it
    size_t clear_bytes;
    // after the update: the parameters shared (share), or with offload the CPU Adam, its
    // upload and then share
    int (*after)(struct ZeroDev* d, const ZeroStep* st, float grad_scale);
    // the updated shards to every rank: all-gathered (stages 1-2), the persistent units
    // refreshed (stage 3), or nothing (stage 0)
    int (*share)(struct ZeroDev* d);
    floatX** unit_shard;          // (num_units) unit u's shard of the compute copy: where offload uploads it
} ZeroDevStepPlan;

typedef struct ZeroDev {
    ZeroPlan plan;
    ZeroConfig cfg;
    ZeroSchedule sched;
    ZeroPass pass;                // the driver of the model's calls over sched, moving through zero_dev_mover
    MPI_Comm comm;                // the ranks (NCCL's communicator is made over it)
    int stage, world, rank, use_nccl;   // world, rank: of the shard group (everyone without MiCS)
    ZeroNccl nccl;                // the shard group's collectives
    ZeroNccl rep;                 // MiCS: the ranks holding the same shards in the other groups (unused: zeroed)
    ZeroNccl hpz;                 // hpZ: the secondary group, consecutive ranks of the shard group (unused: zeroed)
    int dp_world;                 // every data-parallel rank: the mean gradient's divisor
    int nodes, per_node;          // where the job's ranks are, for the report (per_node 0: uneven)
    floatX* sec;                  // (padded_total / hpz.world) hpZ: this rank's slice of every unit
    unsigned char* qscratch;      // qwZ / qgZ: the quantised blocks of one collective
    cudaStream_t compute;
    int num_tensors;
    ZeroTensor* tensors;
    float beta1, beta2, eps;
    int shards_written;           // stage 3: the compute stream wrote shard_params since the last pass began (step, load)
    int cache_emptied;            // zero_dev_empty_cache freed the pools' and persistent units' memory: allocated again before use
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
    double* norm_scratch;         // GLOBAL_NORM_SCRATCH_DOUBLES
    float* norm_out;              // (2,): [0] AdamW's gradient scale, [1] the norm
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
    int update_pending;           // a thread is updating, or has updated; its result is not uploaded yet
    int update_running;           // the thread is not joined yet (the optimizer on NVMe: the swap file is its)
    ZeroSwapCounters swap_seen;   // the swap file's counters when the main thread last owned it
    int omp_threads;              // the CPU Adam's OpenMP threads (this rank's share of the node's cores), 0: default
    pthread_t update_thread;
    ZeroDevUpdate update_args;
    floatX* h_params_buf[2];      // (shard_total) pinned: the updated compute-copy shards; two with dpu
    floatX* h_params;             //   (one being uploaded, one being written by the thread), h_params the one written next
    // --offload-param cpu (stage 3): shard_params is one of the h_params buffers, in pinned host
    // memory, the one in use; a gather uploads this rank's shard on copy_in before its all-gather
    int offload_param;
    // The gradient shards leave the GPU unit by unit (stage 3 with parameter offload): each
    // reduced shard goes on copy_out into a staging slot, and the host adds it into h_grads
    // (zero_dev_slots_poll); no shard-sized gradient array is on the GPU
    int grads_host;
    ZeroDevSlot slots[ZERO_DEV_SLOTS];
    int slot_head, slot_count;    // the slots in flight, oldest first (a ring)
    unsigned char* acc_started;   // (num_units) grads_host: the unit's accumulator holds this step's sum so far
    double grad_sumsq;            // grads_host: the step's squared norm, summed unit by unit on the last micro-step
    double* host_sumsq;           // (1,) pinned: it, on its way to norm_sum
    // the NVMe tiers (zero3/device_swap.cuh): --offload-optimizer nvme, --offload-param nvme
    int opt_nvme, param_nvme, global_rank;   // global_rank: names the swap file
    ZeroSwap swap;
    int swap_open;
    ZeroSegment* segs;            // (step.npieces) the optimizer's walk of the shard buffer
    int* on_host;                 // (num_units) parameter nvme: the unit's shard stays in host memory
    floatX** unit_host;           // (num_units) parameter nvme: a cached shard, in host_shards; NULL: on NVMe
    floatX* host_shards;          // pinned: the cached shards
    ZeroDevStage* pstage;         // (npstage) parameter nvme: the ring of read buffers
    int npstage, pstage_next;
    ZeroDevStage* pstage_last;    // the one zero_dev_param_src filled last
    int* read_ahead;              // (num_units) parameter nvme: the pstage a read ahead of the unit fills, -1: none
    long reads_ahead_used;        // gathers that found their shard read ahead
    int reads_ahead_peak;         // the most pstages holding reads ahead at once
    ZeroDevStepPlan step;         // the optimizer step's layout, resolved at init
    double moved_d2h, moved_h2d;  // bytes copied (cumulative)
    double update_ms;             // the CPU Adam's wall time (cumulative)
    ZeroTrace trace;              // the movers' spans while a trainer's timeline is on (zero3/trace.cuh)
    // accounting (bytes on the GPU, and pinned on the host)
    double bytes_params, bytes_grads, bytes_optimizer, bytes_buffers;
    double host_bytes_grads, host_bytes_optimizer, host_bytes_params, host_bytes_buffers;
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

// a zeroed pinned host allocation, counted into *bytes (zeroed on every core: with the
// optimizer offloaded, d48's arrays are 37 GB, 4-8 s for one core's memset)
static void* zero_dev_alloc_host(size_t nbytes, double* bytes) {
    void* p = NULL;
    if (cudaMallocHost(&p, nbytes > 0 ? nbytes : 16) != cudaSuccess) {
        zero_error("zero device: out of pinned host memory allocating %.1f MiB", nbytes / 1048576.0);
        return NULL;
    }
    zero_clear(p, nbytes > 0 ? nbytes : 16);
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

// allocates count buffers in each pool; gradient pools with the reduce-scatter's output:
// floatX (with_rs), or fp32 of their own (with_rs32, the shards sent to the host)
static int zero_dev_pools_alloc(ZeroDev* d, ZeroDevPool* pools, int npools, int with_rs, int with_rs32) {
    for (int i = 0; i < npools; i++) {
        ZeroDevPool* p = &pools[i];
        p->next = 0;
        p->rs = with_rs;
        p->rs32 = with_rs32;
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
            if (with_rs32) {
                b->rs32 = (float*)zero_dev_alloc(p->elems / d->world * sizeof(float), &d->bytes_buffers);
                if (b->rs32 == NULL) { return -1; }
            }
            if (zero_cuda(cudaEventCreateWithFlags(&b->free_ev, cudaEventDisableTiming), "cudaEventCreate") != 0 ||
                zero_cuda(cudaEventCreateWithFlags(&b->ready_ev, cudaEventDisableTiming), "cudaEventCreate") != 0 ||
                zero_cuda(cudaEventCreateWithFlags(&b->up_ev, cudaEventDisableTiming), "cudaEventCreate") != 0) {
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
            cudaFree(b->rs32);
            if (b->up_ev != NULL) { cudaEventDestroy(b->up_ev); }
            if (b->free_ev != NULL) { cudaEventDestroy(b->free_ev); }
            if (b->ready_ev != NULL) { cudaEventDestroy(b->ready_ev); }
        }
        free(pools[i].bufs);
    }
}

#include "zero3/device_swap.cuh"  // the NVMe tiers: where a shard is, the step from the swap file

// ----------------------------------------------------------------------------
// the mover (zero3/pass.h): the driver decides, these issue the moves on the streams

// gathers unit u into a pooled buffer on the NCCL stream, once the buffer's last readers
// are done: this rank's shard (or with hpZ its slice) in place, then the all-gather;
// ready_ev marks the end
static int zero_dev_gather_start(void* be, int u, int how) {
    ZeroDev* d = (ZeroDev*)be;
    const ZeroUnit* pu = &d->plan.units[u];
    ZeroDevBuf* b = zero_dev_take(d, d->ppool, d->nppool, u);
    if (b == NULL) { return -1; }
    cudaStream_t ns = d->nccl.stream;
    // the gathers read shards that the last step's AdamW (or a load) wrote
    if (d->shards_written) {
        if (zero_nccl_after(&d->nccl, d->compute) != 0) { return -1; }
        d->shards_written = 0;
    }
    int span = -1;  // (the timeline's, from when the buffer is free)
    if (zero_cuda(cudaStreamWaitEvent(ns, b->free_ev, 0), "cudaStreamWaitEvent") != 0 || zero_trace_open(&d->trace, ns, &span) != 0) {
        return -1;
    }
    size_t part = d->sec != NULL ? pu->padded / (size_t)d->hpz.world : 0;  // hpZ: a slice
    floatX* slice = d->sec != NULL ? d->sec + pu->full_offset / (size_t)d->hpz.world : NULL;
    if (how == ZERO_GATHER_SLICES) {
        // hpZ: gathered inside the secondary group from this step's slices, never across the whole world
        if (zero_cuda(cudaMemcpyAsync(b->buf + (size_t)d->hpz.rank * part, slice, part * sizeof(floatX),
                                      cudaMemcpyDeviceToDevice, ns), "copying an hpZ slice") != 0 ||
            zero_nccl_allgather(&d->hpz, b->buf, part, NCCL_FLOATX, u) != 0) {
            return -1;
        }
    } else {
        floatX* mine = b->buf + (size_t)d->rank * pu->shard;
        if (d->offload_param) {
            // the shard leaves pinned host memory (from NVMe first, zero3/device_swap.cuh) on
            // the copy-in stream (uploads overlap the collectives of the units before), and
            // the all-gather waits for it
            const floatX* src = zero_dev_param_src(d, u);
            int up = -1;
            if (src == NULL ||
                zero_cuda(cudaStreamWaitEvent(d->copy_in, b->free_ev, 0), "cudaStreamWaitEvent") != 0 ||
                zero_trace_open(&d->trace, d->copy_in, &up) != 0 ||
                zero_cuda(cudaMemcpyAsync(mine, src, pu->shard * sizeof(floatX), cudaMemcpyHostToDevice, d->copy_in),
                          "uploading a parameter shard") != 0 ||
                zero_trace_close(&d->trace, up, d->copy_in, "upload shard", u, ZERO_TRACK_COPIES) != 0 ||
                zero_dev_param_src_done(d, u) != 0 ||
                zero_cuda(cudaEventRecord(b->up_ev, d->copy_in), "cudaEventRecord") != 0 ||
                zero_cuda(cudaStreamWaitEvent(ns, b->up_ev, 0), "cudaStreamWaitEvent") != 0) {
                return -1;
            }
            d->moved_h2d += (double)pu->shard * sizeof(floatX);
        } else if (zero_cuda(cudaMemcpyAsync(mine, d->shard_params + pu->shard_offset, pu->shard * sizeof(floatX),
                                             cudaMemcpyDeviceToDevice, ns), "copying a shard") != 0) {
            return -1;
        }
        int rc = d->cfg.quantized_weights ? zero_nccl_allgather_q<floatX>(&d->nccl, b->buf, pu->shard, d->qscratch, u)
                                          : zero_nccl_allgather(&d->nccl, b->buf, pu->shard, NCCL_FLOATX, u);
        if (rc != 0) { return -1; }
        if (how == ZERO_GATHER_SHARDS_KEEP &&  // hpZ: this rank's slice kept for the unit's next gathers
            zero_cuda(cudaMemcpyAsync(slice, b->buf + (size_t)d->hpz.rank * part, part * sizeof(floatX),
                                      cudaMemcpyDeviceToDevice, ns), "keeping an hpZ slice") != 0) {
            return -1;
        }
    }
    if (zero_trace_close(&d->trace, span, ns, how == ZERO_GATHER_SLICES ? "gather (hpZ)" : "gather", u, ZERO_TRACK_COLLECTIVES) != 0 ||
        zero_cuda(cudaEventRecord(b->ready_ev, ns), "cudaEventRecord") != 0) {
        return -1;
    }
    d->unit_ptr[u] = b->buf;
    d->unit_buf[u] = b;
    return 0;
}

// the compute stream waits for unit u's gather
static int zero_dev_gather_wait(void* be, int u) {
    ZeroDev* d = (ZeroDev*)be;
    return d->unit_buf[u] != NULL ? zero_dev_wait(d, d->unit_buf[u]->ready_ev) : 0;
}

// unit u's gathered copy is no longer needed: its buffer is free once the compute
// stream's kernels issued so far (the readers) are done
static int zero_dev_gather_free(void* be, int u) {
    ZeroDev* d = (ZeroDev*)be;
    ZeroDevBuf* b = d->unit_buf[u];
    if (b == NULL) { return 0; }
    if (zero_cuda(cudaEventRecord(b->free_ev, d->compute), "cudaEventRecord") != 0) { return -1; }
    b->unit = -1;
    d->unit_ptr[u] = NULL;
    d->unit_buf[u] = NULL;
    return 0;
}

static void* zero_dev_params(void* be, int u) {
    ZeroDev* d = (ZeroDev*)be;
    return d->sched.gathers ? (void*)d->unit_ptr[u] : (void*)(d->params + d->plan.units[u].full_offset);
}

// the unit's gradient buffer (padded): in the whole gradient (stages 0-1) or from the pool
static int zero_dev_grad_buf(void* be, int u, void** out) {
    ZeroDev* d = (ZeroDev*)be;
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

// the window behind is full: the compute stream waits for unit u's reduction, the oldest
static int zero_dev_reduce_complete(void* be, int u) {
    ZeroDev* d = (ZeroDev*)be;
    return zero_dev_wait(d, d->reduced_ev[u]);
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
    zero_nvtx_push("copy out", u);
    int span = -1;
    if (zero_cuda(cudaEventRecord(d->reduced_out_ev, d->nccl.stream), "cudaEventRecord") != 0 ||
        zero_cuda(cudaStreamWaitEvent(d->copy_out, d->reduced_out_ev, 0), "cudaStreamWaitEvent") != 0 ||
        zero_trace_open(&d->trace, d->copy_out, &span) != 0 ||
        zero_cuda(cudaMemcpyAsync((char*)d->h_grads + pu->shard_offset * gb, src, pu->shard * gb,
                                  cudaMemcpyDeviceToHost, d->copy_out), "copying a gradient shard out") != 0 ||
        zero_trace_close(&d->trace, span, d->copy_out, "copy out", u, ZERO_TRACK_COPIES) != 0) {
        return zero_nvtx_popped(-1);
    }
    d->moved_d2h += (double)pu->shard * gb;
    return zero_nvtx_popped(0);
}

#include "zero3/device_slots.cuh"  // gradient shards to the host through a ring of pinned slots (grads_host)

// The unit's gradient is complete for this micro-step: its collective goes on the NCCL
// stream, after the compute stream's kernels so far (the backward that wrote it).
static int zero_dev_reduce_start(void* be, int u) {
    ZeroDev* d = (ZeroDev*)be;
    const ZeroSchedule* s = &d->sched;
    const ZeroUnit* pu = &d->plan.units[u];
    int span = -1;  // (the timeline's, from when the unit's backward is done)
    if (zero_nccl_after(&d->nccl, d->compute) != 0 || zero_trace_open(&d->trace, d->nccl.stream, &span) != 0) { return -1; }
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
        // the reduced shard: fp32 (qgZ's int8 hops are summed in fp32, comm32) into the
        // buffer's own rs32 when it goes to the host, else the shared wide_out; or floatX
        float* out32 = b->rs32 != NULL ? b->rs32 : d->wide_out;
        int red32 = d->cfg.quantized_gradients || d->comm32;
        if (d->cfg.quantized_gradients) {
            if (zero_nccl_reduce_scatter_q<floatX>(&d->nccl, b->buf, out32, pu->shard, d->qscratch, u) != 0) { return -1; }
        } else if (d->comm32) {
            if (zero_dev_widen(d, d->wide, b->buf, pu->padded) != 0 ||
                zero_nccl_reduce_scatter(&d->nccl, d->wide, out32, pu->shard, ncclFloat32, u) != 0) {
                return -1;
            }
        } else if (zero_nccl_reduce_scatter(&d->nccl, b->buf, b->rs_out, pu->shard, NCCL_FLOATX, u) != 0) {
            return -1;
        }
        if (d->grads_host) {  // to the host's accumulator (b is free once the copy has read it)
            if (zero_dev_send_shard(d, u, b, red32 ? (const void*)out32 : (const void*)b->rs_out, !red32) != 0) { return -1; }
        } else {
            if (red32) {
                zero_dev_accumulate_kernel<float><<<grid, 256, 0, d->nccl.stream>>>(d->acc + pu->shard_offset, out32, pu->shard);
            } else {
                zero_dev_accumulate_kernel<floatX><<<grid, 256, 0, d->nccl.stream>>>(d->acc + pu->shard_offset, b->rs_out, pu->shard);
            }
            if (zero_cuda(cudaGetLastError(), "the accumulate kernel") != 0 ||
                zero_cuda(cudaEventRecord(b->free_ev, d->nccl.stream), "cudaEventRecord") != 0) {
                return -1;
            }
        }
        b->unit = -1;
        // MiCS: the step's sum of this group, all-reduced with the other groups' (the
        // same shard on each) once it is complete
        if (d->rep.world > 1 && s->last_micro &&
            zero_nccl_allreduce(&d->rep, d->acc + pu->shard_offset, pu->shard, ncclFloat32, u) != 0) {
            return -1;
        }
    }
    if (zero_trace_close(&d->trace, span, d->nccl.stream, d->stage == 0 ? "all-reduce" : "reduce-scatter", u,
                         ZERO_TRACK_COLLECTIVES) != 0 ||
        zero_cuda(cudaEventRecord(d->reduced_ev[u], d->nccl.stream), "cudaEventRecord") != 0) {
        return -1;
    }
    return s->last_micro && !d->grads_host ? zero_dev_copy_out(d, u) : 0;
}

// the movers the driver calls that move bytes, each inside an NVTX range named with the unit
static int zero_dev_gather_start_ranged(void* be, int u, int how) {
    zero_nvtx_push("gather", u); return zero_nvtx_popped(zero_dev_gather_start(be, u, how));
}
static int zero_dev_gather_wait_ranged(void* be, int u) {
    zero_nvtx_push("gather wait", u); return zero_nvtx_popped(zero_dev_gather_wait(be, u));
}
static int zero_dev_reduce_start_ranged(void* be, int u) {
    zero_nvtx_push("reduce-scatter", u); return zero_nvtx_popped(zero_dev_reduce_start(be, u));
}
static int zero_dev_reduce_complete_ranged(void* be, int u) {
    zero_nvtx_push("reduce-scatter wait", u); return zero_nvtx_popped(zero_dev_reduce_complete(be, u));
}

static const ZeroMover zero_dev_mover = {
    .gather_start = zero_dev_gather_start_ranged, .gather_wait = zero_dev_gather_wait_ranged,
    .gather_free = zero_dev_gather_free, .params = zero_dev_params,
    .grad_buf = zero_dev_grad_buf, .reduce_start = zero_dev_reduce_start_ranged,
    .reduce_complete = zero_dev_reduce_complete_ranged,
    .poll = zero_dev_slots_poll,  // (NCCL progresses on its own; the host adds the gradient shards that arrived)
    .upcoming = zero_dev_upcoming,  // parameters on NVMe: the next gather's shard read ahead
};

// ----------------------------------------------------------------------------
// the model's calls: zero3/pass.h's driver over the device mover. A pass's end forgets
// its reductions in flight (drain_at_end 0): they are ordered by the buffers' events and
// the step's join.

static int zero_dev_cache_restore(ZeroDev* d);  // (zero3/device_step.cuh: after zero_dev_empty_cache)
static int zero_dev_begin(void* impl, int pass, int last_micro) {
    ZeroDev* d = (ZeroDev*)impl;
    return zero_dev_cache_restore(d) != 0 ? -1 : zero_pass_begin(&d->pass, pass, last_micro);
}
static int zero_dev_fetch(void* impl, int u, void** out) { return zero_pass_fetch(&((ZeroDev*)impl)->pass, u, out); }
static int zero_dev_release(void* impl, int u) { return zero_pass_release(&((ZeroDev*)impl)->pass, u); }
static int zero_dev_grad(void* impl, int u, void** out) { return zero_pass_grad(&((ZeroDev*)impl)->pass, u, out); }
static int zero_dev_reduce(void* impl, int u) { return zero_pass_reduce(&((ZeroDev*)impl)->pass, u); }
static int zero_dev_end(void* impl) { return zero_pass_end(&((ZeroDev*)impl)->pass); }

// ----------------------------------------------------------------------------
// the rest of the engine, in two files a reader can hold

#include "zero3/device_step.cuh"  // the optimizer step, the statistics, checkpoints
#include "zero3/device_init.cuh"  // init and teardown; zero_dev_create

#endif // ZERO3_DEVICE_CUH
