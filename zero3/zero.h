/*
 The ZeRO engine's interface: what a trainer sees of any engine. Three engines stand
 behind it, chosen at start-up, and the trainer calls them all the same way:

   host     zero3/host.h      the model states in host memory, collectives over MPI: the
                              CPU trainer's engine, every stage and offload (cpu, NVMe)
   device   zero3/device.cuh  the model states on the GPU, collectives over NCCL on their
                              own stream: the GPU trainer's fast path
   staged   zero3/staged.cuh  the host engine behind a GPU: the GPU computes on copies that
                              the hooks upload and download (NVMe and parameter offload,
                              ranks sharing one GPU)

 The model is made of *units* (for GPT-2: the embedding, each block, the final
 layernorm), each one contiguous buffer, the granularity of every gather and reduction.
 A pass walks the units in the order of a use schedule registered at init (ZeroModel):

   zero_begin(pass, last_micro)   a training micro-step (forward then backward) or a forward
   zero_fetch(u)                  the unit's full parameters (stage 3: gathered, prefetch started)
   zero_release(u)                done with them for now
   zero_grad(u)                   the unit's full gradient buffer to accumulate into (backward)
   zero_reduce(u)                 the unit's gradient is complete for this micro-step
   zero_end()
 and once per optimizer step zero_step(). The four calls in the middle are the hooks the
 forward and backward make per unit; the schedule they follow is zero3/schedule.h.

 Parameters and gradients reach the model as void*: float on the host engine, the GPU's
 compute type (floatX, zero3/cuda_util.cuh) on the other two.

 Errors: every call returns 0, or -1 with zero_errmsg() naming the problem; the engine is
 then in an undefined state and the caller stops (a failed collective has left the ranks
 out of step). Nothing here exits.
*/
#ifndef ZERO3_ZERO_H
#define ZERO3_ZERO_H

#include <stdio.h>          // FILE: checkpoints
#include <stddef.h>         // size_t
#include <stdint.h>         // uint64_t
#include <mpi.h>            // MPI_Comm: the ranks an engine partitions over
#include "zero3/comm.h"     // ZERO_NUM_COLLECTIVES, ZERO_NUM_LINKS: what the byte counters tell apart

#ifdef __cplusplus
extern "C" {
#endif

// the two use schedules a model registers
enum { ZERO_PASS_TRAIN, ZERO_PASS_FORWARD, ZERO_NUM_PASSES };

// A tensor as the optimizer sees it: a range of a unit, with or without weight decay.
typedef struct { int unit; size_t offset, size; int decay; } ZeroTensor;

// the configuration (zero3/config.h: its keys, flags and checks), opaque here
typedef struct ZeroConfig ZeroConfig;

// What an engine is built for: the units' sizes, the tensors (weight decay is per tensor),
// and for each pass the units in the order the model uses them (a unit may appear more
// than once: GPT-2's embedding is used by the encoder and again by the classifier).
typedef struct {
    int num_units;
    const size_t* unit_numel;           // (num_units) elements of each unit
    int num_tensors;
    const ZeroTensor* tensors;          // (num_tensors)
    const int* uses[ZERO_NUM_PASSES];   // (num_uses[pass]) the unit of each use
    int num_uses[ZERO_NUM_PASSES];
} ZeroModel;

// Fills out[0..n) with unit u's initial fp32 parameters [begin, begin + n) (unit-local,
// unpadded): 0, or -1 with zero_error naming what is wrong (a file's damaged range...).
typedef int (*ZeroFillFn)(void* ctx, int unit, size_t begin, size_t n, float* out);

// How an engine starts.
typedef struct {
    const ZeroConfig* cfg;   // stage, the DeepSpeed knobs, offload (validated)
    const ZeroModel* model;
    ZeroFillFn fill;         // the initial parameters: each rank asks only for its own shard
    void* fill_ctx;          //   of each unit (see zero_fill_agree), never for the whole model
    float beta1, beta2, eps; // AdamW
    MPI_Comm comm;           // the ranks to partition over
    int dpu;                 // device engine: ZeRO-Offload's delayed parameter update (--dpu)
    int threads;             // device engine: the CPU Adam's OpenMP threads; 0: OpenMP's default
    void* stream;            // device and staged engines: the model's cudaStream_t, their work ordered after it
    size_t param_bytes;      // device and staged engines: the trainer's bytes per GPU parameter (sizeof its floatX)
} ZeroInit;

// [Note: partitioned init] An engine calls in->fill for the real elements of its own shard
// of each unit only (the padding stays zero), then builds what must be whole by gathering
// the shards: the full buffer at stages 0-2, the persistent units at stage 3. No rank ever
// holds more than its shard and one unit, and the model is the same at any world size,
// since the fill is a function of the element alone. Before any unit is gathered, the
// ranks agree that every fill succeeded (zero_fill_agree): a rank whose read failed must
// not leave the others waiting in a gather.
//
// Called by every rank of comm with failed = whether its fill of the unit failed: 0 when
// none did; else -1 on every rank, with zero_error holding the message of the lowest
// failing rank (sent to all), so the user sees it whichever rank prints.
int zero_fill_agree(MPI_Comm comm, int failed);

// One optimizer step: AdamW at 1-based step t after clipping the global norm of the mean
// gradient at grad_clip (0: off); seed: the device engine's stochastic rounding to bf16.
// A step whose global norm is not finite, or with skip set (the caller's loss was not),
// is skipped as DeepSpeed skips an overflow: no parameter or AdamW moment changes and the
// gradients are discarded, so the next step starts from zero. Every rank sees the same
// norm and must pass the same skip. skip_norm_above > 0: the step is skipped too when the
// global norm exceeds it (llm.c's -sg, whose limit the trainer works out); 0: never.
typedef struct { float lr, weight_decay, grad_clip; int t; uint64_t seed; int skip; float skip_norm_above; } ZeroStep;

// bytes moved between the tiers
enum { ZERO_MOVE_D2H, ZERO_MOVE_H2D, ZERO_MOVE_NVME_READ, ZERO_MOVE_NVME_WRITE, ZERO_NUM_MOVES };
// memory by kind: where the computation runs (the GPU, or host memory for the host engine),
// then the same kinds in host memory (offload)
enum { ZERO_MEM_PARAMS, ZERO_MEM_GRADS, ZERO_MEM_OPTIMIZER, ZERO_MEM_BUFFERS,
       ZERO_MEM_HOST_PARAMS, ZERO_MEM_HOST_GRADS, ZERO_MEM_HOST_OPTIMIZER, ZERO_MEM_HOST_BUFFERS, ZERO_MEM_KINDS };

// What an engine reports, all cumulative since init except the norm. Read between steps.
typedef struct {
    float norm;                               // the last step's gradient norm, before clipping
    double wait_ms;                           // time spent waiting on communication
    double comm_bytes[ZERO_NUM_COLLECTIVES];  // bytes this rank sent, as a ring algorithm sends them
    double link_bytes[ZERO_NUM_LINKS][ZERO_NUM_COLLECTIVES];  // the same split: inside a node, between nodes
    int links_known;                          // 1 when the engine splits its bytes by link (the host and device engines)
    int nodes, ranks_per_node;                // where the ranks are (ranks_per_node 0: uneven)
    double moved[ZERO_NUM_MOVES];             // bytes between device, host and NVMe
    double update_ms;                         // the AdamW update's time, wherever it runs
    double nvme_wait_ms;                      // time blocked on the NVMe tier's I/O (host engine)
    double update_nvme_wait_ms;               // the part of nvme_wait_ms inside the update
    double reads_ahead;                       // gathers that found their parameter shard read ahead from NVMe
    int reads_ahead_peak;                     // the most parameter shards read ahead at once (offload_param.buffer_count)
    double mem[ZERO_MEM_KINDS];               // peak bytes of each kind
    double mem_peak;                          // the peak of the compute-side kinds together
    double nvme_bytes;                        // the swap file
    size_t padded_total;                      // elements of the model with each unit padded
    double init_ms;                           // the engine's build (zero_*_create), start-up's share of it:
    double fill_ms;                           //   of which in ZeroInit.fill (the initial parameters made or read)
} ZeroStats;

// Adds one communicator's byte counters, per collective and split by link, into a rank's
// stats: an engine sums its shard group's, MiCS replicas' and hpZ group's this way
void zero_stats_add_traffic(ZeroStats* s, const double bytes[ZERO_NUM_COLLECTIVES],
                                          const double link_bytes[ZERO_NUM_LINKS][ZERO_NUM_COLLECTIVES]);

// An engine, opaque: made by an engine's create call (zero3/host.h's zero_host_create,
// zero3/device.cuh's zero_dev_create, zero3/staged.cuh's zero_staged_create), used through
// the calls below, freed by zero_free. What an engine implements is zero3/engine.h's.
typedef struct Zero Zero;

int zero_begin(Zero* z, int pass, int last_micro);
int zero_fetch(Zero* z, int unit, void** params);
int zero_release(Zero* z, int unit);
int zero_grad(Zero* z, int unit, void** grad);
int zero_reduce(Zero* z, int unit);
int zero_end(Zero* z);
int zero_step(Zero* z, const ZeroStep* step);
int zero_flush(Zero* z);
int zero_stats(Zero* z, ZeroStats* out);
int zero_save(Zero* z, FILE* fp);
int zero_load(Zero* z, FILE* fp);
// [Note: the master by shards] Every rank reads only its own range of each unit (at
// stage 0, where every rank holds the whole master, the range a shard would be), so a
// checkpoint writes and checks the model with each rank holding one unit's shard at most
// beyond its state: the ranges of all ranks tile every unit's real elements exactly once.
// zero_state_shard: this rank's range [*begin, *begin + *n) of unit `unit`'s fp32 master,
// AdamW m or v, or the gradient (`what`, ZERO_STATE_*), into out when out is not NULL,
// wherever the engine keeps it (GPU, host, NVMe); a deferred update is applied first.
// The gradient is the mean over the data-parallel ranks of the step's accumulated
// gradient, before clipping: what the norm and AdamW read.
//
// [Note: phases] The phases are DeepSpeed's. The master, m and v are read between passes
// (not between zero_begin and zero_end); the gradient only once it is complete and not
// yet used: after the zero_end of a training pass begun with last_micro, before zero_step
// (forward passes between them leave it be). A call outside its phase is refused with a
// message, never answered with stale data. A range query (out NULL) is answered anywhere.
enum { ZERO_STATE_MASTER, ZERO_STATE_M, ZERO_STATE_V, ZERO_STATE_GRAD, ZERO_NUM_STATES };
int zero_state_shard(Zero* z, int what, int unit, size_t* begin, size_t* n, float* out);

// zero_tensor_get: the whole fp32 `what` of tensor t (ZeroModel.tensors' index) into out
// (size elements) on every rank: each rank gives its range (zero_state_shard) and the
// ranks gather them over the engine's communicator. Collective: every rank of ZeroInit's
// comm calls it with the same what and t. DeepSpeed's safe_get_full_fp32_param,
// safe_get_full_grad and safe_get_full_optimizer_state.
int zero_tensor_get(Zero* z, int what, int t, float* out);

// zero_tensor_local: this rank's part of tensor t's `what`, elements [*begin, *begin + *n)
// of the tensor (*n 0: none), into out (room for *n) unless out is NULL. Not collective.
// DeepSpeed's safe_get_local_*.
int zero_tensor_local(Zero* z, int what, int t, size_t* begin, size_t* n, float* out);

// zero_tensor_set: tensor t's whole `what` from in (size elements, the same on every
// rank): each rank keeps the part it holds, then what is made from it is brought up to
// date on every rank. Setting the master sets the parameters the model computes with
// (rounded to nearest where they are bf16), gathered units and hpZ's slices included, so
// the next forward sees it; the gradient is given as the mean (as zero_tensor_get gives
// it), and the step's norm and clipping then see it. Collective, in the phases of
// zero_state_shard. DeepSpeed's safe_set_full_fp32_param, safe_set_full_optimizer_state,
// safe_set_full_grad.
int zero_tensor_set(Zero* z, int what, int t, const float* in);

// zero_tensor_set_local: this rank's part only, in holding the elements zero_tensor_local
// names (none: in unread). Collective all the same (the shards are shared after).
// DeepSpeed's safe_set_local_*.
int zero_tensor_set_local(Zero* z, int what, int t, const float* in);

// [Note: gathered scope] DeepSpeed's GatheredParameters: zero_gather_begin hands every
// rank the whole fp32 master of the units named (params[i]: unit units[i]'s ZeroModel
// unit_numel elements, unpadded, the engine's memory until the scope ends), to read or to
// change outside the passes; zero_gather_end takes the modifier rank's copies (every
// rank's others are ignored) into the master and the compute copy on every rank, as
// zero_tensor_set does, so the next forward sees them; modifier -1: read only, nothing
// written back. No pass or step inside the scope. Both collective.
int zero_gather_begin(Zero* z, const int* units, int n, int modifier, float** params);
int zero_gather_end(Zero* z);

// zero_empty_cache: DeepSpeed's empty_partition_cache. Frees what the engine keeps
// gathered or pooled between passes: the working-set buffers kept for reuse and, at stage
// 3, the persistent units' gathered copies; *freed: their bytes (on the GPU for the device
// engine, in host memory for the host engine). What the next pass, step or change needs
// is gathered or allocated again then, so nothing changes but the memory held. Between
// passes, outside a gathered scope; collective.
int zero_empty_cache(Zero* z, double* freed);

// [Note: the movers' timeline] For a trainer's --profile-ops: between zero_trace_begin and
// zero_trace_end, each mover the engine runs is one span on the track of where it ran: a
// collective on the collective stream, a copy on a copy stream, the CPU Adam (with --dpu on
// its own thread; the part before the trace's start cut) and an NVMe read waited for on the
// host. Times are ms from the trace's start: host_start_ms is the host's clock
// (zero_now_ms) then, taken right after the caller waited for the compute stream, so that the
// GPU's timeline and the host's line up. zero_trace_end waits for the spans' work and hands
// out the engine's array (valid until the next begin); the engines without a timeline (the
// host engine, the host-staged one) answer none. Off, the engine records nothing.
enum { ZERO_TRACK_COLLECTIVES, ZERO_TRACK_COPIES, ZERO_TRACK_HOST, ZERO_NUM_TRACKS };
typedef struct {
    const char* what;        // "gather", "reduce-scatter", "all-reduce", "copy out", "upload", "cpu adam", ...
    int unit;                // the unit moved, -1: every unit or none
    int track;               // ZERO_TRACK_*
    double t0_ms, t1_ms;
} ZeroTraceSpan;
int zero_trace_begin(Zero* z, double host_start_ms);
int zero_trace_end(Zero* z, const ZeroTraceSpan** spans, int* n);

const char* zero_name(const Zero* z);

// frees the engine and sets *z to NULL (harmless on NULL, or twice)
void zero_free(Zero** z);

#ifdef __cplusplus
}
#endif

#endif // ZERO3_ZERO_H
