/*
 The use schedule: the one order in which the model touches its units, and every
 decision that follows from it. Both engines that gather and reduce (zero3/host.h,
 zero3/device.cuh) walk the same ZeroSchedule through the one pass driver
 (zero3/pass.h), so each knob means the same in both.

 [Note: the decisions depend on the schedule and the configuration only]
 Which unit is gathered when, kept or released, when a reduction must complete before
 the next one starts: nothing here looks at timing, addresses or the rank, only at the
 uses, the unit sizes and the ZeroConfig. So every rank decides alone and still issues
 the same collectives in the same order, and the device engine can size its buffer pools
 at init by walking the pass driver over the schedule once (zero3/pass.h's zero_pass_walk).

 A pass is a training micro-step (ZERO_PASS_TRAIN: the forward, then the backward) or a
 forward alone (ZERO_PASS_FORWARD: validation, sampling). Its cursor `pos` is the use
 being made: the model fetches the unit of use pos, releases it (pos moves on), and in
 the backward opens the unit's gradient (zero_grad) and closes it (zero_reduce). The use
 checks refuse anything else, naming the unit and the use, so that a trainer whose calls
 drift from its schedule stops instead of gathering the wrong unit on some ranks.

 Stage 3 residency. Each unit is NOT_LIVE, IN_FLIGHT (its gather started, not yet waited
 for) or LIVE. A unit is gathered at its fetch, unless a prefetch started it earlier, and
 freed at its release unless it is persistent (fewer elements than
 param_persistence_threshold: gathered once for the whole run) or kept (used again in this
 pass with at most max_reuse_distance elements fetched in between, and it and the largest
 unit in between fit max_live_parameters). Two windows bound the work in flight:
   ahead   gathers started before their use: at the start of a pass and at each fetch,
           up to prefetch_depth of the units next used that are not gathered yet, in order
           of use, while the gathered and in-flight elements stay within
           max_live_parameters and the in-flight ones within prefetch_bucket_size (a
           gather may always start when none is in flight);
   behind  reductions started and not complete: before one that would take them past
           reduce_bucket_size padded elements, the oldest complete (one may always run).
*/
#ifndef ZERO3_SCHEDULE_H
#define ZERO3_SCHEDULE_H

#include "zero3/plan.h"     // ZeroPlan: unit sizes, padded
#include "zero3/zero.h"     // ZeroModel, ZERO_PASS_*
#include <stddef.h>         // size_t

#ifdef __cplusplus
extern "C" {
#endif

enum { ZERO_UNIT_NOT_LIVE, ZERO_UNIT_IN_FLIGHT, ZERO_UNIT_LIVE };

typedef struct {
    // fixed at init
    int num_units;
    size_t* numel;                 // (num_units) real elements: what the budgets count
    size_t* padded;                // (num_units) padded elements: what a reduction moves
    int gathers;                   // stage 3: units are gathered before use and freed after
    int* persistent;               // (num_units) stage 3: gathered once for the whole run
    int len[ZERO_NUM_PASSES];
    int* unit[ZERO_NUM_PASSES];    // (len) the unit of each use
    int* keep[ZERO_NUM_PASSES];    // (len) stage 3: the unit stays gathered after this use
    int prefetch_depth;
    double max_live, max_reuse, prefetch_bucket, reduce_bucket;
    // the cursor
    int pass, pos, last_micro, open;
    int* grad_open;                // (num_units) the gradient is open (zero_grad without zero_reduce yet)
    int* reduced;                  // (num_units) the gradient was reduced in this pass (once per pass)
    // stage 3 residency
    int* state;                    // (num_units) ZERO_UNIT_*
    double live, in_flight;        // elements LIVE and IN_FLIGHT
    // the reductions in flight, oldest first: a ring over the units (each at most once)
    int* reducing;                 // (num_units)
    int red_head, red_count;
    double red_elems;              // their padded elements
} ZeroSchedule;

void zero_schedule_free(ZeroSchedule* s);

// The schedule of `model` over the units of `plan`, with the knobs of cfg. Every unit
// starts NOT_LIVE, the persistent ones too: the engine gathers those at init and marks
// them (zero_schedule_gathered).
int zero_schedule_init(ZeroSchedule* s, const ZeroModel* model, const ZeroPlan* plan, const ZeroConfig* cfg);

// ----------------------------------------------------------------------------
// the cursor and the use checks

int zero_schedule_begin(ZeroSchedule* s, int pass, int last_micro);

// the current use must be of unit u; `what` names the call for the message
int zero_schedule_at(const ZeroSchedule* s, int u, const char* what);

// The release of the current use, which must be of unit u: the cursor moves on. Returns
// 1 when the unit is to be freed now (stage 3, neither persistent nor kept), 0 when it
// stays, -1 out of schedule.
int zero_schedule_release(ZeroSchedule* s, int u);

// The model opens unit u's gradient: in a training pass, before its reduce (asking for it
// again while open is a no-op). A unit's gradient is reduced once per pass: the engines
// hand its buffer to the reduction, which may still be sending it.
int zero_schedule_grad(ZeroSchedule* s, int u);

// ... and closes it: complete for this micro-step
int zero_schedule_reduce(ZeroSchedule* s, int u);

// the pass must have made every use and closed every gradient
int zero_schedule_end(ZeroSchedule* s);

// ----------------------------------------------------------------------------
// stage 3 residency and the window ahead

void zero_schedule_started(ZeroSchedule* s, int u);

void zero_schedule_gathered(ZeroSchedule* s, int u);

void zero_schedule_freed(ZeroSchedule* s, int u);

// The gathers to start now, ahead of their use: up to prefetch_depth units of the uses
// from `from` on (the use after the one just fetched; 0 at the start of a pass) that are
// not gathered, while they fit the live budget and the prefetch bucket. Marks them
// IN_FLIGHT and writes them to out (room for prefetch_depth); returns how many.
int zero_schedule_prefetch(ZeroSchedule* s, int from, int* out);

// ----------------------------------------------------------------------------
// the window behind: reductions in flight

// must the oldest reduction complete before unit u's starts?
int zero_schedule_reduce_full(const ZeroSchedule* s, int u);

void zero_schedule_reduce_started(ZeroSchedule* s, int u);

// takes the oldest reduction in flight off the window: its unit, or -1 when none
int zero_schedule_reduce_oldest(ZeroSchedule* s);

#ifdef __cplusplus
}
#endif

#endif // ZERO3_SCHEDULE_H
