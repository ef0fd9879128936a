/*
 The use schedule: the one order in which the model touches its units, and every
 decision that follows from it. Both engines that gather and reduce (zero3/host.h,
 zero3/device.cuh) walk the same ZeroSchedule, so each knob means the same in both.

 [Note: the decisions depend on the schedule and the configuration only]
 Which unit is gathered when, kept or released, when a reduction must complete before
 the next one starts: nothing here looks at timing, addresses or the rank, only at the
 uses, the unit sizes and the ZeroConfig. So every rank decides alone and still issues
 the same collectives in the same order, and the device engine can size its buffer pools
 at init by walking the schedule once (zero_schedule_peak).

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

#include <stdlib.h>         // calloc, free
#include <string.h>         // memset, memcpy
#include "zero3/util.h"     // zero_error
#include "zero3/plan.h"     // ZeroPlan: unit sizes, padded
#include "zero3/config.h"   // ZeroConfig: the knobs
#include "zero3/zero.h"     // ZeroModel, ZERO_PASS_*

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

static void zero_schedule_free(ZeroSchedule* s) {
    free(s->numel); free(s->padded); free(s->persistent); free(s->grad_open); free(s->reduced); free(s->state); free(s->reducing);
    for (int k = 0; k < ZERO_NUM_PASSES; k++) { free(s->unit[k]); free(s->keep[k]); }
    memset(s, 0, sizeof(*s));
}

// keep[i] for the uses of one pass: see the header (the reuse rule, as DeepSpeed measures
// the reuse distance: the elements fetched between two uses of a unit)
static void zero_schedule_keep(ZeroSchedule* s, int pass) {
    const int* unit = s->unit[pass];
    int len = s->len[pass];
    for (int i = 0; i < len; i++) {
        s->keep[pass][i] = 0;
        int u = unit[i];
        int j = i + 1;
        while (j < len && unit[j] != u) { j++; }
        if (j == len) { continue; }
        double dist = 0, biggest = 0;
        for (int k = i + 1; k < j; k++) {
            double n = (double)s->numel[unit[k]];
            dist += n;
            if (n > biggest) { biggest = n; }
        }
        s->keep[pass][i] = dist <= s->max_reuse && (double)s->numel[u] + biggest <= s->max_live;
    }
}

// The schedule of `model` over the units of `plan`, with the knobs of cfg. Every unit
// starts NOT_LIVE, the persistent ones too: the engine gathers those at init and marks
// them (zero_schedule_gathered).
static int zero_schedule_init(ZeroSchedule* s, const ZeroModel* model, const ZeroPlan* plan, const ZeroConfig* cfg) {
    memset(s, 0, sizeof(*s));
    int nu = plan->num_units;
    s->num_units = nu;
    s->numel = (size_t*)calloc(nu, sizeof(size_t));
    s->padded = (size_t*)calloc(nu, sizeof(size_t));
    s->persistent = (int*)calloc(nu, sizeof(int));
    s->grad_open = (int*)calloc(nu, sizeof(int));
    s->reduced = (int*)calloc(nu, sizeof(int));
    s->state = (int*)calloc(nu, sizeof(int));
    s->reducing = (int*)calloc(nu, sizeof(int));
    if (!s->numel || !s->padded || !s->persistent || !s->grad_open || !s->reduced || !s->state || !s->reducing) {
        zero_schedule_free(s);
        return zero_error("zero: out of memory for the schedule");
    }
    s->gathers = cfg->stage == 3;
    s->prefetch_depth = cfg->prefetch_depth;
    s->max_live = (double)cfg->max_live_parameters;
    s->max_reuse = (double)cfg->max_reuse_distance;
    s->prefetch_bucket = (double)cfg->prefetch_bucket_size;
    s->reduce_bucket = (double)cfg->reduce_bucket_size;
    for (int u = 0; u < nu; u++) {
        s->numel[u] = plan->units[u].numel;
        s->padded[u] = plan->units[u].padded;
        s->persistent[u] = s->gathers && (long long)s->numel[u] < cfg->param_persistence_threshold;
    }
    for (int k = 0; k < ZERO_NUM_PASSES; k++) {
        int len = model->num_uses[k];
        s->len[k] = len;
        s->unit[k] = (int*)malloc((len > 0 ? len : 1) * sizeof(int));
        s->keep[k] = (int*)calloc(len > 0 ? len : 1, sizeof(int));
        if (s->unit[k] == NULL || s->keep[k] == NULL) {
            zero_schedule_free(s);
            return zero_error("zero: out of memory for the schedule");
        }
        for (int i = 0; i < len; i++) {
            int u = model->uses[k][i];
            if (u < 0 || u >= nu) {
                zero_schedule_free(s);
                return zero_error("zero: use %d of pass %d names unit %d of %d", i, k, u, nu);
            }
            s->unit[k][i] = u;
        }
        zero_schedule_keep(s, k);
    }
    s->pass = ZERO_PASS_FORWARD;
    return 0;
}

// ----------------------------------------------------------------------------
// the cursor and the use checks

static int zero_schedule_begin(ZeroSchedule* s, int pass, int last_micro) {
    if (pass != ZERO_PASS_TRAIN && pass != ZERO_PASS_FORWARD) { return zero_error("zero: unknown pass %d", pass); }
    if (s->open) { return zero_error("zero: pass %d begins while pass %d is open (at use %d)", pass, s->pass, s->pos); }
    s->pass = pass;
    s->pos = 0;
    s->last_micro = pass == ZERO_PASS_FORWARD ? 1 : last_micro;
    s->open = 1;
    memset(s->reduced, 0, s->num_units * sizeof(int));
    return 0;
}

// the current use must be of unit u; `what` names the call for the message
static int zero_schedule_at(const ZeroSchedule* s, int u, const char* what) {
    if (!s->open) { return zero_error("zero: %s of unit %d outside a pass", what, u); }
    if (s->pos >= s->len[s->pass] || s->unit[s->pass][s->pos] != u) {
        return zero_error("zero: %s of unit %d at use %d of pass %d, but the schedule has unit %d there",
                          what, u, s->pos, s->pass, s->pos < s->len[s->pass] ? s->unit[s->pass][s->pos] : -1);
    }
    return 0;
}

// The release of the current use, which must be of unit u: the cursor moves on. Returns
// 1 when the unit is to be freed now (stage 3, neither persistent nor kept), 0 when it
// stays, -1 out of schedule.
static int zero_schedule_release(ZeroSchedule* s, int u) {
    if (zero_schedule_at(s, u, "release") != 0) { return -1; }
    int keep = s->keep[s->pass][s->pos];
    s->pos++;
    return s->gathers && !s->persistent[u] && !keep;
}

// The model opens unit u's gradient: in a training pass, before its reduce (asking for it
// again while open is a no-op). A unit's gradient is reduced once per pass: the engines
// hand its buffer to the reduction, which may still be sending it.
static int zero_schedule_grad(ZeroSchedule* s, int u) {
    if (!s->open || s->pass != ZERO_PASS_TRAIN) { return zero_error("zero: gradient of unit %d asked for outside a training pass", u); }
    if (u < 0 || u >= s->num_units) { return zero_error("zero: gradient of unit %d of %d", u, s->num_units); }
    if (s->reduced[u]) { return zero_error("zero: gradient of unit %d asked for again after its reduce in this pass", u); }
    s->grad_open[u] = 1;
    return 0;
}

// ... and closes it: complete for this micro-step
static int zero_schedule_reduce(ZeroSchedule* s, int u) {
    if (u < 0 || u >= s->num_units || !s->grad_open[u]) { return zero_error("zero: reduce of unit %d without its gradient", u); }
    s->grad_open[u] = 0;
    s->reduced[u] = 1;
    return 0;
}

// the pass must have made every use and closed every gradient
static int zero_schedule_end(ZeroSchedule* s) {
    if (!s->open) { return zero_error("zero: end of a pass that did not begin"); }
    if (s->pos != s->len[s->pass]) { return zero_error("zero: pass %d ended after %d of its %d uses", s->pass, s->pos, s->len[s->pass]); }
    for (int u = 0; u < s->num_units; u++) {
        if (s->grad_open[u]) { return zero_error("zero: pass ended with unit %d's gradient not reduced", u); }
    }
    s->open = 0;
    return 0;
}

// ----------------------------------------------------------------------------
// stage 3 residency and the window ahead

static void zero_schedule_started(ZeroSchedule* s, int u) {
    s->state[u] = ZERO_UNIT_IN_FLIGHT;
    s->in_flight += (double)s->numel[u];
}

static void zero_schedule_gathered(ZeroSchedule* s, int u) {
    if (s->state[u] == ZERO_UNIT_IN_FLIGHT) { s->in_flight -= (double)s->numel[u]; }
    if (s->state[u] != ZERO_UNIT_LIVE) { s->live += (double)s->numel[u]; }
    s->state[u] = ZERO_UNIT_LIVE;
}

static void zero_schedule_freed(ZeroSchedule* s, int u) {
    if (s->state[u] == ZERO_UNIT_IN_FLIGHT) { s->in_flight -= (double)s->numel[u]; }
    if (s->state[u] == ZERO_UNIT_LIVE) { s->live -= (double)s->numel[u]; }
    s->state[u] = ZERO_UNIT_NOT_LIVE;
}

// The gathers to start now, ahead of their use: up to prefetch_depth units of the uses
// from `from` on (the use after the one just fetched; 0 at the start of a pass) that are
// not gathered, while they fit the live budget and the prefetch bucket. Marks them
// IN_FLIGHT and writes them to out (room for prefetch_depth); returns how many.
static int zero_schedule_prefetch(ZeroSchedule* s, int from, int* out) {
    int n = 0;
    if (!s->gathers) { return 0; }
    const int* unit = s->unit[s->pass];
    for (int i = from; i < s->len[s->pass] && n < s->prefetch_depth; i++) {
        int u = unit[i];
        if (s->state[u] != ZERO_UNIT_NOT_LIVE) { continue; }
        double e = (double)s->numel[u];
        if (s->live + s->in_flight + e > s->max_live) { break; }
        if (s->in_flight > 0 && s->in_flight + e > s->prefetch_bucket) { break; }
        zero_schedule_started(s, u);
        out[n++] = u;
    }
    return n;
}

// ----------------------------------------------------------------------------
// the window behind: reductions in flight

// must the oldest reduction complete before unit u's starts?
static int zero_schedule_reduce_full(const ZeroSchedule* s, int u) {
    return s->red_count > 0 && s->red_elems + (double)s->padded[u] > s->reduce_bucket;
}

static void zero_schedule_reduce_started(ZeroSchedule* s, int u) {
    s->reducing[(s->red_head + s->red_count) % s->num_units] = u;
    s->red_count++;
    s->red_elems += (double)s->padded[u];
}

// takes the oldest reduction in flight off the window: its unit, or -1 when none
static int zero_schedule_reduce_oldest(ZeroSchedule* s) {
    if (s->red_count == 0) { return -1; }
    int u = s->reducing[s->red_head];
    s->red_head = (s->red_head + 1) % s->num_units;
    s->red_count--;
    s->red_elems -= (double)s->padded[u];
    return u;
}

// ----------------------------------------------------------------------------
// pool sizes

// non-persistent units of `padded` elements gathered or being gathered now
static int zero_schedule_taken(const ZeroSchedule* s, size_t padded) {
    int n = 0;
    for (int u = 0; u < s->num_units; u++) {
        n += !s->persistent[u] && s->padded[u] == padded && s->state[u] != ZERO_UNIT_NOT_LIVE;
    }
    return n;
}

// The most non-persistent units of `padded` elements gathered (or being gathered) at once
// in any pass, found by walking both passes as an engine does (begin, then per use:
// fetch, prefetch, release; end): what a pool of gather buffers of that size must hold.
// Leaves the schedule as it found it. -1 when out of memory.
static int zero_schedule_peak(ZeroSchedule* s, size_t padded) {
    if (!s->gathers) { return 0; }
    int* saved = (int*)malloc(s->num_units * sizeof(int));
    int* ahead = (int*)malloc((s->prefetch_depth + 1) * sizeof(int));
    if (saved == NULL || ahead == NULL) { free(saved); free(ahead); return -1; }
    memcpy(saved, s->state, s->num_units * sizeof(int));
    double live = s->live, in_flight = s->in_flight;
    int peak = 0, pass0 = s->pass;
    for (int pass = 0; pass < ZERO_NUM_PASSES; pass++) {
        s->pass = pass;
        zero_schedule_prefetch(s, 0, ahead);
        for (int i = 0; i < s->len[pass]; i++) {
            int u = s->unit[pass][i];
            if (s->state[u] == ZERO_UNIT_NOT_LIVE) { zero_schedule_started(s, u); }
            int t = zero_schedule_taken(s, padded);
            peak = t > peak ? t : peak;
            zero_schedule_gathered(s, u);
            zero_schedule_prefetch(s, i + 1, ahead);
            t = zero_schedule_taken(s, padded);
            peak = t > peak ? t : peak;
            if (!s->persistent[u] && !s->keep[pass][i]) { zero_schedule_freed(s, u); }
        }
        for (int u = 0; u < s->num_units; u++) {
            if (!s->persistent[u]) { zero_schedule_freed(s, u); }
        }
    }
    memcpy(s->state, saved, s->num_units * sizeof(int));
    s->live = live;
    s->in_flight = in_flight;
    s->pass = pass0;
    free(saved);
    free(ahead);
    return peak;
}

#endif // ZERO3_SCHEDULE_H
