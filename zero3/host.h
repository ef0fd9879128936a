/*
 The host engine: parameters, gradients and AdamW state of a model made of *units* in
 host memory, partitioned over the ranks of a communicator by stage, collectives over MPI
 (zero3/comm.h). The CPU trainer's engine, and inside zero3/staged.cuh the GPU trainer's
 host-staged backend.

   stage 0  everything replicated; gradients all-reduced at the accumulation boundary
   stage 1  + AdamW state sharded: gradients reduce-scattered at the boundary, each rank
            updates its shard, updated parameters all-gathered
   stage 2  + gradients sharded: each unit's gradient is reduce-scattered into an fp32
            shard accumulator right after its backward, at every micro-step, and the
            full unit gradient is freed
   stage 3  + parameters sharded: a unit is gathered before each use (forward and
            backward) and released after, unless it is used again soon
 Offload: --offload-optimizer cpu (the fp32 master and moments of stages 1-3 on the host,
 updated by the SIMD CPU Adam) or nvme (stage 3: in this rank's swap file, updated sub-group
 by sub-group), --offload-param cpu|nvme (stage 3: the parameter shards).

 With the optimizer on NVMe the reduced gradient shards go there too (ZeRO-Infinity): each
 unit's shard is added into a gradient region of the swap file beside master, m and v as
 its reduction completes, and the step reads it group by group with them. Nothing of size
 shard_total is then held in memory, at any point (init, step, checkpoints): the host holds
 the units being gathered or reduced, the step's group buffers and two shards' staging, so
 a rank's memory is bounded by a few of the largest unit, not by the model. With the
 parameters on NVMe (--offload-param nvme) the shards of the units the prefetch window
 gathers next, as many as offload_param.buffer_count buffers hold, are read ahead
 (ZeroMover.upcoming) while the units before them compute, so that each gather starts
 from memory as before, where it started the collective: the reads overlap the compute of
 the units ahead of them, the gather the next unit's. The step writes each unit's updated
 shard while the next one is updated (zero3/swap.h).

 The calls are zero3/zero.h's, through zero_host_ops; the order of the uses and every
 keep, release, prefetch and reduction-window decision is zero3/schedule.h's. Each
 nonblocking collective gets a turn at every unit boundary (zero_poll): Open MPI moves a
 host collective on only while the rank is inside an MPI call.

 In memory every buffer is either "device" or "host" by its accounting tag (ZERO_MEM_*),
 even though both are host memory here: the CPU trainer's figures then read as the GPU's.
*/
#ifndef ZERO3_HOST_H
#define ZERO3_HOST_H

#include "zero3/plan.h"        // ZeroPlan: padded units and shards
#include "zero3/comm.h"        // ZeroComm: collectives with byte counters
#include "zero3/config.h"      // ZeroConfig
#include "zero3/zero.h"        // the interface: ZeroModel, ZeroStats
#include "zero3/schedule.h"    // ZeroSchedule: the uses and their decisions
#include "zero3/pass.h"        // ZeroPass, ZeroMover: the pass driver and its moves
#include "zero3/swap.h"        // ZeroSwap, ZeroSegment: the NVMe tier
#include "zero3/cpu_adam.h"    // CpuAdamParams: what the step's update routine is given
#include <stdio.h>              // FILE: zero_host_save, zero_host_load

#ifdef __cplusplus
extern "C" {
#endif

// ----------------------------------------------------------------------------
// memory accounting: every engine allocation carries a tag

typedef struct {
    double current[ZERO_MEM_KINDS], peak[ZERO_MEM_KINDS];
    double total, total_peak;   // the "device" kinds only: what must fit where the model computes
    double nvme_bytes;          // the swap file
} ZeroMemory;

#define ZERO_POOL_MAX 64

// One piece of the step's update: a run of elements that AdamW updates with one weight
// decay (a tensor at stage 0, a tensor's part of this rank's shard after), its arrays found
// at init. With the optimizer offloaded, master is the host copy and the parameter shard
// it is copied into is asked for at the step (zero_param_out: a unit's shard may live on
// NVMe and be staged then); unit and unit_lo say where in it.
typedef struct {
    float* master;          // the fp32 parameters AdamW updates in place
    const float* grad;
    float* m;
    float* v;
    size_t n;
    int unit;               // offload: the unit whose parameter shard gets the update, at unit_lo
    size_t unit_lo;
    int decay;
} ZeroHostPiece;

// The step's layout: what the stage and the offload choice make of the optimizer step,
// resolved once at init (zero_host_step_plan_init), so that zero_host_step follows it
// without asking the stage again.
struct ZeroHost;
typedef struct {
    // before the norm: at one rank, stage 1 reduced nothing: the full gradient is copied
    // into the shard (and to the host copy with offload); NULL where nothing is copied
    int (*collect)(struct ZeroHost* e);
    ZeroComm* rep_sum;          // MiCS: the second hop of the gradient sum (stages 1-3), or NULL
    const float* norm_src;      // the gradient the norm is taken over; NULL: summed as it was
                                // written (grad_sumsq, the optimizer on NVMe)
    size_t norm_n;
    ZeroComm* norm_sum;         // the ranks whose squares add up to the norm; NULL: replicated (stage 0)
    ZeroHostPiece* pieces;      // (npieces) what the in-place and offloaded updates walk, in order
                                // (the NVMe one walks segs, group by group)
    int npieces;
    // the update: in place (stage 0, and stages 1-3 in memory), offloaded to the CPU Adam
    // writing the compute copy, or streamed from NVMe group by group
    int (*update)(struct ZeroHost* e, CpuAdamParams* hp, float weight_decay);
    // after it: the updated shards to every rank (stages 1-2: all-gathered; stage 3: the
    // persistent units refreshed, the rest gathered at their next use; stage 0: nothing)
    int (*share)(struct ZeroHost* e);
} ZeroHostStepPlan;

typedef struct ZeroHost {
    ZeroConfig cfg;
    ZeroPlan plan;
    ZeroComm comm;          // the ranks the model states are sharded over: all of them, or (MiCS) this rank's shard group
    ZeroComm rep;           // MiCS: the ranks holding the same shards in the other groups (one rank without MiCS)
    ZeroComm hpz;           // hpZ: the secondary group, consecutive ranks of comm (one rank without hpZ)
    ZeroSchedule sched;
    ZeroPass pass;          // the driver of the model's calls over sched, moving through zero_host_mover
    int stage, world, rank; // world and rank in comm: the plan's shards
    int dp_world;           // the ranks whose gradients are averaged: every rank
    int nodes, per_node;    // the nodes the ranks are on, and ranks on each (0: uneven)
    // hpZ: this rank's slice (1/hpz.world) of every unit's gathered parameters, taken from
    // the unit's first gather after a step; later gathers of the unit read it
    float* sec;             // (padded_total / hpz.world)
    unsigned char* unit_how;// (num_units) how the gather in flight reads the unit (ZERO_GATHER_*: on hpz from the slices)
    // --offload-param nvme: the shards of the units the window ahead gathers next
    // (ZeroMover.upcoming), read ahead into these buffers so that their gather_start finds them
    char* ahead_buf;        // (nahead x ahead_bytes), 4 KiB-aligned; NULL without a parameter region
    size_t ahead_bytes;     // zero_ahead_bytes: the largest shard on NVMe
    int nahead;             // zero_ahead_count: offload_param.buffer_count, at most a buffer per unit on NVMe
    int* ahead_unit;        // (nahead) the unit being read (or read) into each buffer, -1 if none
    long reads_ahead;       // gathers that found their shard read ahead
    int reads_ahead_peak;   // the most buffers holding reads ahead at once
    size_t unit_slack;      // elements past a unit's padded size in the pool's unit buffers (zero_unit_slack)
    int num_tensors;
    ZeroTensor* tensors;
    float beta1, beta2, eps;

    // parameters: stages 0-2 hold the full padded buffer (every rank); stage 3 only the shards
    float* full_params;     // (padded_total) stages 0-2
    float* shard_params;    // (shard_total) stage 3: this rank's master shards
    // stage 3 gathered units
    float** unit_buf;       // (num_units) the gathered copy, or NULL
    ZeroRequest* unit_req;  // (num_units) the gather in flight

    // gradients
    float* full_grads;      // (padded_total) stages 0-1
    float** grad_buf;       // (num_units) stages 2-3: the unit's full gradient during backward
    float* shard_grads;     // (shard_total) stages 1-3: reduced gradient shards (fp32 accumulators at 2-3);
                            // NULL with the optimizer on NVMe: the swap file's gradient region holds them
    // the reductions in flight (the schedule's window behind says which, oldest first):
    // reduce-scatters at stages 1-3, all-reduces at stage 0
    ZeroRequest* red_req;   // (num_units)
    float** red_recv;       // (num_units) stages 2-3: the received shard, added into the accumulator
    float** red_stage;      // (num_units) the reduction's staging (zero_red_stage), from the pool

    // AdamW state: full at stage 0, shards otherwise
    float* m;
    float* v;
    size_t opt_elems;       // elements of m and v each
    float norm;             // the last step's gradient norm

    ZeroSegment* segs;      // (nsegs) stages 1-3
    int nsegs;
    ZeroHostStepPlan step;  // the optimizer step's layout, resolved at init

    // offload (--offload-optimizer cpu|nvme, --offload-param cpu|nvme)
    int offload_opt, offload_param;
    float* host_grads;      // (shard_total) cpu: each unit's gradient shard, copied out once reduced
    float* host_master;     // (shard_total) cpu: the fp32 master shards
    // nvme: this rank's swap file (zero3/swap.h): the optimizer's regions (master, m, v and
    // the reduced gradient shards, added there as each reduction completes), and with
    // --offload-param nvme the shards of the units not kept on the host
    ZeroSwap swap;
    double moved[ZERO_NUM_MOVES];  // (the swap file's bytes are the swap's counters)
    double update_ms;       // cumulative wall time of the AdamW update, wherever it runs (device, CPU Adam, NVMe)
    double update_nvme_wait_ms;  // the NVMe waits inside it
    // [Note: the deferred update] Stage 3 with the optimizer on NVMe: the step updates the
    // persistent units and leaves the rest of its sub-groups to the next forward, each
    // unit's carried through just before its gather (zero_host_update_through), so that the
    // disk-bound update of the later units overlaps the compute of the earlier ones. Every
    // other reader of the states (a gradient, the next step, a checkpoint, the master, a
    // flush) carries it to the end first.
    int defer_update;
    int cache_emptied;      // zero_host_empty_cache freed the persistent units' copies: gathered again before their next use
    int grads_final;        // zero_host_grads_finish has run since the gradients were last cleared
    // stage 3: the parameter shards of the units kept on the host (all of them without
    // --offload-param nvme; else max_in_cpu elements, persistent units first)
    float** param_ptr;      // (num_units) the unit's shard on the host, NULL if in the swap file

    // working-set buffers freed during the step, kept for reuse by size: no allocation
    // (and no page faults) in the steady state
    struct { void* ptr; size_t elems; } pool[ZERO_POOL_MAX];
    int npool;

    ZeroMemory mem;
} ZeroHost;

// ----------------------------------------------------------------------------
// allocation with accounting (64-byte aligned, zeroed)

// ----------------------------------------------------------------------------
// the model's calls: zero3/pass.h's driver over the host engine's mover (MPI, host buffers)

extern const ZeroMover zero_host_mover;

int zero_host_begin(void* impl, int pass, int last_micro);

int zero_host_fetch(void* impl, int u, void** out);

int zero_host_release(void* impl, int u);

// the unit's full gradient buffer (padded), accumulated into by the backward
int zero_host_grad(void* impl, int u, void** out);

// The unit's gradient is complete for this micro-step: start its reduction.
int zero_host_reduce(void* impl, int u);

// Ends a pass: every use must have been made; stage 3 releases what the pass kept. A
// training pass also completes its reductions (the driver's drain_at_end): the next
// micro-step accumulates into fresh unit gradients, never into a buffer still being sent.
int zero_host_end(void* impl);

// ----------------------------------------------------------------------------
// the optimizer step

// zeroes the accumulated gradients (zero_step does it after each update)
void zero_host_clear_grads(ZeroHost* e);

// The step's gradient made complete where the norm and AdamW read it: the reductions in
// flight done, the swap file's writes settled, stage 1 at one rank's copied into the
// shard, MiCS's groups summed. At the end of the last micro-step's training pass (so that
// zero_state_shard reads it there), or at the step if that pass did not run; once a step.
int zero_host_grads_finish(ZeroHost* e);

// Carries a deferred update (see defer_update) on until unit u's shard is updated, or to
// the end (u = -1); its time and NVMe waits count as the update's. Nothing to do when no
// update is pending.
int zero_host_update_through(ZeroHost* e, int u);

// ZeroOps.flush: a deferred update is carried to the end
int zero_host_flush(void* impl);

// Resolves the step's layout (e->step) from the stage, the world and the offload choice,
// once the engine's arrays are allocated: they are not moved after init.
int zero_host_step_plan_init(ZeroHost* e);

// AdamW over this rank's part of every tensor. The gradients are sums over ranks: the
// mean is folded into AdamW's gradient scale together with the clipping factor.
// Keeps the global norm of the mean gradient for zero_host_stats. With the gradients on
// NVMe, the squared norm was summed unit by unit as they were written (in double: it
// differs from the one pass over the shard by double roundings only, far below the
// float norm's last bit).
int zero_host_step(void* impl, const ZeroStep* st);

// ----------------------------------------------------------------------------
// init and teardown

// The communicators over zero3/groups.h's groups: the shard group (everyone, or MiCS's
// groups of mics_shard_size consecutive ranks), the replicas (MiCS: the same index in every
// group), the secondary group (hpZ: consecutive ranks of the shard group), each told where
// the nodes are.
int zero_host_comms_init(ZeroHost* e, MPI_Comm world);

// Builds the engine over in->comm for in->model (see ZeroInit); each rank fills only its
// own shards (in->fill) and gathers what it must hold whole.
int zero_host_init(void* impl, const ZeroInit* in);

void zero_host_free(void* impl);

// ----------------------------------------------------------------------------
// the master by ranges, for checkpoints (the model file, its finiteness check)

// This rank's range of unit u's parameters, m, v or mean gradient (ZeroOps.state_shard):
// its shard's real elements, from the full buffers (stages 0-2; the gradient at 0-1) or
// the shards (stage 3; m, v and the gradient at stages 1-3), from the host, or from NVMe
// through the staging buffer
int zero_host_state_shard(void* impl, int what, int u, size_t* begin, size_t* n, float* out);

// ZeroOps.empty_cache: the working-set buffers the pool keeps for reuse and, at stage 3,
// the persistent units' gathered copies freed (*freed: their bytes); the next pass, step,
// load or change gathers the persistent units again
int zero_host_empty_cache(void* impl, double* freed);

// ZeroOps.state_write: unit u's [begin, begin + n) of a state from in, the part this rank
// holds (the whole where every rank holds the unit: stage 0, and the parameters at 1-2);
// the master into the parameters and AdamW's copy (offload's, the swap file's); the
// gradient as the mean, kept as the sum over the ranks
int zero_host_state_write(void* impl, int what, int u, size_t begin, size_t n, const float* in);

// ZeroOps.state_commit: after every rank wrote, what is held whole made whole again from
// the ranks' ranges: stage 0 gathers the unit of the state (any of them), stages 1-2 the
// parameters' unit; stage 3 regathers a persistent unit and forgets hpZ's slices.
// Collective.
int zero_host_state_commit(void* impl, int what, int u);

// This rank's part of a checkpoint (zero3/checkpoint.h): the section header ("host"), then
// the fp32 parameters it owns (stage 0: the whole padded model; stages 1-3: its shard of
// every unit, in shard-buffer order), then AdamW's m and v (opt_elems each). The shards
// go through one unit's shard and the swap file's moments one group at a time: nothing
// of the model's size is allocated.
int zero_host_save(void* impl, FILE* fp);

// reads what zero_host_save wrote into an engine of the same partition (one unit's shard
// or one group at a time); stages 1-2 then all-gather the parameters, stage 3 refreshes
// its persistent units
int zero_host_load(void* impl, FILE* fp);

// ----------------------------------------------------------------------------
// the estimate: what this engine will hold per rank, without building it (--estimate)

// What zero_host_init allocates on each rank, in bytes. states: the kinds that scale with
// the model (parameters, gradients, moments, master, on the host or "device": both are host
// memory here); buffers: the pool of gathered units, unit gradients and received shards at
// its largest (walked through the pass driver, zero3/pass.h); host_buffers: the NVMe step's group buffers and the
// shard staging; swap: the swap file; unit: the largest padded unit, what start-up and a
// checkpoint add for one unit at a time. The pool's largest sizes: pool_count[i] buffers of
// pool_elems[i] floats, largest first (what bounds `buffers`).
#define ZERO_EST_POOL_SIZES 4
typedef struct {
    double states, buffers, host_buffers, swap, unit;
    size_t pool_elems[ZERO_EST_POOL_SIZES];
    int pool_count[ZERO_EST_POOL_SIZES];
} ZeroHostEstimate;

// The memory zero_host_init would allocate for `model` under `cfg` on each of `world`
// ranks (every rank alike: the shards are equal), found from the same plan, schedule,
// placement and sizes the engine uses. Its accounting's peaks (ZeroStats.mem) add up to it.
int zero_host_estimate(const ZeroModel* model, const ZeroConfig* cfg, int world, ZeroHostEstimate* out);

// ----------------------------------------------------------------------------
// the interface

  // the host engine's step is done when it returns

int zero_host_stats(void* impl, ZeroStats* s);

// A host engine behind z (see ZeroInit). On failure nothing is left allocated.
int zero_host_create(Zero** z, const ZeroInit* in);

#ifdef __cplusplus
}
#endif

#endif // ZERO3_HOST_H
