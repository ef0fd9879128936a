// zero3/pass.c: the pass driver (the interface and its notes: zero3/pass.h)
#include <stdlib.h>         // calloc, free
#include <string.h>         // memset
#include "zero3/util.h"     // zero_error
#include "zero3/pass.h"     // this module's types and prototypes

int zero_pass_init(ZeroPass* p, ZeroSchedule* sched, const ZeroMover* mv, void* be, int stage, int hpz) {
    memset(p, 0, sizeof(*p));
    p->sched = sched;
    p->mv = mv;
    p->be = be;
    p->stage = stage;
    p->ahead = (int*)calloc((size_t)sched->prefetch_depth + 1, sizeof(int));
    if (p->ahead == NULL) { return zero_error("zero: out of memory for the pass driver"); }
    if (hpz && (p->sec_ok = (unsigned char*)calloc((size_t)sched->num_units, 1)) == NULL) {
        free(p->ahead);
        p->ahead = NULL;
        return zero_error("zero: out of memory for hpZ's slices");
    }
    return 0;
}

void zero_pass_free(ZeroPass* p) {
    free(p->ahead);
    free(p->sec_ok);
    p->ahead = NULL;
    p->sec_ok = NULL;
}

void zero_pass_params_changed(ZeroPass* p) {
    if (p->sec_ok != NULL) { memset(p->sec_ok, 0, (size_t)p->sched->num_units); }
}

// starts unit u's gather (the schedule counts it in flight): with hpZ from this step's
// slices once the unit's first gather in the step has left them, else from the shards
static int zero_pass_gather(ZeroPass* p, int u) {
    int how = ZERO_GATHER_SHARDS;
    if (p->sec_ok != NULL) {
        how = p->sec_ok[u] ? ZERO_GATHER_SLICES : ZERO_GATHER_SHARDS_KEEP;
        p->sec_ok[u] = 1;  // a unit has one gather at a time: the next one is after this one's wait
    }
    return p->mv->gather_start(p->be, u, how);
}

// starts the gathers the schedule's window ahead asks for, after the use before `from`,
// and tells the mover which units come next (ZeroMover.upcoming): those at or after use
// `from` that are neither gathered nor in flight, in the order the window will gather
// them, while the mover takes them. (Not those hpZ gathers from its slices: their shards
// are not read.)
static int zero_pass_prefetch(ZeroPass* p, int from) {
    const ZeroSchedule* s = p->sched;
    int n = zero_schedule_prefetch(p->sched, from, p->ahead);
    for (int k = 0; k < n; k++) {
        if (zero_pass_gather(p, p->ahead[k]) != 0) { return -1; }
    }
    for (int i = from; p->mv->upcoming != NULL && s->gathers && i < s->len[s->pass]; i++) {
        int u = s->unit[s->pass][i];
        if (s->state[u] != ZERO_UNIT_NOT_LIVE || s->persistent[u] || (p->sec_ok != NULL && p->sec_ok[u])) { continue; }
        int rc = p->mv->upcoming(p->be, u);
        if (rc <= 0) { return rc; }
    }
    return 0;
}

// unit u's gather, if one is in flight, is done
static int zero_pass_gathered(ZeroPass* p, int u) {
    if (p->sched->state[u] == ZERO_UNIT_IN_FLIGHT && p->mv->gather_wait(p->be, u) != 0) { return -1; }
    zero_schedule_gathered(p->sched, u);
    return 0;
}

static int zero_pass_unit_free(ZeroPass* p, int u) {
    if (p->sched->state[u] == ZERO_UNIT_NOT_LIVE) { return 0; }
    if (p->mv->gather_free(p->be, u) != 0) { return -1; }
    zero_schedule_freed(p->sched, u);
    return 0;
}

int zero_pass_begin(ZeroPass* p, int pass, int last_micro) {
    if (zero_schedule_begin(p->sched, pass, last_micro) != 0) { return -1; }
    return zero_pass_prefetch(p, 0);  // the first uses' gathers start before the first fetch
}

int zero_pass_fetch(ZeroPass* p, int u, void** out) {
    ZeroSchedule* s = p->sched;
    if (zero_schedule_at(s, u, "fetch") != 0) { return -1; }
    if (s->gathers) {
        if (s->state[u] == ZERO_UNIT_NOT_LIVE) {
            zero_schedule_started(s, u);
            if (zero_pass_gather(p, u) != 0) { return -1; }
        }
        if (zero_pass_gathered(p, u) != 0 || zero_pass_prefetch(p, s->pos + 1) != 0) { return -1; }
    }
    *out = p->mv->params(p->be, u);
    return 0;
}

int zero_pass_release(ZeroPass* p, int u) {
    int rc = zero_schedule_release(p->sched, u);
    if (rc < 0 || (rc == 1 && zero_pass_unit_free(p, u) != 0)) { return -1; }
    return p->mv->poll != NULL ? p->mv->poll(p->be) : 0;
}

int zero_pass_grad(ZeroPass* p, int u, void** out) {
    if (zero_schedule_grad(p->sched, u) != 0) { return -1; }
    return p->mv->grad_buf(p->be, u, out);
}

int zero_pass_reduce(ZeroPass* p, int u) {
    ZeroSchedule* s = p->sched;
    if (zero_schedule_reduce(s, u) != 0) { return -1; }
    // stages 0-1 accumulate into the whole gradient until the boundary
    if (p->stage < 2 && (!s->last_micro || p->reduce_local)) { return 0; }
    while (zero_schedule_reduce_full(s, u)) {  // the window behind: reduce_bucket_size
        if (p->mv->reduce_complete(p->be, zero_schedule_reduce_oldest(s)) != 0) { return -1; }
    }
    zero_schedule_reduce_started(s, u);
    return p->mv->reduce_start(p->be, u);
}

int zero_pass_end(ZeroPass* p) {
    ZeroSchedule* s = p->sched;
    if (zero_schedule_end(s) != 0) { return -1; }
    // the window behind starts empty in the next pass
    for (int u; (u = zero_schedule_reduce_oldest(s)) >= 0;) {
        if (p->drain_at_end && p->mv->reduce_complete(p->be, u) != 0) { return -1; }
    }
    for (int u = 0; s->gathers && u < s->num_units; u++) {
        if (s->persistent[u]) { continue; }
        // (a prefetch past the end cannot happen, but a gather in flight is waited for)
        if (s->state[u] == ZERO_UNIT_IN_FLIGHT && zero_pass_gathered(p, u) != 0) { return -1; }
        if (zero_pass_unit_free(p, u) != 0) { return -1; }
    }
    return 0;
}

int zero_pass_walk(ZeroPass* p) {
    ZeroSchedule* s = p->sched;
    void* out = NULL;
    int rc = 0;
    for (int pass = 0; pass < ZERO_NUM_PASSES && rc == 0; pass++) {
        const int* unit = s->unit[pass];
        int len = s->len[pass];
        rc = zero_pass_begin(p, pass, 1);
        for (int i = 0; i < len && rc == 0; i++) {
            int u = unit[i], last = pass == ZERO_PASS_TRAIN;  // the unit's last use: its backward
            for (int j = i + 1; j < len && last; j++) { last = unit[j] != u; }
            rc = zero_pass_fetch(p, u, &out);
            if (rc == 0 && last) { rc = zero_pass_grad(p, u, &out); }
            if (rc == 0) { rc = zero_pass_release(p, u); }
            if (rc == 0 && last && u != unit[0]) { rc = zero_pass_reduce(p, u); }
        }
        if (rc == 0 && pass == ZERO_PASS_TRAIN) { rc = zero_pass_reduce(p, unit[0]); }
        if (rc == 0) { rc = zero_pass_end(p); }
    }
    return rc;
}

int zero_mover_nothing(void* be, int u) { (void)be; (void)u; return 0; }

void* zero_mover_no_params(void* be, int u) { (void)be; (void)u; return NULL; }
