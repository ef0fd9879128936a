/*
 The collectives of the ZeRO engine, over MPI on host memory.

 Everything the engine sends goes through these functions, so that the MPI details
 (communicator, datatypes, chunking, error handling) stay here and an NCCL version can
 later sit behind the same names. zero3/ knows nothing about GPT-2: it moves floats.

 Communicator: zero_comm_init duplicates the communicator it is given, so the engine's
 collectives can never match a collective of the caller, and sets MPI_ERRORS_RETURN on
 the duplicate so that a failure comes back as -1 plus one zero_error line naming the
 collective and the MPI error string, instead of aborting the job.

 Blocking and nonblocking: each float collective takes a ZeroRequest*. NULL means
 blocking. Otherwise the collective is started and must be completed later with
 zero_comm_wait (or zero_comm_test until done) before its buffers are read or written.
 Rules of MPI that the caller must follow:
   - every rank starts the engine's collectives in the same order (completion may be in
     any order, and several may be outstanding at once);
   - a request must not be restarted while it is still in flight.
 The blocking variants are the nonblocking ones followed by a wait, on purpose: MPI may
 pick a different algorithm (and so a different floating-point summation order) for
 MPI_Reduce_scatter_block than for MPI_Ireduce_scatter_block, and the engine must get
 bit-identical results whichever variant a code path uses.

 Progress (important for overlap): Open MPI 4.1 has no asynchronous progress thread for
 host-memory nonblocking collectives. A started collective advances only while this
 rank is inside some MPI call. To overlap a prefetch with compute, call zero_comm_test
 now and then (e.g. between layers); otherwise most of the transfer happens inside
 zero_comm_wait.

 Determinism: reductions are sums of floats in an order fixed by the MPI algorithm,
 which Open MPI chooses from the world size, the count and the datatype only. The same
 inputs at the same world size therefore give bit-identical results run after run;
 a different world size may round differently.

 Large counts: MPI counts are int. Counts are split into chunks of at most
 ZERO_COMM_CHUNK elements (default 2^30; a test may #define a tiny value before the
 include to exercise the chunked path). One nonblocking collective holds at most 16
 chunk requests, so a per-rank block (all-gather, reduce-scatter) or an all-reduce
 buffer may have at most 16 * ZERO_COMM_CHUNK elements (64 GiB of floats by default);
 more is refused with an error. Chunked layouts:
   - all-reduce: plain contiguous pieces.
   - all-gather / reduce-scatter: the buffer is world blocks of `count` floats, block r
     belonging to rank r. Chunk k takes elements [k*C, k*C+n) of every block. It is
     described by a derived datatype of n contiguous floats whose extent is resized to
     count floats, so "element r" of that type starting at buf + k*C is exactly rank r's
     piece. MPI's predefined MPI_SUM is not defined on derived datatypes, so the
     chunked reduce-scatter uses our own commutative float-sum operator (MPI_Op_create),
     which walks the derived type's layout; the unchunked path uses MPI_FLOAT + MPI_SUM.

 Byte counters (per rank, what a ring algorithm would send; they are a model of the
 traffic, not a measurement of what Open MPI's chosen algorithm sent):
   - all-gather of world*count floats:     (world-1) * count * 4
   - reduce-scatter of world*count floats: (world-1) * count * 4
   - all-reduce of count floats:           2 * (world-1) * count * 4 / world
   - scalars (count doubles, all-reduce):  2 * (world-1) * count * 8 / world
   - broadcast of `bytes`:                 `bytes` on every rank except the root, 0 on it
 At world 1 every count is 0 and no MPI collective is called (the trivial copy or no-op
 is done here). calls[] counts calls of this API (not chunks), blocking or not.
 wait_ms is the wall time spent inside blocking collectives (start to finish), barriers
 and zero_comm_wait; zero_comm_test never blocks and is not counted.

 Not thread-safe: one thread of the rank makes all the calls.
*/
#ifndef ZERO3_COMM_H
#define ZERO3_COMM_H

#include <stddef.h>   // size_t
#include <string.h>   // memcpy, memset
#include <limits.h>   // INT_MAX: the bound of an MPI count
#include <mpi.h>      // MPI_Comm, MPI_Request, the collectives, MPI_Wtime
#include "zero3/util.h"   // zero_error: the 0 / -1 error convention
#include "zero3/watchdog.h"  // zero_watch_enter/leave: every blocking wait told to --collective-timeout's watchdog

#ifndef ZERO_COMM_CHUNK
#define ZERO_COMM_CHUNK ((size_t)1 << 30)  // elements per MPI call, must be 1..INT_MAX
#endif

#define ZERO_COMM_MAX_REQS 16  // the size of ZeroRequest.reqs

enum { ZERO_ALLGATHER, ZERO_REDUCE_SCATTER, ZERO_ALLREDUCE, ZERO_BROADCAST, ZERO_SCALAR, ZERO_NUM_COLLECTIVES };

typedef struct {
    MPI_Comm comm;        // a duplicate of the communicator given at init (so the engine's traffic never mixes with the caller's)
    int rank, world;
    double bytes[ZERO_NUM_COLLECTIVES];   // cumulative bytes per collective kind, counted as above
    long calls[ZERO_NUM_COLLECTIVES];
    double wait_ms;       // cumulative wall time spent blocked in zero_comm_wait and in blocking collectives
} ZeroComm;

// one nonblocking collective (possibly chunked); unit: the unit it moves, for the
// watchdog's message (set by the request's owner; -1 for a blocking call's)
typedef struct { MPI_Request reqs[16]; int n; int kind; int unit; } ZeroRequest;

// ----------------------------------------------------------------------------
// internals

// the float-sum operator for the chunked reduce-scatter, shared by every ZeroComm of
// this translation unit: created by the first zero_comm_init, freed by the last free
static MPI_Op zero_comm_sum_op_handle = MPI_OP_NULL;
static int zero_comm_sum_op_users = 0;

// names for messages
static inline const char* zero_comm_kind_name(int kind) {
    static const char* names[ZERO_NUM_COLLECTIVES] = {
        "all-gather", "reduce-scatter", "all-reduce", "broadcast", "scalar all-reduce"};
    return (kind >= 0 && kind < ZERO_NUM_COLLECTIVES) ? names[kind] : "collective";
}

// records "<what> failed: <MPI error string>" and returns -1
static inline int zero_comm_mpi_error(const char* what, int code) {
    char msg[MPI_MAX_ERROR_STRING + 1];
    int len = 0;
    if (MPI_Error_string(code, msg, &len) != MPI_SUCCESS) { len = 0; }
    msg[len] = '\0';
    return zero_error("zero comm: %s failed: %s (MPI error %d)", what, len ? msg : "unknown error", code);
}

// MPI user function: inout += in, elementwise, for `len` elements of a datatype made of
// contiguous floats (from lower bound 0) with any extent: MPI_FLOAT itself, or the
// resized chunk type. The datatype tells how many floats an element holds and how far
// apart the elements are, so the gaps between ranks' pieces are never touched.
static void zero_comm_sum_floats(void* in, void* inout, int* len, MPI_Datatype* dtype) {
    int size = 0;
    MPI_Aint lb = 0, extent = 0;
    MPI_Type_size(*dtype, &size);
    MPI_Type_get_extent(*dtype, &lb, &extent);
    size_t nfloat = (size_t)size / sizeof(float);
    for (int i = 0; i < *len; i++) {
        const float* a = (const float*)((const char*)in + (size_t)i * (size_t)extent);
        float* b = (float*)((char*)inout + (size_t)i * (size_t)extent);
        for (size_t j = 0; j < nfloat; j++) { b[j] += a[j]; }
    }
}

// the length of the chunk that starts at off (< total): at most ZERO_COMM_CHUNK, so an int
static inline int zero_comm_chunk_len(size_t total, size_t off) {
    size_t left = total - off;
    return (int)(left < (size_t)ZERO_COMM_CHUNK ? left : (size_t)ZERO_COMM_CHUNK);
}

// number of chunks for `count` elements (per rank block for all-gather and
// reduce-scatter), or -1 (with the message) when they do not fit
// in one ZeroRequest
#ifdef __cplusplus
#define ZERO_STATIC_ASSERT static_assert   // the header is also compiled as C++ (the GPU trainer)
#else
#define ZERO_STATIC_ASSERT _Static_assert
#endif
static inline int zero_comm_nchunks(const char* what, size_t count) {
    ZERO_STATIC_ASSERT(ZERO_COMM_CHUNK >= 1 && ZERO_COMM_CHUNK <= INT_MAX, "ZERO_COMM_CHUNK must be 1..INT_MAX");
    size_t n = (count + (size_t)ZERO_COMM_CHUNK - 1) / (size_t)ZERO_COMM_CHUNK;
    if (n > ZERO_COMM_MAX_REQS) {
        return zero_error("zero comm: %s of %zu elements needs %zu chunks of %zu, more than %d",
                          what, count, n, (size_t)ZERO_COMM_CHUNK, ZERO_COMM_MAX_REQS);
    }
    return (int)n;
}

// a derived datatype for chunk pieces: n contiguous floats, extent `stride` floats;
// committed, to be freed by the caller right after starting the collective (MPI keeps
// it alive until pending operations on it complete)
static inline int zero_comm_chunk_type(const char* what, int n, size_t stride, MPI_Datatype* out) {
    MPI_Datatype piece;
    int rc = MPI_Type_contiguous(n, MPI_FLOAT, &piece);
    if (rc != MPI_SUCCESS) { return zero_comm_mpi_error(what, rc); }
    rc = MPI_Type_create_resized(piece, 0, (MPI_Aint)(stride * sizeof(float)), out);
    MPI_Type_free(&piece);
    if (rc != MPI_SUCCESS) { return zero_comm_mpi_error(what, rc); }
    rc = MPI_Type_commit(out);
    if (rc != MPI_SUCCESS) { MPI_Type_free(out); return zero_comm_mpi_error(what, rc); }
    return 0;
}

// cancels nothing (MPI collectives cannot be cancelled) but completes what was already
// started when a later chunk failed to start, so no request is left dangling
static inline void zero_comm_abandon(ZeroRequest* r) {
    if (r->n > 0) { MPI_Waitall(r->n, r->reqs, MPI_STATUSES_IGNORE); }
    r->n = 0;
}

// the blocking variants: wait for a request started on the caller's behalf, timing the
// whole call from `t0`
static inline int zero_comm_finish_blocking(ZeroComm* c, ZeroRequest* r, double t0) {
    int rc = 0;
    if (r->n > 0) {
        zero_watch_enter(zero_comm_kind_name(r->kind), r->unit);
        int mrc = MPI_Waitall(r->n, r->reqs, MPI_STATUSES_IGNORE);
        zero_watch_leave();
        r->n = 0;
        if (mrc != MPI_SUCCESS) { rc = zero_comm_mpi_error(zero_comm_kind_name(r->kind), mrc); }
    }
    c->wait_ms += (MPI_Wtime() - t0) * 1e3;
    return rc;
}

// ----------------------------------------------------------------------------
// setup

static inline int zero_comm_init(ZeroComm* c, MPI_Comm comm) {
    memset(c, 0, sizeof(*c));
    c->comm = MPI_COMM_NULL;
    int up = 0;
    MPI_Initialized(&up);
    if (!up) { return zero_error("zero comm: init called before MPI_Init"); }
    int rc = MPI_Comm_dup(comm, &c->comm);
    if (rc != MPI_SUCCESS) { c->comm = MPI_COMM_NULL; return zero_comm_mpi_error("MPI_Comm_dup at init", rc); }
    rc = MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
    if (rc == MPI_SUCCESS) { rc = MPI_Comm_rank(c->comm, &c->rank); }
    if (rc == MPI_SUCCESS) { rc = MPI_Comm_size(c->comm, &c->world); }
    if (rc == MPI_SUCCESS && zero_comm_sum_op_users == 0) {
        rc = MPI_Op_create(zero_comm_sum_floats, 1, &zero_comm_sum_op_handle);  // 1: commutative
    }
    if (rc != MPI_SUCCESS) {
        MPI_Comm_free(&c->comm);
        return zero_comm_mpi_error("communicator setup at init", rc);
    }
    zero_comm_sum_op_users++;
    return 0;
}

// frees the duplicate communicator; safe on a zeroed or already freed ZeroComm, and
// after MPI_Finalize (then there is nothing left to free)
static inline void zero_comm_free(ZeroComm* c) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (c->comm != MPI_COMM_NULL && c->comm != 0 && !finalized) {
        MPI_Comm_free(&c->comm);
        if (--zero_comm_sum_op_users == 0 && zero_comm_sum_op_handle != MPI_OP_NULL) {
            MPI_Op_free(&zero_comm_sum_op_handle);
        }
    }
    c->comm = MPI_COMM_NULL;
}

// ----------------------------------------------------------------------------
// float collectives

// starts a collective of `kind`: the request it fills (the caller's, or `local` for a
// blocking call), emptied, and the call counted
static inline ZeroRequest* zero_comm_begin(ZeroComm* c, ZeroRequest* req, ZeroRequest* local, int kind) {
    ZeroRequest* r = req ? req : local;
    if (req == NULL) { local->unit = -1; }
    r->n = 0;
    r->kind = kind;
    c->calls[kind]++;
    return r;
}

static inline int zero_allgather(ZeroComm* c, float* buf, size_t count, ZeroRequest* req) {
    double t0 = MPI_Wtime();
    ZeroRequest local;
    ZeroRequest* r = zero_comm_begin(c, req, &local, ZERO_ALLGATHER);
    if (c->world == 1 || count == 0) { return req ? 0 : zero_comm_finish_blocking(c, r, t0); }
    int nchunks = zero_comm_nchunks("all-gather", count);
    if (nchunks < 0) { return -1; }
    for (int k = 0; k < nchunks; k++) {
        size_t off = (size_t)k * (size_t)ZERO_COMM_CHUNK;
        int n = zero_comm_chunk_len(count, off);
        int rc;
        if (nchunks == 1) {
            rc = MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, n, MPI_FLOAT, c->comm, &r->reqs[r->n]);
        } else {
            MPI_Datatype piece;
            if (zero_comm_chunk_type("all-gather chunk type", n, count, &piece) != 0) { zero_comm_abandon(r); return -1; }
            rc = MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf + off, 1, piece, c->comm, &r->reqs[r->n]);
            MPI_Type_free(&piece);
        }
        if (rc != MPI_SUCCESS) { zero_comm_abandon(r); return zero_comm_mpi_error("MPI_Iallgather (all-gather)", rc); }
        r->n++;
    }
    c->bytes[ZERO_ALLGATHER] += (double)(c->world - 1) * (double)count * sizeof(float);
    return req ? 0 : zero_comm_finish_blocking(c, r, t0);
}

static inline int zero_reduce_scatter(ZeroComm* c, const float* send, float* recv, size_t count, ZeroRequest* req) {
    double t0 = MPI_Wtime();
    ZeroRequest local;
    ZeroRequest* r = zero_comm_begin(c, req, &local, ZERO_REDUCE_SCATTER);
    if (count == 0) { return req ? 0 : zero_comm_finish_blocking(c, r, t0); }
    if (c->world == 1) {
        memcpy(recv, send, count * sizeof(float));  // the sum over one rank is its own block
        return req ? 0 : zero_comm_finish_blocking(c, r, t0);
    }
    int nchunks = zero_comm_nchunks("reduce-scatter", count);
    if (nchunks < 0) { return -1; }
    for (int k = 0; k < nchunks; k++) {
        size_t off = (size_t)k * (size_t)ZERO_COMM_CHUNK;
        int n = zero_comm_chunk_len(count, off);
        int rc;
        if (nchunks == 1) {
            rc = MPI_Ireduce_scatter_block(send, recv, n, MPI_FLOAT, MPI_SUM, c->comm, &r->reqs[r->n]);
        } else {
            // the recv piece is n contiguous floats at recv + off: one element of the same
            // type (its stretched extent only spaces elements, and there is one)
            MPI_Datatype piece;
            if (zero_comm_chunk_type("reduce-scatter chunk type", n, count, &piece) != 0) { zero_comm_abandon(r); return -1; }
            rc = MPI_Ireduce_scatter_block(send + off, recv + off, 1, piece, zero_comm_sum_op_handle, c->comm, &r->reqs[r->n]);
            MPI_Type_free(&piece);
        }
        if (rc != MPI_SUCCESS) { zero_comm_abandon(r); return zero_comm_mpi_error("MPI_Ireduce_scatter_block (reduce-scatter)", rc); }
        r->n++;
    }
    c->bytes[ZERO_REDUCE_SCATTER] += (double)(c->world - 1) * (double)count * sizeof(float);
    return req ? 0 : zero_comm_finish_blocking(c, r, t0);
}

static inline int zero_allreduce(ZeroComm* c, float* buf, size_t count, ZeroRequest* req) {
    double t0 = MPI_Wtime();
    ZeroRequest local;
    ZeroRequest* r = zero_comm_begin(c, req, &local, ZERO_ALLREDUCE);
    if (c->world == 1 || count == 0) { return req ? 0 : zero_comm_finish_blocking(c, r, t0); }
    int nchunks = zero_comm_nchunks("all-reduce", count);
    if (nchunks < 0) { return -1; }
    for (int k = 0; k < nchunks; k++) {
        size_t off = (size_t)k * (size_t)ZERO_COMM_CHUNK;
        int n = zero_comm_chunk_len(count, off);
        int rc = MPI_Iallreduce(MPI_IN_PLACE, buf + off, n, MPI_FLOAT, MPI_SUM, c->comm, &r->reqs[r->n]);
        if (rc != MPI_SUCCESS) { zero_comm_abandon(r); return zero_comm_mpi_error("MPI_Iallreduce (all-reduce)", rc); }
        r->n++;
    }
    c->bytes[ZERO_ALLREDUCE] += 2.0 * (double)(c->world - 1) * (double)count * sizeof(float) / (double)c->world;
    return req ? 0 : zero_comm_finish_blocking(c, r, t0);
}

// ----------------------------------------------------------------------------
// blocking helpers

static inline int zero_allreduce_scalars(ZeroComm* c, double* buf, int count) {
    if (count < 0) { return zero_error("zero comm: scalar all-reduce of a negative count (%d)", count); }
    c->calls[ZERO_SCALAR]++;
    if (c->world == 1 || count == 0) { return 0; }
    double t0 = MPI_Wtime();
    zero_watch_enter("scalar all-reduce", -1);
    int rc = MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_DOUBLE, MPI_SUM, c->comm);
    zero_watch_leave();
    c->wait_ms += (MPI_Wtime() - t0) * 1e3;
    if (rc != MPI_SUCCESS) { return zero_comm_mpi_error("MPI_Allreduce (scalar all-reduce)", rc); }
    c->bytes[ZERO_SCALAR] += 2.0 * (double)(c->world - 1) * (double)count * sizeof(double) / (double)c->world;
    return 0;
}

// pieces of ZERO_COMM_CHUNK bytes (MPI_BYTE counts are int too)
static inline int zero_broadcast(ZeroComm* c, void* buf, size_t bytes, int root) {
    if (root < 0 || root >= c->world) {
        return zero_error("zero comm: broadcast from root %d, but the world has ranks 0..%d", root, c->world - 1);
    }
    c->calls[ZERO_BROADCAST]++;
    if (c->world == 1 || bytes == 0) { return 0; }
    double t0 = MPI_Wtime();
    for (size_t off = 0; off < bytes; off += (size_t)ZERO_COMM_CHUNK) {
        int n = zero_comm_chunk_len(bytes, off);
        zero_watch_enter("broadcast", -1);
        int rc = MPI_Bcast((char*)buf + off, n, MPI_BYTE, root, c->comm);
        zero_watch_leave();
        if (rc != MPI_SUCCESS) {
            c->wait_ms += (MPI_Wtime() - t0) * 1e3;
            return zero_comm_mpi_error("MPI_Bcast (broadcast)", rc);
        }
    }
    c->wait_ms += (MPI_Wtime() - t0) * 1e3;
    if (c->rank != root) { c->bytes[ZERO_BROADCAST] += (double)bytes; }
    return 0;
}

static inline int zero_barrier(ZeroComm* c) {
    double t0 = MPI_Wtime();
    zero_watch_enter("barrier", -1);
    int rc = MPI_Barrier(c->comm);
    zero_watch_leave();
    c->wait_ms += (MPI_Wtime() - t0) * 1e3;
    if (rc != MPI_SUCCESS) { return zero_comm_mpi_error("MPI_Barrier (barrier)", rc); }
    return 0;
}

// ----------------------------------------------------------------------------
// completion of nonblocking collectives

static inline int zero_comm_wait(ZeroComm* c, ZeroRequest* req) {
    if (req == NULL || req->n <= 0) { return 0; }
    return zero_comm_finish_blocking(c, req, MPI_Wtime());
}

// *done = 1 when the request has completed (then it is empty, and a wait is a no-op)
static inline int zero_comm_test(ZeroComm* c, ZeroRequest* req, int* done) {
    (void)c;
    *done = 1;
    if (req == NULL || req->n <= 0) { return 0; }
    int flag = 0;
    int rc = MPI_Testall(req->n, req->reqs, &flag, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) {
        req->n = 0;  // a failed collective is over for this rank; waiting again would not help
        return zero_comm_mpi_error(zero_comm_kind_name(req->kind), rc);
    }
    if (flag) { req->n = 0; } else { *done = 0; }
    return 0;
}

#endif // ZERO3_COMM_H
