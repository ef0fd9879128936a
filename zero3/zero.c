// zero3/zero.c: the implementation (the interface and its notes: zero3/zero.h)
#include <stdlib.h>          // calloc, free
#include <string.h>         // memset
#include "zero3/util.h"     // zero_error
#include "zero3/zero.h"      // this module's types and prototypes
#include "zero3/engine.h"    // ZeroOps, zero_create: what the engines implement
#include "zero3/watch.h"    // zero_watch_enter/leave: the agreement's collective told to the watchdog

// an engine: its calls and its state
struct Zero {
    const ZeroOps* ops;
    void* impl;
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

int zero_begin(Zero* z, int pass, int last_micro) { return z->ops->begin(z->impl, pass, last_micro); }

int zero_fetch(Zero* z, int unit, void** params) { return z->ops->fetch(z->impl, unit, params); }

int zero_release(Zero* z, int unit) { return z->ops->release(z->impl, unit); }

int zero_grad(Zero* z, int unit, void** grad) { return z->ops->grad(z->impl, unit, grad); }

int zero_reduce(Zero* z, int unit) { return z->ops->reduce(z->impl, unit); }

int zero_end(Zero* z) { return z->ops->end(z->impl); }

int zero_step(Zero* z, const ZeroStep* step) { return z->ops->step(z->impl, step); }

int zero_flush(Zero* z) { return z->ops->flush(z->impl); }

int zero_stats(Zero* z, ZeroStats* out) {
    memset(out, 0, sizeof(*out));
    return z->ops->stats(z->impl, out);
}

int zero_save(Zero* z, FILE* fp) { return z->ops->save(z->impl, fp); }

int zero_load(Zero* z, FILE* fp) { return z->ops->load(z->impl, fp); }

int zero_state_shard(Zero* z, int what, int unit, size_t* begin, size_t* n, float* out) {
    if (what < ZERO_STATE_MASTER || what > ZERO_STATE_V) { return zero_error("zero: no state %d (the master, m or v)", what); }
    return z->ops->state_shard(z->impl, what, unit, begin, n, out);
}

const char* zero_name(const Zero* z) { return z->ops->name; }

int zero_create(Zero** z, const ZeroOps* ops, void* impl, int (*init)(void* impl, const ZeroInit* in),
                const ZeroInit* in) {
    *z = NULL;
    Zero* made = (Zero*)calloc(1, sizeof(Zero));
    if (impl == NULL || made == NULL) {
        free(impl);
        free(made);
        return zero_error("zero: out of memory for the %s engine", ops->name);
    }
    if (init(impl, in) != 0) {
        ops->free(impl);
        free(made);
        return -1;
    }
    made->ops = ops;
    made->impl = impl;
    *z = made;
    return 0;
}

void* zero_engine_state(const Zero* z) { return z->impl; }

void zero_free(Zero** z) {
    if (*z == NULL) { return; }
    if ((*z)->ops != NULL && (*z)->impl != NULL) { (*z)->ops->free((*z)->impl); }
    free(*z);
    *z = NULL;
}
