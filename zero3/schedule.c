// zero3/schedule.c: the implementation (the interface and its notes: zero3/schedule.h)
#include "zero3/schedule.h"  // this module's types and prototypes
#include <stdlib.h>         // calloc, free
#include <string.h>         // memset, memcpy
#include "zero3/util.h"     // zero_error
#include "zero3/config.h"   // ZeroConfig: the knobs

void zero_schedule_free(ZeroSchedule* s) {
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

int zero_schedule_init(ZeroSchedule* s, const ZeroModel* model, const ZeroPlan* plan, const ZeroConfig* cfg) {
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

int zero_schedule_begin(ZeroSchedule* s, int pass, int last_micro) {
    if (pass != ZERO_PASS_TRAIN && pass != ZERO_PASS_FORWARD) { return zero_error("zero: unknown pass %d", pass); }
    if (s->open) { return zero_error("zero: pass %d begins while pass %d is open (at use %d)", pass, s->pass, s->pos); }
    s->pass = pass;
    s->pos = 0;
    s->last_micro = pass == ZERO_PASS_FORWARD ? 1 : last_micro;
    s->open = 1;
    memset(s->reduced, 0, s->num_units * sizeof(int));
    return 0;
}

int zero_schedule_at(const ZeroSchedule* s, int u, const char* what) {
    if (!s->open) { return zero_error("zero: %s of unit %d outside a pass", what, u); }
    if (s->pos >= s->len[s->pass] || s->unit[s->pass][s->pos] != u) {
        return zero_error("zero: %s of unit %d at use %d of pass %d, but the schedule has unit %d there",
                          what, u, s->pos, s->pass, s->pos < s->len[s->pass] ? s->unit[s->pass][s->pos] : -1);
    }
    return 0;
}

int zero_schedule_release(ZeroSchedule* s, int u) {
    if (zero_schedule_at(s, u, "release") != 0) { return -1; }
    int keep = s->keep[s->pass][s->pos];
    s->pos++;
    return s->gathers && !s->persistent[u] && !keep;
}

int zero_schedule_grad(ZeroSchedule* s, int u) {
    if (!s->open || s->pass != ZERO_PASS_TRAIN) { return zero_error("zero: gradient of unit %d asked for outside a training pass", u); }
    if (u < 0 || u >= s->num_units) { return zero_error("zero: gradient of unit %d of %d", u, s->num_units); }
    if (s->reduced[u]) { return zero_error("zero: gradient of unit %d asked for again after its reduce in this pass", u); }
    s->grad_open[u] = 1;
    return 0;
}

int zero_schedule_reduce(ZeroSchedule* s, int u) {
    if (u < 0 || u >= s->num_units || !s->grad_open[u]) { return zero_error("zero: reduce of unit %d without its gradient", u); }
    s->grad_open[u] = 0;
    s->reduced[u] = 1;
    return 0;
}

int zero_schedule_end(ZeroSchedule* s) {
    if (!s->open) { return zero_error("zero: end of a pass that did not begin"); }
    if (s->pos != s->len[s->pass]) { return zero_error("zero: pass %d ended after %d of its %d uses", s->pass, s->pos, s->len[s->pass]); }
    for (int u = 0; u < s->num_units; u++) {
        if (s->grad_open[u]) { return zero_error("zero: pass ended with unit %d's gradient not reduced", u); }
    }
    s->open = 0;
    return 0;
}

void zero_schedule_started(ZeroSchedule* s, int u) {
    s->state[u] = ZERO_UNIT_IN_FLIGHT;
    s->in_flight += (double)s->numel[u];
}

void zero_schedule_gathered(ZeroSchedule* s, int u) {
    if (s->state[u] == ZERO_UNIT_IN_FLIGHT) { s->in_flight -= (double)s->numel[u]; }
    if (s->state[u] != ZERO_UNIT_LIVE) { s->live += (double)s->numel[u]; }
    s->state[u] = ZERO_UNIT_LIVE;
}

void zero_schedule_freed(ZeroSchedule* s, int u) {
    if (s->state[u] == ZERO_UNIT_IN_FLIGHT) { s->in_flight -= (double)s->numel[u]; }
    if (s->state[u] == ZERO_UNIT_LIVE) { s->live -= (double)s->numel[u]; }
    s->state[u] = ZERO_UNIT_NOT_LIVE;
}

int zero_schedule_prefetch(ZeroSchedule* s, int from, int* out) {
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

int zero_schedule_reduce_full(const ZeroSchedule* s, int u) {
    return s->red_count > 0 && s->red_elems + (double)s->padded[u] > s->reduce_bucket;
}

void zero_schedule_reduce_started(ZeroSchedule* s, int u) {
    s->reducing[(s->red_head + s->red_count) % s->num_units] = u;
    s->red_count++;
    s->red_elems += (double)s->padded[u];
}

int zero_schedule_reduce_oldest(ZeroSchedule* s) {
    if (s->red_count == 0) { return -1; }
    int u = s->reducing[s->red_head];
    s->red_head = (s->red_head + 1) % s->num_units;
    s->red_count--;
    s->red_elems -= (double)s->padded[u];
    return u;
}
