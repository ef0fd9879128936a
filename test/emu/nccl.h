/*
 NCCL as zero3/nccl.cuh uses it, for the emulated GPU (cuda_runtime.h and emu_device.h
 here). Each collective is an operation on its stream: when it reaches the head it starts
 as a non-blocking MPI collective on the communicator's own MPI communicator (its ranks',
 split from MPI_COMM_WORLD by the unique id: see ncclCommInitRank),
 and it completes when MPI says so (the scheduler polls it), so it overlaps the other
 streams' work as on a GPU. The ranks issue a communicator's collectives in the same order,
 as NCCL requires too.

 bf16 sums round as NCCL's ring does: the chunk a rank owns is summed along the ring in
 fp32 and rounded to bf16 after every hop (start at rank r+1, add r+2, ..., end at r), so
 the result depends on the world size as it does on a GPU; an all-reduce is that
 reduce-scatter followed by an all-gather. fp32 and fp64 sums are MPI's.

 Point to point (NCCL's own rules, docs.nvidia.com/deeplearning/nccl, "Point-to-point
 communication" and "Group Calls"): ncclSend and ncclRecv between ncclGroupStart and the
 outermost ncclGroupEnd are one operation, issued at that ncclGroupEnd: every transfer of the
 group is posted at once (MPI_Irecv, and MPI_Issend: a send completes only once its receive
 is posted, as NCCL's blocks the GPU until the peer is there), so they never wait for each
 other, and those to one peer are matched in call order (MPI's order per source and tag is
 NCCL's rule). Outside a group a send or receive is a group of one, blocking its stream until
 the peer matches it: two ranks that each send before receiving, ungrouped, hang as they do
 on a GPU (here until the 300 s without progress that stop a run). A group whose transfers
 are on several streams joins them, behaving as if posted on every one of them (NCCL's
 rule): it starts after the work issued so far on each, and each waits for it. A receive must get exactly its count (NCCL asks the same count and type on
 both sides): anything else stops the run. Collectives called inside a group are issued at
 their call, as before (NCCL fuses them into the group's launch; nothing may depend on the
 order among a group's operations).

 ncclCommSplit: MPI_Comm_split of the parent's ranks, the same rule (color, then key, ties by
 the parent's rank), NCCL_SPLIT_NOCOLOR giving NULL. Each communicator holds two duplicates:
 one for its collectives (started by the emulated GPU, whenever a stream reaches them) and one
 for the host's own calls (the split), so that a host-side collective can never be matched
 out of order with a GPU-side one.

 Faults (NCCL's "Fault tolerance"): ncclCommGetAsyncError gives the communicator's
 asynchronous error, ncclSuccess unless a test hook says otherwise; ncclCommAbort aborts
 the communicator's operations still queued or running, which then complete at once with
 their buffers undefined, as aborted kernels end (its MPI communicators are not freed: abort
 may come from another thread than the one running the emulated GPU, and MPI here has no
 thread support; they go with the process). A communicator is not used after its abort.
 The test hook EMU_NCCL_STOP=R:K[:error] stops world rank R (SIGSTOP) as its GPU starts its
 K-th collective or group of sends and receives (counted from 1 over every communicator), or
 with `:error` leaves that collective never completing and the communicator reporting
 ncclRemoteError, as a peer's network failure would.

 The host's blocking MPI calls are interposed (MPI_Allreduce, _Bcast, _Barrier, _Gather,
 _Allgather, _Reduce_scatter_block, _Wait, _Waitall, _Finalize): each starts its
 non-blocking form and keeps the emulated GPU running while it waits, because a real GPU
 carries on with its queued collectives while the host sits in MPI; without it two ranks
 could each wait for the other.
*/
#ifndef EMU_NCCL_H
#define EMU_NCCL_H

#include <mpi.h>      // the collectives
#include <vector>     // bf16 sums in fp32; a group's transfers
#include <memory>     // a collective's state, shared by its start and its poll
#include <cuda_runtime.h>  // cudaStream_t, the streams (the emulated runtime here)
#include <cuda_bf16.h>     // __nv_bfloat16
#include <stddef.h>   // size_t
#include <string.h>   // memset
#include <limits.h>   // INT_MAX: an MPI count
#include <stdlib.h>   // getenv, atoi: the test hook
#include <signal.h>   // raise, SIGSTOP: the test hook

// (NCCL's values)
typedef enum {
    ncclSuccess = 0, ncclSystemError = 2, ncclInvalidArgument = 4, ncclInvalidUsage = 5, ncclRemoteError = 6, ncclInProgress = 7
} ncclResult_t;
typedef enum {
    ncclInt8 = 0, ncclChar = 0, ncclUint8 = 1, ncclFloat16 = 6, ncclFloat32 = 7, ncclFloat64 = 8, ncclBfloat16 = 9
} ncclDataType_t;
typedef enum { ncclSum = 0 } ncclRedOp_t;
typedef struct { char internal[128]; } ncclUniqueId;
typedef struct { int blocking; } ncclConfig_t;  // (nothing of it is read here)
#define NCCL_CONFIG_INITIALIZER {1}
#define NCCL_SPLIT_NOCOLOR -1
// comm: the collectives' and transfers' duplicate; ctl: the host's own calls (the split);
// aborted: ncclCommAbort was called (from any thread); async_error: ncclCommGetAsyncError's
typedef struct EmuNcclComm { int rank, world; MPI_Comm comm, ctl; int aborted; ncclResult_t async_error; }* ncclComm_t;

static inline const char* ncclGetErrorString(ncclResult_t r) {
    return r == ncclSuccess ? "no error" : r == ncclRemoteError ? "remote process exited or there was a network error"
                                                                : "emulated NCCL error";
}
static inline ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
    *asyncError = (ncclResult_t)__atomic_load_n((int*)&comm->async_error, __ATOMIC_ACQUIRE);
    return ncclSuccess;
}
static inline ncclResult_t ncclCommAbort(ncclComm_t comm) {
    __atomic_store_n(&comm->aborted, 1, __ATOMIC_RELEASE);
    return ncclSuccess;
}
static inline int emu_nccl_aborted(ncclComm_t c) { return __atomic_load_n(&c->aborted, __ATOMIC_ACQUIRE); }

// EMU_NCCL_STOP=R:K[:error] (see the top), as a collective of c starts: 1 when it must never
// complete (the error case)
static inline int emu_nccl_test_fault(ncclComm_t c) {
    static int rank = -2, k = 0, error = 0, started = 0;
    if (rank == -2) {
        const char* e = getenv("EMU_NCCL_STOP");
        const char* colon = e != NULL ? strchr(e, ':') : NULL;
        rank = colon != NULL ? atoi(e) : -1;
        k = colon != NULL ? atoi(colon + 1) : 0;
        error = colon != NULL && strstr(colon + 1, ":error") != NULL;
    }
    int me = -1;
    if (rank < 0 || (PMPI_Comm_rank(MPI_COMM_WORLD, &me), me != rank) || ++started != k) { return 0; }
    if (!error) { raise(SIGSTOP); return 0; }
    __atomic_store_n((int*)&c->async_error, (int)ncclRemoteError, __ATOMIC_RELEASE);
    return 1;
}
// The unique id names its maker (MPI_COMM_WORLD's rank, + 1); ncclCommInitRank splits
// MPI_COMM_WORLD by it, so the ranks given one id (a group's, broadcast by its rank 0) make
// one communicator. That split is over every rank of MPI_COMM_WORLD: every rank makes its
// communicators in the same sequence, each group's with its own id at the same point (as
// zero3/nccl.cuh's users do), which a real NCCL does not ask.
static inline ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
    memset(id, 0, sizeof(*id));
    int me = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    me += 1;
    memcpy(id->internal, &me, sizeof(me));
    return ncclSuccess;
}
static inline ncclResult_t ncclCommInitRank(ncclComm_t* c, int world, ncclUniqueId id, int rank) {
    int color = 0, got = 0;
    memcpy(&color, id.internal, sizeof(color));
    if (color <= 0) { return ncclInvalidArgument; }  // not from ncclGetUniqueId
    MPI_Comm dup, ctl;
    if (MPI_Comm_split(MPI_COMM_WORLD, color, rank, &dup) != MPI_SUCCESS || MPI_Comm_split(MPI_COMM_WORLD, color, rank, &ctl) != MPI_SUCCESS) {
        return ncclSystemError;
    }
    MPI_Comm_size(dup, &got);
    if (got != world) { return ncclInvalidUsage; }  // ranks joined under another count
    *c = new EmuNcclComm{rank, world, dup, ctl};
    return ncclSuccess;
}
static inline ncclResult_t ncclCommDestroy(ncclComm_t c) {
    cudaDeviceSynchronize();  // (its collectives done first)
    MPI_Comm_free(&c->comm);
    MPI_Comm_free(&c->ctl);
    delete c;
    return ncclSuccess;
}
static inline ncclResult_t ncclCommCount(const ncclComm_t c, int* count) { *count = c->world; return ncclSuccess; }
static inline ncclResult_t ncclCommUserRank(const ncclComm_t c, int* rank) { *rank = c->rank; return ncclSuccess; }

// the MPI type of an element (bf16: its bits; its sums are done here), NULL: not emulated
static inline MPI_Datatype emu_nccl_type(ncclDataType_t t) {
    switch (t) {
    case ncclInt8: return MPI_INT8_T;
    case ncclUint8: return MPI_UINT8_T;
    case ncclFloat32: return MPI_FLOAT;
    case ncclFloat64: return MPI_DOUBLE;
    case ncclBfloat16: return MPI_UNSIGNED_SHORT;
    default: return MPI_DATATYPE_NULL;
    }
}
static inline size_t emu_nccl_size(ncclDataType_t t) {
    return t == ncclFloat64 ? 8 : t == ncclBfloat16 ? 2 : t == ncclInt8 || t == ncclUint8 ? 1 : 4;
}

// one collective in flight: MPI's request, and for bf16 the ring's buffers and phase
struct EmuNcclState {
    MPI_Request req;
    int phase;                        // bf16: 0 the exchange of chunks, 1 the all-gather (all-reduce)
    std::vector<__nv_bfloat16> in, mine, all;
};

// the ring's sum of this rank's chunk: in holds every rank's copy of it (world x n), summed
// from rank r+1 round to r, rounded to bf16 at every hop
static inline void emu_nccl_ring_sum(const __nv_bfloat16* in, __nv_bfloat16* out, size_t n, int rank, int world) {
    for (size_t i = 0; i < n; i++) {
        __nv_bfloat16 acc = in[(size_t)((rank + 1) % world) * n + i];
        for (int h = 2; h <= world; h++) { acc = __nv_bfloat16((float)acc + (float)in[(size_t)((rank + h) % world) * n + i]); }
        out[i] = acc;
    }
}

static inline int emu_mpi_test(MPI_Request* r) {
    int flag = 0;
    if (PMPI_Test(r, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) { emu_die("an emulated NCCL collective failed in MPI"); }
    return flag;
}

// queues a collective: start() when it reaches its stream's head, poll() until done
template <typename S, typename P>
static inline ncclResult_t emu_nccl_issue(ncclComm_t c, cudaStream_t s, const char* what, const void* send, size_t send_bytes,
                                          void* recv, size_t recv_bytes, S start, P poll, const char* file, int line) {
    if (emu_nccl_aborted(c)) { return ncclInvalidUsage; }
    emu_find_range(send, send_bytes, what);
    emu_find_range(recv, recv_bytes, what);
    EmuOp* op = emu_op_new(emu_stream_id(s), what, file, line);
    if (emu_where(send) != 0) { op->acc.push_back(emu_range(send, send_bytes, 0)); }
    if (emu_where(recv) != 0) { op->acc.push_back(emu_range(recv, recv_bytes, 1)); }
    std::shared_ptr<EmuNcclState> st = std::make_shared<EmuNcclState>();
    std::shared_ptr<int> hung = std::make_shared<int>(0);  // EMU_NCCL_STOP's error: never started, never completes
    op->run = [st, start, c, hung](EmuOp*) {
        *hung = emu_nccl_test_fault(c);
        if (!*hung) { start(st.get()); }
    };
    op->poll = [st, poll, c, hung](EmuOp*) { return emu_nccl_aborted(c) || (!*hung && poll(st.get())); };
    emu_op_push(op);
    return ncclSuccess;
}

static inline ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t,
                                         ncclComm_t c, cudaStream_t s, const char* file = __builtin_FILE(),
                                         int line = __builtin_LINE()) {
    if (emu_nccl_type(t) == MPI_DATATYPE_NULL) { return ncclInvalidArgument; }
    size_t bytes = count * emu_nccl_size(t);
    if (t != ncclBfloat16) {
        return emu_nccl_issue(c, s, "ncclAllReduce", send, bytes, recv, bytes,
            [=](EmuNcclState* st) {
                PMPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count, emu_nccl_type(t), MPI_SUM, c->comm, &st->req);
            },
            [](EmuNcclState* st) { return emu_mpi_test(&st->req); }, file, line);
    }
    // bf16: chunks of ceil(count / world), padded; the ring's reduce-scatter then all-gather
    size_t chunk = (count + (size_t)c->world - 1) / (size_t)c->world;
    return emu_nccl_issue(c, s, "ncclAllReduce", send, bytes, recv, bytes,
        [=](EmuNcclState* st) {
            std::vector<__nv_bfloat16> padded(chunk * (size_t)c->world, __nv_bfloat16(0.0f));
            memcpy(padded.data(), send, bytes);
            st->in.resize(padded.size());
            st->phase = 0;
            st->all = padded;  // (kept alive until the exchange is done)
            PMPI_Ialltoall(st->all.data(), (int)chunk, MPI_UNSIGNED_SHORT, st->in.data(), (int)chunk, MPI_UNSIGNED_SHORT,
                           c->comm, &st->req);
        },
        [=](EmuNcclState* st) {
            if (!emu_mpi_test(&st->req)) { return 0; }
            if (st->phase == 0) {
                st->mine.resize(chunk);
                emu_nccl_ring_sum(st->in.data(), st->mine.data(), chunk, c->rank, c->world);
                st->phase = 1;
                PMPI_Iallgather(st->mine.data(), (int)chunk, MPI_UNSIGNED_SHORT, st->all.data(), (int)chunk,
                                MPI_UNSIGNED_SHORT, c->comm, &st->req);
                return 0;
            }
            memcpy(recv, st->all.data(), bytes);
            return 1;
        }, file, line);
}

static inline ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t,
                                             ncclComm_t c, cudaStream_t s, const char* file = __builtin_FILE(),
                                             int line = __builtin_LINE()) {
    if (emu_nccl_type(t) == MPI_DATATYPE_NULL) { return ncclInvalidArgument; }
    size_t es = emu_nccl_size(t);
    if (t != ncclBfloat16) {
        return emu_nccl_issue(c, s, "ncclReduceScatter", send, count * es * (size_t)c->world, recv, count * es,
            [=](EmuNcclState* st) {
                PMPI_Ireduce_scatter_block(send, recv, (int)count, emu_nccl_type(t), MPI_SUM, c->comm, &st->req);
            },
            [](EmuNcclState* st) { return emu_mpi_test(&st->req); }, file, line);
    }
    return emu_nccl_issue(c, s, "ncclReduceScatter", send, count * es * (size_t)c->world, recv, count * es,
        [=](EmuNcclState* st) {
            st->all.assign((const __nv_bfloat16*)send, (const __nv_bfloat16*)send + count * (size_t)c->world);
            st->in.resize(count * (size_t)c->world);
            PMPI_Ialltoall(st->all.data(), (int)count, MPI_UNSIGNED_SHORT, st->in.data(), (int)count, MPI_UNSIGNED_SHORT,
                           c->comm, &st->req);
        },
        [=](EmuNcclState* st) {
            if (!emu_mpi_test(&st->req)) { return 0; }
            emu_nccl_ring_sum(st->in.data(), (__nv_bfloat16*)recv, count, c->rank, c->world);
            return 1;
        }, file, line);
}

// in place when send is this rank's block of recv, as NCCL allows
static inline ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t t, ncclComm_t c,
                                         cudaStream_t s, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    if (emu_nccl_type(t) == MPI_DATATYPE_NULL) { return ncclInvalidArgument; }
    size_t es = emu_nccl_size(t);
    int in_place = (const char*)send == (const char*)recv + (size_t)c->rank * count * es;
    return emu_nccl_issue(c, s, "ncclAllGather", send, count * es, recv, count * es * (size_t)c->world,
        [=](EmuNcclState* st) {
            PMPI_Iallgather(in_place ? MPI_IN_PLACE : send, (int)count, emu_nccl_type(t), recv, (int)count, emu_nccl_type(t),
                            c->comm, &st->req);
        },
        [](EmuNcclState* st) { return emu_mpi_test(&st->req); }, file, line);
}

// ----------------------------------------------------------------------------
// point to point: ncclSend, ncclRecv and the groups that fuse them (see the top)

struct EmuP2p {                 // one send or receive of a group
    int send;
    void* buf;
    size_t bytes;
    int peer;
    ncclComm_t comm;
    int stream;
    const char* file;
    int line;
};
inline int emu_nccl_group_depth = 0;           // ncclGroupStart calls not yet ended
inline std::vector<EmuP2p> emu_nccl_group;     // the open group's sends and receives, in call order
#define EMU_NCCL_P2P_TAG 7                     // (any tag: the collectives on the same duplicate never match it)

// queues the group's transfers as one operation on the first one's stream, joined with the others
static inline void emu_nccl_group_issue(std::vector<EmuP2p> g) {
    int s = g[0].stream;
    for (const EmuP2p& x : g) {  // the group starts after everything issued so far on each of its streams
        if (x.stream != s) { emu_join(&emu_queue(s)->clock, &emu_queue(x.stream)->clock); }
        emu_find_range(x.buf, x.bytes, x.send ? "ncclSend" : "ncclRecv");
    }
    const char* what = g.size() > 1 ? "ncclGroupEnd (sends and receives)" : g[0].send ? "ncclSend" : "ncclRecv";
    EmuOp* op = emu_op_new(s, what, g[0].file, g[0].line);
    for (const EmuP2p& x : g) {
        if (emu_where(x.buf) != 0 && x.bytes > 0) { op->acc.push_back(emu_range(x.buf, x.bytes, !x.send)); }
    }
    std::shared_ptr<std::vector<MPI_Request>> reqs = std::make_shared<std::vector<MPI_Request>>(g.size());
    std::shared_ptr<int> hung = std::make_shared<int>(0);  // (as emu_nccl_issue's)
    op->run = [g, reqs, hung](EmuOp*) {
        *hung = emu_nccl_test_fault(g[0].comm);
        for (size_t k = 0; !*hung && k < g.size(); k++) {
            const EmuP2p& x = g[k];
            int rc = x.send ? PMPI_Issend(x.buf, (int)x.bytes, MPI_BYTE, x.peer, EMU_NCCL_P2P_TAG, x.comm->comm, &(*reqs)[k])
                            : PMPI_Irecv(x.buf, (int)x.bytes, MPI_BYTE, x.peer, EMU_NCCL_P2P_TAG, x.comm->comm, &(*reqs)[k]);
            if (rc != MPI_SUCCESS) { emu_die("%s: MPI refused a transfer", x.send ? "ncclSend" : "ncclRecv"); }
        }
    };
    op->poll = [g, reqs, hung](EmuOp*) {
        for (const EmuP2p& x : g) {
            if (emu_nccl_aborted(x.comm)) { return 1; }
        }
        if (*hung) { return 0; }
        int flag = 0;
        std::vector<MPI_Status> st(g.size());
        if (PMPI_Testall((int)g.size(), reqs->data(), &flag, st.data()) != MPI_SUCCESS) {
            emu_die("a send or receive failed in MPI (a receive shorter than its send? NCCL asks the same count and %s",
                    "type on both sides)");
        }
        for (size_t k = 0; flag && k < g.size(); k++) {
            int got = 0;
            if (!g[k].send && (MPI_Get_count(&st[k], MPI_BYTE, &got) != MPI_SUCCESS || (size_t)got != g[k].bytes)) {
                emu_die("ncclRecv: the send matched to it was shorter (NCCL asks the same count and %s", "type on both sides)");
            }
        }
        return flag;
    };
    // every stream of the group waits for it (as if it had been posted on each)
    emu_op_push(op);
    for (const EmuP2p& x : g) { emu_join(&emu_queue(x.stream)->clock, &emu_queue(s)->clock); }
}

static inline ncclResult_t emu_nccl_p2p(int send, const void* buf, size_t count, ncclDataType_t t, int peer, ncclComm_t c,
                                        cudaStream_t s, const char* file, int line) {
    if (emu_nccl_type(t) == MPI_DATATYPE_NULL || peer < 0 || peer >= c->world || count * emu_nccl_size(t) > (size_t)INT_MAX) {
        return ncclInvalidArgument;
    }
    emu_nccl_group.push_back(EmuP2p{send, (void*)buf, count * emu_nccl_size(t), peer, c, emu_stream_id(s), file, line});
    if (emu_nccl_group_depth == 0) {  // alone: a group of one
        emu_nccl_group_issue(emu_nccl_group);
        emu_nccl_group.clear();
    }
    return ncclSuccess;
}
static inline ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s,
                                    const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    return emu_nccl_p2p(1, send, count, t, peer, c, s, file, line);
}
static inline ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s,
                                    const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    return emu_nccl_p2p(0, recv, count, t, peer, c, s, file, line);
}

static inline ncclResult_t ncclGroupStart(void) {
    emu_nccl_group_depth++;
    return ncclSuccess;
}
// the outermost end issues the group's transfers; an end without a start is NCCL's ncclInvalidUsage
static inline ncclResult_t ncclGroupEnd(void) {
    if (emu_nccl_group_depth == 0) { return ncclInvalidUsage; }
    if (--emu_nccl_group_depth == 0 && !emu_nccl_group.empty()) {
        emu_nccl_group_issue(emu_nccl_group);
        emu_nccl_group.clear();
    }
    return ncclSuccess;
}

// ----------------------------------------------------------------------------
// the host's blocking MPI calls, with the emulated GPU running while they wait

// one turn of a host wait: the emulated GPU moves on, or the CPU goes to another rank
static inline void emu_mpi_idle(void) {
    if (!emu_dev.ready || !emu_step()) { sched_yield(); }
}
// waits for r (rc: what starting it returned)
static inline int emu_mpi_wait(MPI_Request* r, MPI_Status* status, int rc) {
    int flag = 0;
    while (rc == MPI_SUCCESS && !flag) {
        rc = PMPI_Test(r, &flag, status);
        if (rc == MPI_SUCCESS && !flag) { emu_mpi_idle(); }
    }
    return rc;
}

// ncclCommSplit (see the top): collective over c's ranks. They first meet at a barrier on the
// host's duplicate, waited for with the emulated GPU running (as in the interposed calls
// below), so that no rank sits in MPI_Comm_split while another waits for GPU work of its
static inline ncclResult_t ncclCommSplit(ncclComm_t c, int color, int key, ncclComm_t* out, ncclConfig_t*) {
    if (color < 0 && color != NCCL_SPLIT_NOCOLOR) { return ncclInvalidArgument; }
    MPI_Request q;
    if (emu_mpi_wait(&q, MPI_STATUS_IGNORE, PMPI_Ibarrier(c->ctl, &q)) != MPI_SUCCESS) { return ncclSystemError; }
    MPI_Comm sub = MPI_COMM_NULL, ctl = MPI_COMM_NULL;
    int mpi_color = color == NCCL_SPLIT_NOCOLOR ? MPI_UNDEFINED : color;
    if (PMPI_Comm_split(c->ctl, mpi_color, key, &sub) != MPI_SUCCESS || PMPI_Comm_split(c->ctl, mpi_color, key, &ctl) != MPI_SUCCESS) {
        return ncclSystemError;
    }
    *out = NULL;
    if (sub == MPI_COMM_NULL) { return ncclSuccess; }
    int rank = 0, world = 0;
    MPI_Comm_rank(sub, &rank);
    MPI_Comm_size(sub, &world);
    *out = new EmuNcclComm{rank, world, sub, ctl};
    return ncclSuccess;
}

#ifdef EMU_DEFINE_GLOBALS
extern "C" {
int MPI_Allreduce(const void* s, void* r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c) {
    MPI_Request q;
    return emu_mpi_wait(&q, MPI_STATUS_IGNORE, PMPI_Iallreduce(s, r, n, t, op, c, &q));
}
int MPI_Bcast(void* b, int n, MPI_Datatype t, int root, MPI_Comm c) {
    MPI_Request q;
    return emu_mpi_wait(&q, MPI_STATUS_IGNORE, PMPI_Ibcast(b, n, t, root, c, &q));
}
int MPI_Barrier(MPI_Comm c) {
    MPI_Request q;
    return emu_mpi_wait(&q, MPI_STATUS_IGNORE, PMPI_Ibarrier(c, &q));
}
int MPI_Gather(const void* s, int sn, MPI_Datatype st, void* r, int rn, MPI_Datatype rt, int root, MPI_Comm c) {
    MPI_Request q;
    return emu_mpi_wait(&q, MPI_STATUS_IGNORE, PMPI_Igather(s, sn, st, r, rn, rt, root, c, &q));
}
int MPI_Allgather(const void* s, int sn, MPI_Datatype st, void* r, int rn, MPI_Datatype rt, MPI_Comm c) {
    MPI_Request q;
    return emu_mpi_wait(&q, MPI_STATUS_IGNORE, PMPI_Iallgather(s, sn, st, r, rn, rt, c, &q));
}
int MPI_Reduce_scatter_block(const void* s, void* r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c) {
    MPI_Request q;
    return emu_mpi_wait(&q, MPI_STATUS_IGNORE, PMPI_Ireduce_scatter_block(s, r, n, t, op, c, &q));
}
int MPI_Wait(MPI_Request* q, MPI_Status* status) { return emu_mpi_wait(q, status, MPI_SUCCESS); }
int MPI_Waitall(int n, MPI_Request* q, MPI_Status* statuses) {
    int flag = 0;
    for (;;) {
        int rc = PMPI_Testall(n, q, &flag, statuses);
        if (rc != MPI_SUCCESS || flag) { return rc; }
        emu_mpi_idle();
    }
}
// the GPU's queued work done before MPI goes away
int MPI_Finalize(void) {
    if (emu_dev.ready) { emu_device_sync("MPI_Finalize"); }
    return PMPI_Finalize();
}
}
#endif

#endif // EMU_NCCL_H
