// zero3/comm.c: the implementation (the interface and its notes: zero3/comm.h)
#include "zero3/comm.h"  // this module's types and prototypes
#include <stdlib.h>   // malloc, free: a multi-phase collective's scratch
#include <string.h>   // memcpy, memset
#include "zero3/util.h"   // zero_error: the 0 / -1 error convention
#include "zero3/watchdog.h"  // zero_watch_enter/leave: every blocking wait told to --collective-timeout's watchdog
#include "zero3/quant.h"     // zero_quantize, zero_dequantize: the int8 blocks of the quantised collectives
#include "zero3/watch.h"    // zero_watch_enter/leave: every blocking wait told to --collective-timeout's watchdog

static int zero_comm_progress(ZeroComm* c);

const char* zero_comm_kind_name(int kind) {
    static const char* names[ZERO_NUM_COLLECTIVES] = {
        "all-gather", "reduce-scatter", "all-reduce", "broadcast", "scalar all-reduce"};
    return (kind >= 0 && kind < ZERO_NUM_COLLECTIVES) ? names[kind] : "collective";
}

int zero_comm_mpi_error(const char* what, int code) {
    char msg[MPI_MAX_ERROR_STRING + 1];
    int len = 0;
    if (MPI_Error_string(code, msg, &len) != MPI_SUCCESS) { len = 0; }
    msg[len] = '\0';
    return zero_error("zero comm: %s failed: %s (MPI error %d)", what, len ? msg : "unknown error", code);
}

// the length of the chunk that starts at off (< total): at most ZERO_COMM_CHUNK, so an int
static int zero_comm_chunk_len(size_t total, size_t off) {
    size_t left = total - off;
    return (int)(left < (size_t)ZERO_COMM_CHUNK ? left : (size_t)ZERO_COMM_CHUNK);
}

static int zero_comm_nchunks(const char* what, size_t count) {
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
static int zero_comm_chunk_type(const char* what, int n, size_t stride, MPI_Datatype* out) {
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
static void zero_comm_abandon(ZeroRequest* r) {
    if (r->n > 0) { MPI_Waitall(r->n, r->reqs, MPI_STATUSES_IGNORE); }
    r->n = 0;
}

  // below, with the phases
static int zero_comm_finish_blocking(ZeroComm* c, ZeroRequest* r, double t0) {
    int rc = 0;
    if (r->n > 0 && c->head != NULL) {
        // [Note: phases] other ranks may wait on a later phase this rank must start: poll
        zero_watch_enter(zero_comm_kind_name(r->kind), r->unit);
        int flag = 0;
        while (rc == 0 && !flag) {
            int mrc = MPI_Testall(r->n, r->reqs, &flag, MPI_STATUSES_IGNORE);
            if (mrc != MPI_SUCCESS) { rc = zero_comm_mpi_error(zero_comm_kind_name(r->kind), mrc); break; }
            if (!flag && zero_comm_progress(c) != 0) { rc = -1; }
        }
        zero_watch_leave();
        r->n = 0;
    } else if (r->n > 0) {
        zero_watch_enter(zero_comm_kind_name(r->kind), r->unit);
        int mrc = MPI_Waitall(r->n, r->reqs, MPI_STATUSES_IGNORE);
        zero_watch_leave();
        r->n = 0;
        if (mrc != MPI_SUCCESS) { rc = zero_comm_mpi_error(zero_comm_kind_name(r->kind), mrc); }
    }
    c->wait_ms += (MPI_Wtime() - t0) * 1e3;
    return rc;
}

int zero_comm_init(ZeroComm* c, MPI_Comm comm) {
    memset(c, 0, sizeof(*c));
    c->comm = c->later = MPI_COMM_NULL;
    for (int i = 0; i < ZERO_NUM_SUBS; i++) { c->sub[i] = MPI_COMM_NULL; }
    int up = 0;
    MPI_Initialized(&up);
    if (!up) { return zero_error("zero comm: init called before MPI_Init"); }
    int rc = MPI_Comm_dup(comm, &c->comm);
    if (rc != MPI_SUCCESS) { c->comm = MPI_COMM_NULL; return zero_comm_mpi_error("MPI_Comm_dup at init", rc); }
    rc = MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
    if (rc == MPI_SUCCESS) { rc = MPI_Comm_rank(c->comm, &c->rank); }
    if (rc == MPI_SUCCESS) { rc = MPI_Comm_size(c->comm, &c->world); }
    if (rc == MPI_SUCCESS && c->world > 1) { rc = MPI_Comm_dup(c->comm, &c->later); }  // (collective: every rank has the same world)
    if (rc == MPI_SUCCESS && c->world > 1) { rc = MPI_Comm_set_errhandler(c->later, MPI_ERRORS_RETURN); }
    if (rc != MPI_SUCCESS) {
        if (c->later != MPI_COMM_NULL) { MPI_Comm_free(&c->later); }
        MPI_Comm_free(&c->comm);
        return zero_comm_mpi_error("communicator setup at init", rc);
    }
    c->span = ZERO_SPAN_NODE;
    c->nodes = 1; c->per_node = c->world; c->node = 0; c->local = c->rank;
    return 0;
}

int zero_comm_node(MPI_Comm comm, int ranks_per_node, int* node) {
    int rank = 0, world = 0;
    int rc = MPI_Comm_rank(comm, &rank);
    if (rc == MPI_SUCCESS) { rc = MPI_Comm_size(comm, &world); }
    if (rc != MPI_SUCCESS) { return zero_comm_mpi_error("MPI_Comm_rank/size (nodes)", rc); }
    if (ranks_per_node > 0) {
        if (world % ranks_per_node != 0) {
            return zero_error("zero comm: --ranks-per-node %d does not divide the %d ranks", ranks_per_node, world);
        }
        *node = rank / ranks_per_node;
        return 0;
    }
    MPI_Comm shm;
    rc = MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &shm);
    if (rc != MPI_SUCCESS) { return zero_comm_mpi_error("MPI_Comm_split_type (nodes)", rc); }
    rc = MPI_Allreduce(&rank, node, 1, MPI_INT, MPI_MIN, shm);
    MPI_Comm_free(&shm);
    if (rc != MPI_SUCCESS) { return zero_comm_mpi_error("MPI_Allreduce (nodes)", rc); }
    return 0;
}

void zero_span_set(ZeroSpan* s, int span, int nodes, int per_node, int node, int local) {
    s->span = span; s->nodes = nodes; s->per_node = per_node; s->node = node; s->local = local;
}

int zero_comm_span(MPI_Comm comm, int node, ZeroSpan* out) {
    int rank = 0, world = 1;
    zero_span_set(out, ZERO_SPAN_NODE, 1, 1, 0, 0);  // (filled on every path)
    int rc = MPI_Comm_rank(comm, &rank);
    if (rc == MPI_SUCCESS) { rc = MPI_Comm_size(comm, &world); }
    if (rc != MPI_SUCCESS) { return zero_comm_mpi_error("MPI_Comm_rank/size (the span over the nodes)", rc); }
    zero_span_set(out, ZERO_SPAN_NODE, 1, world, 0, rank);
    if (world == 1) { return 0; }
    int* ids = (int*)malloc((size_t)world * sizeof(int));
    if (ids == NULL) { return zero_error("zero comm: out of memory for the node table"); }
    rc = MPI_Allgather(&node, 1, MPI_INT, ids, 1, MPI_INT, comm);
    if (rc != MPI_SUCCESS) { free(ids); return zero_comm_mpi_error("MPI_Allgather (nodes)", rc); }
    // nodes in rank order: node-major when each node's ranks are one run, all runs equal
    int nodes = 0, run = 0, per = 0, even = 1, my_node = 0;
    for (int q = 0; q < world; q++) {
        if (q == 0 || ids[q] != ids[q - 1]) {
            for (int p = 0; p < q; p++) { if (ids[p] == ids[q]) { even = 0; } }  // a node seen before: not one run
            if (q > 0) { if (per == 0) { per = run; } else if (run != per) { even = 0; } }
            nodes++; run = 0;
        }
        run++;
        if (q == rank) { my_node = nodes - 1; }
    }
    if (per == 0) { per = run; } else if (run != per) { even = 0; }
    free(ids);
    if (nodes == 1) { return 0; }
    if (!even) { zero_span_set(out, ZERO_SPAN_UNEVEN, nodes, 0, my_node, -1); return 0; }
    zero_span_set(out, per == 1 ? ZERO_SPAN_CROSS : ZERO_SPAN_HIER, nodes, per, my_node, rank % per);
    return 0;
}

int zero_comm_init_nodes(ZeroComm* c, MPI_Comm comm, int node) {
    if (zero_comm_init(c, comm) != 0) { return -1; }
    ZeroSpan sp;
    if (zero_comm_span(c->comm, node, &sp) != 0) { zero_comm_free(c); return -1; }
    c->span = sp.span; c->nodes = sp.nodes; c->per_node = sp.per_node; c->node = sp.node; c->local = sp.local;
    if (c->span != ZERO_SPAN_HIER) { return 0; }
    int rc = MPI_SUCCESS;
    for (int i = 0; i < ZERO_NUM_SUBS && rc == MPI_SUCCESS; i++) {
        int across = i >= ZERO_SUB_CROSS_FIRST;
        rc = MPI_Comm_split(c->comm, across ? c->local : c->node, c->rank, &c->sub[i]);
        if (rc == MPI_SUCCESS) { rc = MPI_Comm_set_errhandler(c->sub[i], MPI_ERRORS_RETURN); }
    }
    if (rc != MPI_SUCCESS) {
        zero_comm_free(c);
        return zero_comm_mpi_error("MPI_Comm_split (the node and cross-node groups)", rc);
    }
    return 0;
}

void zero_comm_free(ZeroComm* c) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (c->comm != MPI_COMM_NULL && c->comm != 0 && !finalized) {
        // a collective still in phases is over for this rank: complete what it started
        for (ZeroRequest* r = c->head; r != NULL; r = r->next) {
            if (r->n > 0) { MPI_Waitall(r->n, r->reqs, MPI_STATUSES_IGNORE); }
            r->n = 0; r->live = 0;
            if (r->fbytes > 0) { free(r->f); }  // (not the caller's staging)
            free(r->q); r->f = NULL; r->q = NULL;
        }
        c->head = c->tail = NULL;
        for (int i = 0; i < 4; i++) { free(c->keep[i].p); c->keep[i].p = NULL; }
        for (int i = 0; i < ZERO_NUM_SUBS; i++) {
            if (c->sub[i] != MPI_COMM_NULL && c->sub[i] != 0) { MPI_Comm_free(&c->sub[i]); }
        }
        if (c->later != MPI_COMM_NULL && c->later != 0) { MPI_Comm_free(&c->later); }
        MPI_Comm_free(&c->comm);
    }
    c->comm = c->later = MPI_COMM_NULL;
}

// the link a phase's bytes cross: a sub-communicator's is known; the main one's is its
// span's (an uneven span counts as crossing: an upper bound)
static void zero_comm_count(ZeroComm* c, int kind, int sub, double bytes) {
    int link = sub >= ZERO_SUB_CROSS_FIRST ? ZERO_LINK_INTER
             : sub >= 0 ? ZERO_LINK_INTRA
             : c->span == ZERO_SPAN_NODE ? ZERO_LINK_INTRA : ZERO_LINK_INTER;
    c->bytes[kind] += bytes;
    c->link_bytes[link][kind] += bytes;
}

// the sub-communicator of a request's phase, or -1 for the main one (a span that is not
// hierarchical runs every collective in one phase there). All-gather: across nodes,
// then inside. Reduce-scatter: inside, then across. All-reduce: inside, across, inside.
static int zero_phase_sub(const ZeroComm* c, const ZeroRequest* r, int ph) {
    if (c->span != ZERO_SPAN_HIER) { return -1; }
    if (r->op == ZERO_OP_AG) { return ph == 0 ? ZERO_SUB_CROSS_FIRST : ZERO_SUB_NODE_LATER; }
    if (ph == 0) { return ZERO_SUB_NODE_FIRST; }
    return (r->op == ZERO_OP_RS || ph == 1) ? ZERO_SUB_CROSS_LATER : ZERO_SUB_NODE_LATER;
}

// A reduction hop: an all-to-all over k ranks of parts of P floats, each rank summing the
// k parts it receives into `out`, in rank order (the same order every run). The
// reduce-scatter's hops: hierarchical, inside the node (k = n, P = M blocks: the M
// blocks this local index will own pieces of) then across (k = M, P = one block);
// otherwise (quantised, on a flat span) one hop over the world. The all-reduce's first
// phase: inside the node, parts of 1/n of the buffer. `h` (the f scratch's tail) holds a
// first hop's sums.
static void zero_hop(const ZeroComm* c, const ZeroRequest* r, int ph, int* k, size_t* P, float** out, float* h) {
    if (r->op == ZERO_OP_AR) { *k = c->per_node; *P = r->count / (size_t)c->per_node; *out = h; return; }
    if (c->span == ZERO_SPAN_HIER && ph == 0) { *k = c->per_node; *P = (size_t)c->nodes * r->count; *out = h; return; }
    *k = c->span == ZERO_SPAN_HIER ? c->nodes : c->world;
    *P = r->count;
    *out = r->out;
}

// where the f scratch's parts are: the fp32 receive area first (k parts of a hop), then h
static float* zero_req_h(const ZeroComm* c, const ZeroRequest* r) {
    if (r->op == ZERO_OP_AR) { return r->f + r->count; }
    return r->quant ? r->f : r->f + (size_t)c->world * r->count;
}

// MPI counts are int: a phase whose parts do not fit is refused
static int zero_phase_fits(const char* what, size_t elems) {
    if (elems > (size_t)INT_MAX) { return zero_error("zero comm: %s of %zu elements per part is more than an MPI count holds", what, elems); }
    return 0;
}

// [Note: reduce-scatter in pieces] elements of each rank block per piece: the staging of
// world * n floats within ZERO_COMM_PIECE_BYTES (n a multiple of 64 floats, at least 64:
// 256-byte parts), an MPI count, and at most the block
static size_t zero_rs_piece(int world, size_t count) {
    size_t n = ZERO_COMM_PIECE_BYTES / ((size_t)(world > 1 ? world : 1) * sizeof(float)) / 64 * 64;
    if (n < 64) { n = 64; }
    if (n > (size_t)ZERO_COMM_CHUNK) { n = (size_t)ZERO_COMM_CHUNK; }
    return n < count ? n : count;
}

size_t zero_rs_stage_elems(int world, size_t count) {
    return world > 1 ? (size_t)world * zero_rs_piece(world, count) : 0;
}

size_t zero_comm_rs_stage(const ZeroComm* c, size_t count) {
    return c->span == ZERO_SPAN_HIER ? 0 : zero_rs_stage_elems(c->world, count);
}

// the pieces of a reduce-scatter in pieces (an all-reduce's phases: these, then its all-gather)
static int zero_pieces(const ZeroRequest* r) { return (int)((r->count + r->piece - 1) / r->piece); }

// the elements [*off, *off + *n) of every block that the current piece moves
static void zero_piece_at(const ZeroRequest* r, size_t* off, size_t* n) {
    *off = (size_t)r->phase * r->piece;
    *n = r->count - *off < r->piece ? r->count - *off : r->piece;
}

// starts a piece: an all-to-all of every block's piece, each rank getting its own block's
// world parts in the staging (f), part q from rank q. An all-reduce's last phase: the
// all-gather of the summed blocks, in place.
static int zero_piece_start(ZeroComm* c, ZeroRequest* r) {
    size_t off, n;
    zero_piece_at(r, &off, &n);
    MPI_Comm comm = r->phase == 0 ? c->comm : c->later;   // [Note: phases]
    int rc;
    if (r->phase == zero_pieces(r)) {
        rc = MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, r->buf, (int)r->count, MPI_FLOAT, comm, &r->reqs[0]);
        if (rc != MPI_SUCCESS) { return zero_comm_mpi_error("MPI_Iallgather (all-reduce, its all-gather)", rc); }
        zero_comm_count(c, r->kind, -1, (double)(c->world - 1) * (double)(r->count * sizeof(float)));
        r->n = 1;
        return 0;
    }
    if (n == r->count) {   // one piece: the blocks themselves
        rc = MPI_Ialltoall(r->send, (int)n, MPI_FLOAT, r->f, (int)n, MPI_FLOAT, comm, &r->reqs[0]);
    } else {
        MPI_Datatype t;
        if (zero_comm_chunk_type("reduce-scatter piece type", (int)n, r->count, &t) != 0) { return -1; }
        rc = MPI_Ialltoall(r->send + off, 1, t, r->f, (int)n, MPI_FLOAT, comm, &r->reqs[0]);
        MPI_Type_free(&t);
    }
    if (rc != MPI_SUCCESS) { return zero_comm_mpi_error("MPI_Ialltoall (reduce-scatter, a piece)", rc); }
    zero_comm_count(c, r->kind, -1, (double)(c->world - 1) * (double)(n * sizeof(float)));
    r->n = 1;
    return 0;
}

// a piece's world parts summed in libnbc's binomial order (round by round, part i takes
// part i + d for i a multiple of 2d: the sums of MPI_Ireduce_scatter_block, bit for bit),
// into this rank's output
static void zero_piece_post(ZeroComm* c, ZeroRequest* r) {
    if (r->phase == zero_pieces(r)) { return; }   // an all-reduce's all-gather
    size_t off, n;
    zero_piece_at(r, &off, &n);
    for (int d = 1; d < c->world; d *= 2) {
        for (int i = 0; i + d < c->world; i += 2 * d) {
            float* a = r->f + (size_t)i * n;
            const float* b = r->f + (size_t)(i + d) * n;
            for (size_t j = 0; j < n; j++) { a[j] += b[j]; }
        }
    }
    memcpy(r->out + off, r->f, n * sizeof(float));
}

// starts the request's current phase
static int zero_phase_start(ZeroComm* c, ZeroRequest* r) {
    if (r->piece > 0) { return zero_piece_start(c, r); }
    int ph = r->phase, sub = zero_phase_sub(c, r, ph);
    MPI_Comm comm = sub < 0 ? c->comm : c->sub[sub];
    int M = c->nodes, n = c->per_node;
    int rc = MPI_SUCCESS;
    r->n = 0;
    if (r->op == ZERO_OP_AG) {
        // rank blocks of b elements of et: floats, or (quantised) bytes
        MPI_Datatype et = r->quant ? MPI_BYTE : MPI_FLOAT;
        size_t esz = r->quant ? 1 : sizeof(float);
        size_t b = r->quant ? r->qb : r->count;
        char* base = r->quant ? (char*)r->q : (char*)r->buf;
        if (zero_phase_fits("an all-gather", (size_t)(n > 0 ? n : 1) * b) != 0) { return -1; }
        if (sub < 0) {
            rc = MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, base, (int)b, et, comm, &r->reqs[0]);
            zero_comm_count(c, r->kind, sub, (double)(c->world - 1) * (double)(b * esz));
        } else {
            // across: this local index's block of every node, n blocks apart; inside: each
            // local rank's M blocks (n apart), placed at its local index. In place both.
            MPI_Datatype t = MPI_DATATYPE_NULL, tr = MPI_DATATYPE_NULL;
            if (ph == 0) {
                rc = MPI_Type_contiguous((int)b, et, &t);
                if (rc == MPI_SUCCESS) { rc = MPI_Type_create_resized(t, 0, (MPI_Aint)((size_t)n * b * esz), &tr); }
                base += (size_t)c->local * b * esz;
                zero_comm_count(c, r->kind, sub, (double)(M - 1) * (double)(b * esz));
            } else {
                rc = MPI_Type_vector(M, (int)b, (int)((size_t)n * b), et, &t);
                if (rc == MPI_SUCCESS) { rc = MPI_Type_create_resized(t, 0, (MPI_Aint)(b * esz), &tr); }
                zero_comm_count(c, r->kind, sub, (double)(n - 1) * (double)M * (double)(b * esz));
            }
            if (rc == MPI_SUCCESS) { rc = MPI_Type_commit(&tr); }
            if (rc == MPI_SUCCESS) { rc = MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, base, 1, tr, comm, &r->reqs[0]); }
            if (t != MPI_DATATYPE_NULL) { MPI_Type_free(&t); }
            if (tr != MPI_DATATYPE_NULL) { MPI_Type_free(&tr); }
        }
        if (rc != MPI_SUCCESS) { return zero_comm_mpi_error("MPI_Iallgather (all-gather, a phase)", rc); }
        r->n = 1;
        return 0;
    }
    float* h = zero_req_h(c, r);
    if (r->op == ZERO_OP_AR && ph > 0) {
        size_t P = r->count / (size_t)n;
        if (ph == 1) {   // across: the node's sums of this local index's part
            rc = MPI_Iallreduce(MPI_IN_PLACE, h, (int)P, MPI_FLOAT, MPI_SUM, comm, &r->reqs[0]);
            zero_comm_count(c, r->kind, sub, 2.0 * (double)(M - 1) * (double)(P * sizeof(float)) / (double)M);
        } else {         // inside: every local index's part into the buffer
            rc = MPI_Iallgather(h, (int)P, MPI_FLOAT, r->buf, (int)P, MPI_FLOAT, comm, &r->reqs[0]);
            zero_comm_count(c, r->kind, sub, (double)(n - 1) * (double)(P * sizeof(float)));
        }
        if (rc != MPI_SUCCESS) { return zero_comm_mpi_error("all-reduce (a phase)", rc); }
        r->n = 1;
        return 0;
    }
    // a reduction hop
    int k; size_t P; float* out;
    zero_hop(c, r, ph, &k, &P, &out, h);
    int first_hier = c->span == ZERO_SPAN_HIER && ph == 0 && r->op == ZERO_OP_RS;
    const float* in = r->op == ZERO_OP_AR ? r->buf : (ph == 0 ? r->send : h);
    if (r->quant) {
        // each block of `count` floats quantised on its own; a part is P / count blocks
        size_t qbc = zero_quant_bytes(r->count), per = P / r->count;
        unsigned char* qs = r->q;
        for (int p = 0; p < k; p++) {
            for (size_t m = 0; m < per; m++) {
                // the hierarchical first hop's part p is blocks (m, p): m * n + p
                size_t blk = first_hier ? m * (size_t)n + (size_t)p : (size_t)p * per + m;
                zero_quantize(in + blk * r->count, r->count, qs + ((size_t)p * per + m) * qbc);
            }
        }
        if (zero_phase_fits("a quantised reduce-scatter", per * qbc) != 0) { return -1; }
        rc = MPI_Ialltoall(qs, (int)(per * qbc), MPI_BYTE, r->q + (size_t)k * per * qbc, (int)(per * qbc), MPI_BYTE, comm, &r->reqs[0]);
        zero_comm_count(c, r->kind, sub, (double)(k - 1) * (double)(per * qbc));
    } else {
        if (zero_phase_fits("a reduce-scatter", P) != 0) { return -1; }
        if (first_hier) {
            // part p = the M blocks (m, p), n blocks apart: a strided send type
            MPI_Datatype t = MPI_DATATYPE_NULL, tr = MPI_DATATYPE_NULL;
            rc = MPI_Type_vector(M, (int)r->count, (int)((size_t)n * r->count), MPI_FLOAT, &t);
            if (rc == MPI_SUCCESS) { rc = MPI_Type_create_resized(t, 0, (MPI_Aint)(r->count * sizeof(float)), &tr); }
            if (rc == MPI_SUCCESS) { rc = MPI_Type_commit(&tr); }
            if (rc == MPI_SUCCESS) { rc = MPI_Ialltoall(in, 1, tr, r->f, (int)P, MPI_FLOAT, comm, &r->reqs[0]); }
            if (t != MPI_DATATYPE_NULL) { MPI_Type_free(&t); }
            if (tr != MPI_DATATYPE_NULL) { MPI_Type_free(&tr); }
        } else {
            rc = MPI_Ialltoall(in, (int)P, MPI_FLOAT, r->f, (int)P, MPI_FLOAT, comm, &r->reqs[0]);
        }
        zero_comm_count(c, r->kind, sub, (double)(k - 1) * (double)(P * sizeof(float)));
    }
    if (rc != MPI_SUCCESS) { return zero_comm_mpi_error("MPI_Ialltoall (reduce-scatter, a hop)", rc); }
    r->n = 1;
    return 0;
}

// the local work after a phase: a hop's sums, a quantised gather's dequantisation
static void zero_phase_post(ZeroComm* c, ZeroRequest* r) {
    if (r->piece > 0) { zero_piece_post(c, r); return; }
    int ph = r->phase;
    if (r->op == ZERO_OP_AG) {
        if (r->quant && ph == r->nphases - 1) {
            for (int q = 0; q < c->world; q++) {
                zero_dequantize(r->q + (size_t)q * r->qb, r->count, r->buf + (size_t)q * r->count, 0);
            }
        }
        return;
    }
    if (r->op == ZERO_OP_AR && ph > 0) { return; }
    int k; size_t P; float* out;
    float* h = zero_req_h(c, r);
    zero_hop(c, r, ph, &k, &P, &out, h);
    if (r->quant) {
        size_t qbc = zero_quant_bytes(r->count), per = P / r->count;
        const unsigned char* got = r->q + (size_t)k * per * qbc;
        memset(out, 0, P * sizeof(float));
        for (int p = 0; p < k; p++) {
            for (size_t m = 0; m < per; m++) {
                zero_dequantize(got + ((size_t)p * per + m) * qbc, r->count, out + m * r->count, 1);
            }
        }
    } else {
        memcpy(out, r->f, P * sizeof(float));
        for (int p = 1; p < k; p++) {
            const float* part = r->f + (size_t)p * P;
            for (size_t i = 0; i < P; i++) { out[i] += part[i]; }
        }
    }
}

// a staging buffer of at least `bytes`: the smallest kept one that fits, else a new one
static void* zero_scratch_get(ZeroComm* c, size_t bytes) {
    if (bytes == 0) { return NULL; }
    int best = -1;
    for (int i = 0; i < 4; i++) {
        if (c->keep[i].p != NULL && c->keep[i].bytes >= bytes && (best < 0 || c->keep[i].bytes < c->keep[best].bytes)) { best = i; }
    }
    if (best >= 0) {
        void* p = c->keep[best].p;
        c->keep[best].p = NULL;
        c->scratch_bytes -= (double)c->keep[best].bytes;   // counted again by the caller, at its size
        return p;
    }
    return malloc(bytes);
}

// keeps a staging buffer for later (or frees it when 4 are kept already)
static void zero_scratch_put(ZeroComm* c, void* p, size_t bytes) {
    if (p == NULL) { return; }
    for (int i = 0; i < 4; i++) {
        if (c->keep[i].p == NULL) {
            c->keep[i].p = p; c->keep[i].bytes = bytes;
            c->scratch_bytes += (double)bytes;
            if (c->scratch_bytes > c->scratch_peak) { c->scratch_peak = c->scratch_bytes; }
            return;
        }
    }
    free(p);
}

// a finished request's scratch goes back to the comm (the caller's staging to no one)
static void zero_phases_done(ZeroComm* c, ZeroRequest* r) {
    c->scratch_bytes -= (double)r->scratch;
    if (r->fbytes > 0) { zero_scratch_put(c, r->f, r->fbytes); }
    zero_scratch_put(c, r->q, r->scratch - r->fbytes);
    r->f = NULL; r->q = NULL;
    r->scratch = 0; r->fbytes = 0;
    r->live = 0;
    r->n = 0;
}

// [Note: phases] advances the queue from its head as far as it goes without blocking:
// only the head starts later phases. -1 when a phase failed (the request is then over).
static int zero_comm_progress(ZeroComm* c) {
    while (c->head != NULL) {
        ZeroRequest* r = c->head;
        int flag = 1, rc = 0;
        if (r->n > 0) {
            int mrc = MPI_Testall(r->n, r->reqs, &flag, MPI_STATUSES_IGNORE);
            if (mrc != MPI_SUCCESS) { r->n = 0; rc = zero_comm_mpi_error(zero_comm_kind_name(r->kind), mrc); }
        }
        if (rc == 0 && !flag) { return 0; }
        r->n = 0;
        if (rc == 0) {
            zero_phase_post(c, r);
            if (++r->phase < r->nphases) {
                if (zero_phase_start(c, r) == 0) { continue; }
                rc = -1;
            }
        }
        c->head = r->next;
        if (c->head == NULL) { c->tail = NULL; }
        r->next = NULL;
        zero_phases_done(c, r);
        if (rc != 0) { return -1; }
    }
    return 0;
}

  // below
static int zero_phases_begin(ZeroComm* c, ZeroRequest* r, int op, int quant, size_t fbytes, size_t qbytes, float* given) {
    r->op = op; r->quant = quant; r->phase = 0; r->next = NULL; r->n = 0;
    if (r->piece > 0) { r->nphases = zero_pieces(r) + (op == ZERO_OP_AR); }
    else if (c->span == ZERO_SPAN_HIER) { r->nphases = op == ZERO_OP_AR ? 3 : 2; } else { r->nphases = 1; }
    if (given != NULL) { fbytes = 0; }
    r->f = given != NULL ? given : (float*)zero_scratch_get(c, fbytes);
    r->q = (unsigned char*)zero_scratch_get(c, qbytes);
    if ((fbytes && r->f == NULL) || (qbytes && r->q == NULL)) {
        if (given == NULL) { free(r->f); }
        free(r->q); r->f = NULL; r->q = NULL;
        return zero_error("zero comm: out of memory for %.0f bytes of %s staging", (double)(fbytes + qbytes), zero_comm_kind_name(r->kind));
    }
    r->fbytes = fbytes;
    r->scratch = fbytes + qbytes;
    c->scratch_bytes += (double)r->scratch;
    if (c->scratch_bytes > c->scratch_peak) { c->scratch_peak = c->scratch_bytes; }
    if (r->op == ZERO_OP_AG && r->quant) {  // this rank's block, quantised, at its place
        zero_quantize(r->buf + (size_t)c->rank * r->count, r->count, r->q + (size_t)c->rank * r->qb);
    }
    r->live = 1;
    if (zero_phase_start(c, r) != 0) { zero_phases_done(c, r); return -1; }
    if (r->nphases > 1) {   // later phases to come: queued, in call order
        if (c->tail) { c->tail->next = r; } else { c->head = r; }
        c->tail = r;
    }
    return 0;
}

// starts a collective of `kind`: the request it fills (the caller's, or `local` for a
// blocking call), emptied, and the call counted
static ZeroRequest* zero_comm_begin(ZeroComm* c, ZeroRequest* req, ZeroRequest* local, int kind) {
    ZeroRequest* r = req ? req : local;
    if (req == NULL) { local->unit = -1; }
    r->n = 0;
    r->kind = kind;
    r->op = ZERO_OP_PLAIN; r->live = 0; r->quant = 0; r->piece = 0; r->f = NULL; r->q = NULL; r->scratch = 0; r->fbytes = 0; r->next = NULL;
    c->calls[kind]++;
    return r;
}

int zero_allgather(ZeroComm* c, float* buf, size_t count, ZeroRequest* req) {
    double t0 = MPI_Wtime();
    ZeroRequest local;
    ZeroRequest* r = zero_comm_begin(c, req, &local, ZERO_ALLGATHER);
    if (c->world == 1 || count == 0) { return req ? 0 : zero_comm_finish_blocking(c, r, t0); }
    if (c->span == ZERO_SPAN_HIER) {
        r->buf = buf; r->count = count;
        if (zero_phases_begin(c, r, ZERO_OP_AG, 0, 0, 0, NULL) != 0) { return -1; }
        return req ? 0 : zero_comm_wait(c, r);
    }
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
    zero_comm_count(c, ZERO_ALLGATHER, -1, (double)(c->world - 1) * (double)count * sizeof(float));
    return req ? 0 : zero_comm_finish_blocking(c, r, t0);
}

int zero_reduce_scatter(ZeroComm* c, const float* send, float* recv, size_t count, float* stage, ZeroRequest* req) {
    double t0 = MPI_Wtime();
    ZeroRequest local;
    ZeroRequest* r = zero_comm_begin(c, req, &local, ZERO_REDUCE_SCATTER);
    if (count == 0) { return req ? 0 : zero_comm_finish_blocking(c, r, t0); }
    if (c->world == 1) {
        memcpy(recv, send, count * sizeof(float));  // the sum over one rank is its own block
        return req ? 0 : zero_comm_finish_blocking(c, r, t0);
    }
    r->send = send; r->out = recv; r->count = count;
    size_t fb;
    if (c->span == ZERO_SPAN_HIER) {   // hops of all-to-all and sums
        fb = ((size_t)c->world + (size_t)c->nodes) * count * sizeof(float);
        stage = NULL;
    } else {
        r->piece = zero_rs_piece(c->world, count);
        fb = zero_rs_stage_elems(c->world, count) * sizeof(float);
    }
    if (zero_phases_begin(c, r, ZERO_OP_RS, 0, fb, 0, stage) != 0) { return -1; }
    return req ? 0 : zero_comm_wait(c, r);
}

int zero_allreduce(ZeroComm* c, float* buf, size_t count, float* stage, ZeroRequest* req) {
    double t0 = MPI_Wtime();
    ZeroRequest local;
    ZeroRequest* r = zero_comm_begin(c, req, &local, ZERO_ALLREDUCE);
    if (c->world == 1 || count == 0) { return req ? 0 : zero_comm_finish_blocking(c, r, t0); }
    if (c->span == ZERO_SPAN_HIER && count % (size_t)c->per_node == 0) {
        r->buf = buf; r->count = count;
        size_t fb = (count + count / (size_t)c->per_node) * sizeof(float);
        if (zero_phases_begin(c, r, ZERO_OP_AR, 0, fb, 0, NULL) != 0) { return -1; }
        return req ? 0 : zero_comm_wait(c, r);
    }
    if (c->span != ZERO_SPAN_HIER && count % (size_t)c->world == 0 && count / (size_t)c->world <= (size_t)INT_MAX) {
        size_t b = count / (size_t)c->world;
        r->buf = buf; r->send = buf; r->out = buf + (size_t)c->rank * b; r->count = b;
        r->piece = zero_rs_piece(c->world, b);
        if (zero_phases_begin(c, r, ZERO_OP_AR, 0, zero_rs_stage_elems(c->world, b) * sizeof(float), 0, stage) != 0) { return -1; }
        return req ? 0 : zero_comm_wait(c, r);
    }
    int nchunks = zero_comm_nchunks("all-reduce", count);
    if (nchunks < 0) { return -1; }
    for (int k = 0; k < nchunks; k++) {
        size_t off = (size_t)k * (size_t)ZERO_COMM_CHUNK;
        int n = zero_comm_chunk_len(count, off);
        int rc = MPI_Iallreduce(MPI_IN_PLACE, buf + off, n, MPI_FLOAT, MPI_SUM, c->comm, &r->reqs[r->n]);
        if (rc != MPI_SUCCESS) { zero_comm_abandon(r); return zero_comm_mpi_error("MPI_Iallreduce (all-reduce)", rc); }
        r->n++;
    }
    zero_comm_count(c, ZERO_ALLREDUCE, -1, 2.0 * (double)(c->world - 1) * (double)count * sizeof(float) / (double)c->world);
    return req ? 0 : zero_comm_finish_blocking(c, r, t0);
}

int zero_allgather_q(ZeroComm* c, float* buf, size_t count, ZeroRequest* req) {
    double t0 = MPI_Wtime();
    ZeroRequest local;
    ZeroRequest* r = zero_comm_begin(c, req, &local, ZERO_ALLGATHER);
    if (count == 0) { return req ? 0 : zero_comm_finish_blocking(c, r, t0); }
    r->buf = buf; r->count = count; r->qb = zero_quant_bytes(count);
    if (zero_phases_begin(c, r, ZERO_OP_AG, 1, 0, (size_t)c->world * r->qb, NULL) != 0) { return -1; }
    return req ? 0 : zero_comm_wait(c, r);
}

int zero_reduce_scatter_q(ZeroComm* c, const float* send, float* recv, size_t count, ZeroRequest* req) {
    double t0 = MPI_Wtime();
    ZeroRequest local;
    ZeroRequest* r = zero_comm_begin(c, req, &local, ZERO_REDUCE_SCATTER);
    if (count == 0) { return req ? 0 : zero_comm_finish_blocking(c, r, t0); }
    r->send = send; r->out = recv; r->count = count;
    size_t fb = c->span == ZERO_SPAN_HIER ? (size_t)c->nodes * count * sizeof(float) : 0;
    size_t qb = 2 * (size_t)c->world * zero_quant_bytes(count);
    if (zero_phases_begin(c, r, ZERO_OP_RS, 1, fb, qb, NULL) != 0) { return -1; }
    return req ? 0 : zero_comm_wait(c, r);
}

int zero_allreduce_scalars(ZeroComm* c, double* buf, int count) {
    if (count < 0) { return zero_error("zero comm: scalar all-reduce of a negative count (%d)", count); }
    c->calls[ZERO_SCALAR]++;
    if (c->world == 1 || count == 0) { return 0; }
    double t0 = MPI_Wtime();
    zero_watch_enter("scalar all-reduce", -1);
    int rc = MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_DOUBLE, MPI_SUM, c->comm);
    zero_watch_leave();
    c->wait_ms += (MPI_Wtime() - t0) * 1e3;
    if (rc != MPI_SUCCESS) { return zero_comm_mpi_error("MPI_Allreduce (scalar all-reduce)", rc); }
    zero_comm_count(c, ZERO_SCALAR, -1, 2.0 * (double)(c->world - 1) * (double)count * sizeof(double) / (double)c->world);
    return 0;
}

int zero_broadcast(ZeroComm* c, void* buf, size_t bytes, int root) {
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
    if (c->rank != root) { zero_comm_count(c, ZERO_BROADCAST, -1, (double)bytes); }
    return 0;
}

int zero_barrier(ZeroComm* c) {
    double t0 = MPI_Wtime();
    zero_watch_enter("barrier", -1);
    int rc = MPI_Barrier(c->comm);
    zero_watch_leave();
    c->wait_ms += (MPI_Wtime() - t0) * 1e3;
    if (rc != MPI_SUCCESS) { return zero_comm_mpi_error("MPI_Barrier (barrier)", rc); }
    return 0;
}

int zero_comm_test(ZeroComm* c, ZeroRequest* req, int* done) {
    *done = 1;
    if (c->head != NULL && zero_comm_progress(c) != 0) { return -1; }
    if (req == NULL) { return 0; }
    if (req->op != ZERO_OP_PLAIN && req->live && req->nphases > 1) { *done = 0; return 0; }  // queued, not yet through
    if (req->n <= 0) { return 0; }
    int flag = 0;
    int rc = MPI_Testall(req->n, req->reqs, &flag, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) {
        req->n = 0;  // a failed collective is over for this rank; waiting again would not help
        if (req->op != ZERO_OP_PLAIN) { zero_phases_done(c, req); }
        return zero_comm_mpi_error(zero_comm_kind_name(req->kind), rc);
    }
    if (!flag) { *done = 0; return 0; }
    req->n = 0;
    if (req->op != ZERO_OP_PLAIN && req->live) {   // one phase: its local work, then over
        zero_phase_post(c, req);
        zero_phases_done(c, req);
    }
    return 0;
}

int zero_comm_wait(ZeroComm* c, ZeroRequest* req) {
    if (req == NULL) { return 0; }
    int phased = req->op != ZERO_OP_PLAIN && req->live;
    if (!phased && req->n <= 0) { return 0; }
    if (!phased && c->head == NULL) { return zero_comm_finish_blocking(c, req, MPI_Wtime()); }
    // poll: this request, and the queue whose later phases other ranks may be waiting on
    double t0 = MPI_Wtime();
    int done = 0, rc = 0;
    zero_watch_enter(zero_comm_kind_name(req->kind), req->unit);
    while (rc == 0 && !done) { rc = zero_comm_test(c, req, &done); }
    zero_watch_leave();
    c->wait_ms += (MPI_Wtime() - t0) * 1e3;
    return rc;
}
