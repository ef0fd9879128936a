/*
 The pass driver: the one implementation of a pass's calls (zero3/zero.h's begin, fetch,
 release, grad, reduce, end) for every engine. It walks the use schedule
 (zero3/schedule.h) and owns every decision that follows from it: which gathers start
 ahead of their use (the window ahead), which units stay gathered (persistence, reuse),
 when the oldest reduction must complete before the next one starts (the window behind),
 what a pass's end completes and frees, and hpZ's slices (whether a gather reads this
 step's slices inside the secondary group or the shards across the whole group).

 An engine only moves bytes, through a ZeroMover: start a gather, wait for it, free a
 gathered unit, hand out a gradient buffer, start a reduction, complete the oldest one.
 The host engine's mover is over MPI and host buffers (zero3/host.c), the device
 engine's over NCCL, streams and events (zero3/device.cuh), and --estimate's counts the
 buffers without moving anything (zero3/host_estimate.c): the estimate walks the very
 driver the engines run, so the two cannot drift apart.

 [Note: the movers never look at the schedule's decisions]
 A mover is told what to do and when; it never asks whether a unit is kept, prefetched or
 persistent, and it never pops the window behind. Where an engine's ordering differs
 (the host must finish its reductions at a training pass's end, since the next
 micro-step accumulates into fresh buffers; the device orders them by events and only
 forgets them), the difference is a flag of the driver set at init, not a branch in the
 engine.
*/
#ifndef ZERO3_PASS_H
#define ZERO3_PASS_H

#include "zero3/schedule.h"  // ZeroSchedule: the uses and their decisions

#ifdef __cplusplus
extern "C" {
#endif

// how a stage 3 gather reads the unit (hpZ, zero_hpz_partition_size > 1)
enum {
    ZERO_GATHER_SHARDS,       // from the shards, over the shard group
    ZERO_GATHER_SHARDS_KEEP,  // the same, and this rank's slice of the result is kept for the unit's next gathers
    ZERO_GATHER_SLICES,       // from the kept slices, inside the secondary (hpZ) group
};

// What an engine does when the driver says so. Each returns 0, or -1 with zero_error.
typedef struct {
    // starts gathering unit u (ZERO_GATHER_*) into a buffer of its own
    int (*gather_start)(void* be, int u, int how);
    // unit u's gather is done (host), or the compute stream is ordered after it (device)
    int (*gather_wait)(void* be, int u);
    // unit u's gathered copy is no longer needed: its buffer goes back to the pool
    int (*gather_free)(void* be, int u);
    // where unit u's parameters are for its use now: the whole buffer, or its gathered copy
    void* (*params)(void* be, int u);
    // unit u's gradient buffer (padded), accumulated into by the backward
    int (*grad_buf)(void* be, int u, void** out);
    // unit u's gradient is complete for this micro-step: start its reduction
    int (*reduce_start)(void* be, int u);
    // unit u's reduction, the oldest in flight, must complete (or be ordered before what follows)
    int (*reduce_complete)(void* be, int u);
    // optional: gives the collectives in flight a turn at each unit boundary (Open MPI moves
    // a host collective on only while the rank is inside an MPI call)
    int (*poll)(void* be);
    // optional: unit u is one the window ahead will gather later, the next one after the
    // gathers it has just started and after the units hinted before it in this call: an
    // engine whose shards come from a slow tier (NVMe) may start reading it now, so that
    // its gather_start finds it read. Returns 1 to be told the unit after u too (u is
    // being read; a free buffer may take the next), 0 to hear no more until the next
    // fetch, -1 on error. A hint: the schedule may gather another unit first; nothing
    // about collectives may depend on it.
    int (*upcoming)(void* be, int u);
} ZeroMover;

typedef struct {
    ZeroSchedule* sched;      // the engine's
    const ZeroMover* mv;
    void* be;                 // the engine behind mv
    int stage;
    int reduce_local;         // stages 0-1: gradients stay local on the last micro-step too (nothing to reduce)
    int drain_at_end;         // a training pass completes its reductions at its end
    int* ahead;               // (prefetch_depth) the gathers a prefetch starts
    unsigned char* sec_ok;    // (num_units) hpZ: this rank's slice of the unit holds the current parameters; NULL without hpZ
} ZeroPass;

// A driver over sched for the engine be (moved by mv). hpz: the engine keeps hpZ's slices.
int zero_pass_init(ZeroPass* p, ZeroSchedule* sched, const ZeroMover* mv, void* be, int stage, int hpz);

void zero_pass_free(ZeroPass* p);

// The calls (zero3/zero.h's, with its meanings); out: where the unit's parameters or
// gradient are
int zero_pass_begin(ZeroPass* p, int pass, int last_micro);
int zero_pass_fetch(ZeroPass* p, int u, void** out);
int zero_pass_release(ZeroPass* p, int u);
int zero_pass_grad(ZeroPass* p, int u, void** out);
int zero_pass_reduce(ZeroPass* p, int u);
int zero_pass_end(ZeroPass* p);

// the parameters changed (a step, a load): hpZ's slices are stale
void zero_pass_params_changed(ZeroPass* p);

// Walks a training pass and then a forward one as the trainer calls the engine, on the last
// micro-step (begin; per use: fetch, the gradient at the unit's last use of a training
// pass, release, its reduce; end): a unit's gradient is opened at its last use and reduced
// after its release, except the pass's first unit (the input embedding: the encoder's
// backward adds to it last), reduced at the end. What moves is p's mover's: a counting one
// sizes the device engine's pools and gives --estimate the host engine's. The schedule's
// persistent units must be gathered already; the walk leaves none of the others gathered.
int zero_pass_walk(ZeroPass* p);

// For the movers that count instead of moving (zero_pass_walk's users): a call with nothing
// to do (0), and no parameters to show (NULL)
int zero_mover_nothing(void* be, int u);
void* zero_mover_no_params(void* be, int u);

#ifdef __cplusplus
}
#endif

#endif // ZERO3_PASS_H
