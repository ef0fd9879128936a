// zero3/zero.c: the implementation (the interface and its notes: zero3/zero.h)
#include <stdlib.h>          // calloc, malloc, free
#include <string.h>         // memset, memcpy
#include <limits.h>         // INT_MAX: an MPI count
#include "zero3/util.h"     // zero_error, zero_now_ms: the build's and the fill's times
#include "zero3/zero.h"      // this module's types and prototypes
#include "zero3/engine.h"    // ZeroOps, zero_create: what the engines implement
#include "zero3/watch.h"    // zero_watch_enter/leave: the agreement's collective told to the watchdog

// an engine: its calls and its state, what the tensor calls need, and the phase
// (zero3/zero.h's [Note: phases])
struct Zero {
    const ZeroOps* ops;
    void* impl;
    MPI_Comm comm;          // ZeroInit's: the ranks zero_tensor_get gathers over
    int num_tensors;
    ZeroTensor* tensors;    // (num_tensors) the model's table
    int in_pass;            // between zero_begin and zero_end
    int pass_train_last;    // the pass is a training pass begun with last_micro
    int grads_ready;        // the step's gradient is complete and not yet used by zero_step
    int num_units;
    size_t* unit_numel;     // (num_units) the model's
    // a gathered scope (zero_gather_begin .. zero_gather_end): the units' whole fp32 copies
    float** gathered;       // (num_units) a unit's copy in the open scope, or NULL
    int scope_open, modifier;
    double init_ms, fill_ms; // zero_create's engine build, and its calls of ZeroInit.fill (ZeroStats)
};

int zero_fill_agree(MPI_Comm comm, int failed) {
    int rank = 0, world = 1;
    if (MPI_Comm_rank(comm, &rank) != MPI_SUCCESS || MPI_Comm_size(comm, &world) != MPI_SUCCESS) {
        return zero_error("zero: the MPI communicator is unusable");
    }
    int first = failed ? rank : world;  // the lowest failing rank, or world for none
    zero_watch_enter("initial parameters' check", -1);
    int rc = MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, comm);
    zero_watch_leave();
    if (rc != MPI_SUCCESS) { return zero_error("zero: checking the initial parameters across ranks failed (MPI error %d)", rc); }
    if (first == world) { return 0; }
    char msg[ZERO_ERRMSG_BYTES];
    snprintf(msg, sizeof(msg), "%s", rank == first ? zero_errmsg() : "");
    zero_watch_enter("initial parameters' check", -1);
    rc = MPI_Bcast(msg, (int)sizeof(msg), MPI_CHAR, first, comm);
    zero_watch_leave();
    if (rc != MPI_SUCCESS) { return zero_error("zero: rank %d could not make its initial parameters", first); }
    msg[sizeof(msg) - 1] = '\0';
    return zero_error("%s (rank %d's shard)", msg, first);
}

void zero_stats_add_traffic(ZeroStats* s, const double bytes[ZERO_NUM_COLLECTIVES],
                                          const double link_bytes[ZERO_NUM_LINKS][ZERO_NUM_COLLECTIVES]) {
    for (int k = 0; k < ZERO_NUM_COLLECTIVES; k++) {
        s->comm_bytes[k] += bytes[k];
        for (int l = 0; l < ZERO_NUM_LINKS; l++) { s->link_bytes[l][k] += link_bytes[l][k]; }
    }
}

int zero_begin(Zero* z, int pass, int last_micro) {
    if (z->scope_open) { return zero_error("zero: a pass begun inside a gathered scope (zero_gather_end first)"); }
    z->in_pass = 1;
    z->pass_train_last = pass == ZERO_PASS_TRAIN && last_micro;
    if (pass == ZERO_PASS_TRAIN) { z->grads_ready = 0; }  // accumulating again: incomplete
    return z->ops->begin(z->impl, pass, last_micro);
}

int zero_fetch(Zero* z, int unit, void** params) { return z->ops->fetch(z->impl, unit, params); }

int zero_release(Zero* z, int unit) { return z->ops->release(z->impl, unit); }

int zero_grad(Zero* z, int unit, void** grad) { return z->ops->grad(z->impl, unit, grad); }

int zero_reduce(Zero* z, int unit) { return z->ops->reduce(z->impl, unit); }

int zero_end(Zero* z) {
    if (z->ops->end(z->impl) != 0) { return -1; }
    z->in_pass = 0;
    z->grads_ready = z->grads_ready || z->pass_train_last;
    return 0;
}

int zero_step(Zero* z, const ZeroStep* step) {
    if (z->scope_open) { return zero_error("zero: an optimizer step inside a gathered scope (zero_gather_end first)"); }
    z->grads_ready = 0;  // used, then cleared (or discarded by a skip)
    return z->ops->step(z->impl, step);
}

int zero_flush(Zero* z) { return z->ops->flush(z->impl); }

int zero_stats(Zero* z, ZeroStats* out) {
    memset(out, 0, sizeof(*out));
    int rc = z->ops->stats(z->impl, out);
    out->init_ms = z->init_ms;
    out->fill_ms = z->fill_ms;
    return rc;
}

int zero_save(Zero* z, FILE* fp) { return z->ops->save(z->impl, fp); }

int zero_load(Zero* z, FILE* fp) { return z->ops->load(z->impl, fp); }

static const char* const zero_state_names[ZERO_NUM_STATES] = {"the master", "m", "v", "the gradient"};

// 0 when `what` may be read now (zero3/zero.h's [Note: phases]), else -1 saying why
static int zero_state_phase(const Zero* z, int what) {
    if (what < 0 || what >= ZERO_NUM_STATES) { return zero_error("zero: no state %d (the master, m, v or the gradient)", what); }
    if (z->in_pass) {
        return zero_error("zero: %s read during a pass (between zero_begin and zero_end): it is read between passes",
                          zero_state_names[what]);
    }
    if (what == ZERO_STATE_GRAD && !z->grads_ready) {
        return zero_error("zero: the gradient read outside its phase: it is complete only between the last micro-step's "
                          "backward and the optimizer step");
    }
    return 0;
}

int zero_state_shard(Zero* z, int what, int unit, size_t* begin, size_t* n, float* out) {
    if (what < 0 || what >= ZERO_NUM_STATES) { return zero_error("zero: no state %d (the master, m, v or the gradient)", what); }
    if (out != NULL && zero_state_phase(z, what) != 0) { return -1; }
    return z->ops->state_shard(z->impl, what, unit, begin, n, out);
}

// tensor t's place: unit *u, [*lo, *hi) of it; or -1 for no such tensor
static int zero_tensor_at(const Zero* z, int t, int* u, size_t* lo, size_t* hi) {
    if (t < 0 || t >= z->num_tensors) { return zero_error("zero: no tensor %d (the model has %d)", t, z->num_tensors); }
    *u = z->tensors[t].unit;
    *lo = z->tensors[t].offset;
    *hi = *lo + z->tensors[t].size;
    return 0;
}

// [lo, hi) of unit u: this rank's part of it, [*begin, *begin + *n) of the range, into out
// unless out is NULL
static int zero_range_local(Zero* z, int what, int u, size_t lo, size_t hi, size_t* begin, size_t* n, float* out) {
    size_t rb, rn;
    if (zero_state_shard(z, what, u, &rb, &rn, NULL) != 0) { return -1; }
    size_t a = rb > lo ? rb : lo, b = rb + rn < hi ? rb + rn : hi;  // this rank's range of the unit, within [lo, hi)
    *begin = a < b ? a - lo : 0;
    *n = a < b ? b - a : 0;
    if (out == NULL || *n == 0) { return out == NULL ? 0 : zero_state_phase(z, what); }  // (no part: the phase still holds)
    float* range = (float*)malloc(rn * sizeof(float));
    if (range == NULL) { return zero_error("zero: out of memory for unit %d's range", u); }
    int rc = zero_state_shard(z, what, u, &rb, &rn, range);
    if (rc == 0) { memcpy(out, range + (a - rb), *n * sizeof(float)); }
    free(range);
    return rc;
}

int zero_tensor_local(Zero* z, int what, int t, size_t* begin, size_t* n, float* out) {
    int u = 0;
    size_t lo = 0, hi = 0;
    if (zero_tensor_at(z, t, &u, &lo, &hi) != 0) { return -1; }
    return zero_range_local(z, what, u, lo, hi, begin, n, out);
}

// [lo, hi) of unit u whole into out on every rank, from the ranks' parts (collective)
static int zero_range_get(Zero* z, int what, int u, size_t lo, size_t hi, float* out) {
    int rank = 0, world = 1;
    size_t b = 0, n = 0;
    if (hi - lo > (size_t)INT_MAX) { return zero_error("zero: %zu elements of unit %d are more than one MPI gather takes", hi - lo, u); }
    if (MPI_Comm_rank(z->comm, &rank) != MPI_SUCCESS || MPI_Comm_size(z->comm, &world) != MPI_SUCCESS) {
        return zero_error("zero: the MPI communicator is unusable");
    }
    // this rank's part; every rank must reach the gather, so they first agree that all read theirs
    float* mine = NULL;
    int rc = zero_range_local(z, what, u, lo, hi, &b, &n, NULL);
    if (rc == 0 && (mine = (float*)malloc((n > 0 ? n : 1) * sizeof(float))) == NULL) { rc = zero_error("zero: out of memory for a tensor's part"); }
    if (rc == 0) { rc = zero_range_local(z, what, u, lo, hi, &b, &n, mine); }
    long long* parts = (long long*)malloc((size_t)world * 2 * sizeof(long long));
    int* counts = (int*)malloc((size_t)world * 2 * sizeof(int));
    if (rc == 0 && (parts == NULL || counts == NULL)) { rc = zero_error("zero: out of memory for the ranks' parts"); }
    if (zero_fill_agree(z->comm, rc != 0) != 0) { rc = -1; goto done; }
    long long me[2] = {(long long)b, (long long)n};
    zero_watch_enter("gather of a whole tensor", -1);
    rc = MPI_Allgather(me, 2, MPI_LONG_LONG, parts, 2, MPI_LONG_LONG, z->comm);
    zero_watch_leave();
    if (rc != MPI_SUCCESS) { rc = zero_error("zero: gathering the ranks' parts of unit %d failed (MPI error %d)", u, rc); goto done; }
    // each part once: replicas (MiCS's groups) hold the same ranges; shards tile the tensor
    int* displs = counts + world;
    long long covered = 0;
    for (int r = 0; r < world; r++) {
        int again = 0;
        for (int q = 0; q < r && !again; q++) { again = parts[2 * q] == parts[2 * r] && parts[2 * q + 1] == parts[2 * r + 1]; }
        counts[r] = again ? 0 : (int)parts[2 * r + 1];
        displs[r] = (int)parts[2 * r];
        covered += counts[r];
    }
    if (covered != (long long)(hi - lo)) {
        rc = zero_error("zero: the ranks' parts of unit %d's [%zu, %zu) cover %lld of its elements", u, lo, hi, covered);
        goto done;
    }
    zero_watch_enter("gather of a whole tensor", -1);
    rc = MPI_Allgatherv(mine, counts[rank], MPI_FLOAT, out, counts, displs, MPI_FLOAT, z->comm);
    zero_watch_leave();
    if (rc != MPI_SUCCESS) { rc = zero_error("zero: gathering unit %d failed (MPI error %d)", u, rc); }
done:
    free(mine);
    free(parts);
    free(counts);
    return rc == 0 ? 0 : -1;
}

int zero_tensor_get(Zero* z, int what, int t, float* out) {
    int u = 0;
    size_t lo = 0, hi = 0;
    if (zero_tensor_at(z, t, &u, &lo, &hi) != 0) { return -1; }
    return zero_range_get(z, what, u, lo, hi, out);
}

// writes [begin, begin + n) of unit u's `what` (the part this rank holds), then, once every
// rank has, brings what is made from it up to date (collective)
static int zero_state_change(Zero* z, int what, int u, size_t begin, size_t n, const float* in) {
    int rc = zero_state_phase(z, what);
    if (rc == 0) { rc = z->ops->state_write(z->impl, what, u, begin, n, in); }
    if (zero_fill_agree(z->comm, rc != 0) != 0) { return -1; }  // (no rank left in the commit's collectives)
    return z->ops->state_commit(z->impl, what, u);
}

// (a `what` that names no state is refused by zero_state_change's phase check, and by
// zero_range_local's zero_state_shard)
int zero_tensor_set(Zero* z, int what, int t, const float* in) {
    int u = 0;
    size_t lo = 0, hi = 0;
    if (zero_tensor_at(z, t, &u, &lo, &hi) != 0) { return -1; }
    return zero_state_change(z, what, u, lo, hi - lo, in);
}

int zero_tensor_set_local(Zero* z, int what, int t, const float* in) {
    int u = 0;
    size_t lo = 0, hi = 0, b = 0, n = 0;
    if (zero_tensor_at(z, t, &u, &lo, &hi) != 0 || zero_range_local(z, what, u, lo, hi, &b, &n, NULL) != 0) { return -1; }
    return zero_state_change(z, what, u, lo + b, n, in);
}

int zero_gather_begin(Zero* z, const int* units, int n, int modifier, float** params) {
    int world = 1, rc = 0;
    MPI_Comm_size(z->comm, &world);
    if (z->scope_open) { return zero_error("zero: a gathered scope is open already (zero_gather_end first)"); }
    if (modifier < -1 || modifier >= world) { return zero_error("zero: modifier rank %d of %d ranks (-1: none)", modifier, world); }
    for (int i = 0; i < n && rc == 0; i++) {
        int u = units[i];
        if (u < 0 || u >= z->num_units) { rc = zero_error("zero: no unit %d (the model has %d)", u, z->num_units); break; }
        if (z->gathered[u] != NULL) { rc = zero_error("zero: unit %d named twice in one gathered scope", u); break; }
        z->gathered[u] = (float*)malloc(z->unit_numel[u] * sizeof(float) + 1);
        rc = z->gathered[u] == NULL ? zero_error("zero: out of memory for unit %d's gathered copy", u)
           : zero_range_get(z, ZERO_STATE_MASTER, u, 0, z->unit_numel[u], z->gathered[u]);
        params[i] = z->gathered[u];
    }
    if (rc != 0) {  // no scope: the copies made so far go (a unit refused here may be named again)
        for (int u = 0; u < z->num_units; u++) { free(z->gathered[u]); z->gathered[u] = NULL; }
        return -1;
    }
    z->scope_open = 1;
    z->modifier = modifier;
    return 0;
}

int zero_gather_end(Zero* z) {
    if (!z->scope_open) { return zero_error("zero: zero_gather_end without an open gathered scope"); }
    int rc = 0;
    z->scope_open = 0;  // (zero_state_change reads the master's phase)
    for (int u = 0; u < z->num_units; u++) {
        if (z->gathered[u] == NULL) { continue; }
        if (rc == 0 && z->modifier >= 0) {  // the modifier's copy to every rank, then into the states
            if (z->unit_numel[u] > (size_t)INT_MAX) { rc = zero_error("zero: unit %d is larger than one MPI broadcast takes", u); }
            zero_watch_enter("broadcast of a gathered scope's changes", u);
            if (rc == 0 && MPI_Bcast(z->gathered[u], (int)z->unit_numel[u], MPI_FLOAT, z->modifier, z->comm) != MPI_SUCCESS) {
                rc = zero_error("zero: broadcasting unit %d's changes from rank %d failed", u, z->modifier);
            }
            zero_watch_leave();
            if (rc == 0) { rc = zero_state_change(z, ZERO_STATE_MASTER, u, 0, z->unit_numel[u], z->gathered[u]); }
        }
        free(z->gathered[u]);
        z->gathered[u] = NULL;
    }
    return rc;
}

int zero_empty_cache(Zero* z, double* freed) {
    *freed = 0.0;
    if (z->in_pass) { return zero_error("zero: the cache emptied during a pass (between zero_begin and zero_end)"); }
    if (z->scope_open) { return zero_error("zero: the cache emptied inside a gathered scope (zero_gather_end first)"); }
    return z->ops->empty_cache(z->impl, freed);
}

int zero_trace_begin(Zero* z, double host_start_ms) {
    return z->ops->trace_begin != NULL ? z->ops->trace_begin(z->impl, host_start_ms) : 0;
}

int zero_trace_end(Zero* z, const ZeroTraceSpan** spans, int* n) {
    *spans = NULL;
    *n = 0;
    return z->ops->trace_end != NULL ? z->ops->trace_end(z->impl, spans, n) : 0;
}

const char* zero_name(const Zero* z) { return z->ops->name; }

// the caller's fill, timed: zero_create hands the engine this in its place
typedef struct { ZeroFillFn fill; void* ctx; double ms; } ZeroFillTimed;
static int zero_fill_timed(void* ctx, int unit, size_t begin, size_t n, float* out) {
    ZeroFillTimed* f = (ZeroFillTimed*)ctx;
    double t0 = zero_now_ms();
    int rc = f->fill(f->ctx, unit, begin, n, out);
    f->ms += zero_now_ms() - t0;
    return rc;
}

int zero_create(Zero** z, const ZeroOps* ops, void* impl, int (*init)(void* impl, const ZeroInit* in),
                const ZeroInit* in) {
    *z = NULL;
    Zero* made = (Zero*)calloc(1, sizeof(Zero));
    if (impl == NULL || made == NULL) {
        free(impl);
        free(made);
        return zero_error("zero: out of memory for the %s engine", ops->name);
    }
    double t0 = zero_now_ms();
    ZeroFillTimed timed = {in->fill, in->fill_ctx, 0.0};
    ZeroInit own = *in;
    if (in->fill != NULL) { own.fill = zero_fill_timed; own.fill_ctx = &timed; }
    if (init(impl, &own) != 0) {
        ops->free(impl);
        free(made);
        return -1;
    }
    made->init_ms = zero_now_ms() - t0;
    made->fill_ms = timed.ms;
    made->ops = ops;
    made->impl = impl;
    made->comm = in->comm;
    made->num_tensors = in->model->num_tensors;
    made->tensors = (ZeroTensor*)malloc((size_t)(made->num_tensors > 0 ? made->num_tensors : 1) * sizeof(ZeroTensor));
    if (made->tensors == NULL) {
        zero_free(&made);
        return zero_error("zero: out of memory for the tensor table");
    }
    memcpy(made->tensors, in->model->tensors, (size_t)made->num_tensors * sizeof(ZeroTensor));
    made->num_units = in->model->num_units;
    made->unit_numel = (size_t*)malloc((size_t)(made->num_units > 0 ? made->num_units : 1) * sizeof(size_t));
    made->gathered = (float**)calloc((size_t)(made->num_units > 0 ? made->num_units : 1), sizeof(float*));
    if (made->unit_numel == NULL || made->gathered == NULL) {
        zero_free(&made);
        return zero_error("zero: out of memory for the unit table");
    }
    memcpy(made->unit_numel, in->model->unit_numel, (size_t)made->num_units * sizeof(size_t));
    *z = made;
    return 0;
}

void* zero_engine_state(const Zero* z) { return z->impl; }

void zero_free(Zero** z) {
    if (*z == NULL) { return; }
    if ((*z)->ops != NULL && (*z)->impl != NULL) { (*z)->ops->free((*z)->impl); }
    free((*z)->tensors);
    for (int u = 0; (*z)->gathered != NULL && u < (*z)->num_units; u++) { free((*z)->gathered[u]); }
    free((*z)->gathered);
    free((*z)->unit_numel);
    free(*z);
    *z = NULL;
}
