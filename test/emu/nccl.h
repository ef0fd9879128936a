/*
 NCCL as zero3/nccl.cuh uses it, for the emulated GPU (cuda_runtime.h and emu_device.h
 here). Each collective is an operation on its stream: when it reaches the head it starts
 as a non-blocking MPI collective on the communicator's own duplicate of MPI_COMM_WORLD,
 and it completes when MPI says so (the scheduler polls it), so it overlaps the other
 streams' work as on a GPU. The ranks issue a communicator's collectives in the same order,
 as NCCL requires too.

 bf16 sums round as NCCL's ring does: the chunk a rank owns is summed along the ring in
 fp32 and rounded to bf16 after every hop (start at rank r+1, add r+2, ..., end at r), so
 the result depends on the world size as it does on a GPU; an all-reduce is that
 reduce-scatter followed by an all-gather. fp32 and fp64 sums are MPI's.

 The host's blocking MPI calls are interposed (MPI_Allreduce, _Bcast, _Barrier, _Gather,
 _Allgather, _Reduce_scatter_block, _Wait, _Waitall, _Finalize): each starts its
 non-blocking form and keeps the emulated GPU running while it waits, because a real GPU
 carries on with its queued collectives while the host sits in MPI; without it two ranks
 could each wait for the other.
*/
#ifndef EMU_NCCL_H
#define EMU_NCCL_H

#include <mpi.h>      // the collectives
#include <vector>     // bf16 sums in fp32
#include <memory>     // a collective's state, shared by its start and its poll
#include <cuda_runtime.h>  // cudaStream_t, the streams (the emulated runtime here)
#include <cuda_bf16.h>     // __nv_bfloat16
#include <stddef.h>   // size_t
#include <string.h>   // memset

typedef enum { ncclSuccess = 0, ncclSystemError = 2, ncclInvalidArgument = 4 } ncclResult_t;
typedef enum { ncclFloat16 = 6, ncclFloat32 = 7, ncclFloat64 = 8, ncclBfloat16 = 9 } ncclDataType_t;
typedef enum { ncclSum = 0 } ncclRedOp_t;
typedef struct { char internal[128]; } ncclUniqueId;
typedef struct EmuNcclComm { int rank, world; MPI_Comm comm; }* ncclComm_t;

static inline const char* ncclGetErrorString(ncclResult_t r) { return r == ncclSuccess ? "no error" : "emulated NCCL error"; }
static inline ncclResult_t ncclGetUniqueId(ncclUniqueId* id) { memset(id, 0, sizeof(*id)); return ncclSuccess; }
static inline ncclResult_t ncclCommInitRank(ncclComm_t* c, int world, ncclUniqueId, int rank) {
    MPI_Comm dup;
    if (MPI_Comm_dup(MPI_COMM_WORLD, &dup) != MPI_SUCCESS) { return ncclSystemError; }
    *c = new EmuNcclComm{rank, world, dup};
    return ncclSuccess;
}
static inline ncclResult_t ncclCommDestroy(ncclComm_t c) {
    cudaDeviceSynchronize();  // (its collectives done first)
    MPI_Comm_free(&c->comm);
    delete c;
    return ncclSuccess;
}
static inline ncclResult_t ncclGroupStart(void) { return ncclSuccess; }
static inline ncclResult_t ncclGroupEnd(void) { return ncclSuccess; }

static inline MPI_Datatype emu_nccl_type(ncclDataType_t t) {
    return t == ncclFloat32 ? MPI_FLOAT : t == ncclFloat64 ? MPI_DOUBLE : t == ncclBfloat16 ? MPI_UNSIGNED_SHORT : MPI_DATATYPE_NULL;
}
static inline size_t emu_nccl_size(ncclDataType_t t) { return t == ncclFloat64 ? 8 : t == ncclBfloat16 ? 2 : 4; }

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
static inline ncclResult_t emu_nccl_issue(cudaStream_t s, const char* what, const void* send, size_t send_bytes, void* recv,
                                          size_t recv_bytes, S start, P poll, const char* file, int line) {
    emu_find_range(send, send_bytes, what);
    emu_find_range(recv, recv_bytes, what);
    EmuOp* op = emu_op_new(emu_stream_id(s), what, file, line);
    if (emu_where(send) != 0) { op->acc.push_back(emu_range(send, send_bytes, 0)); }
    if (emu_where(recv) != 0) { op->acc.push_back(emu_range(recv, recv_bytes, 1)); }
    std::shared_ptr<EmuNcclState> st = std::make_shared<EmuNcclState>();
    op->run = [st, start](EmuOp*) { start(st.get()); };
    op->poll = [st, poll](EmuOp*) { return poll(st.get()); };
    emu_op_push(op);
    return ncclSuccess;
}

static inline ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t,
                                         ncclComm_t c, cudaStream_t s, const char* file = __builtin_FILE(),
                                         int line = __builtin_LINE()) {
    if (emu_nccl_type(t) == MPI_DATATYPE_NULL) { return ncclInvalidArgument; }
    size_t bytes = count * emu_nccl_size(t);
    if (t != ncclBfloat16) {
        return emu_nccl_issue(s, "ncclAllReduce", send, bytes, recv, bytes,
            [=](EmuNcclState* st) {
                PMPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count, emu_nccl_type(t), MPI_SUM, c->comm, &st->req);
            },
            [](EmuNcclState* st) { return emu_mpi_test(&st->req); }, file, line);
    }
    // bf16: chunks of ceil(count / world), padded; the ring's reduce-scatter then all-gather
    size_t chunk = (count + (size_t)c->world - 1) / (size_t)c->world;
    return emu_nccl_issue(s, "ncclAllReduce", send, bytes, recv, bytes,
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
        return emu_nccl_issue(s, "ncclReduceScatter", send, count * es * (size_t)c->world, recv, count * es,
            [=](EmuNcclState* st) {
                PMPI_Ireduce_scatter_block(send, recv, (int)count, emu_nccl_type(t), MPI_SUM, c->comm, &st->req);
            },
            [](EmuNcclState* st) { return emu_mpi_test(&st->req); }, file, line);
    }
    return emu_nccl_issue(s, "ncclReduceScatter", send, count * es * (size_t)c->world, recv, count * es,
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
    return emu_nccl_issue(s, "ncclAllGather", send, count * es, recv, count * es * (size_t)c->world,
        [=](EmuNcclState* st) {
            PMPI_Iallgather(in_place ? MPI_IN_PLACE : send, (int)count, emu_nccl_type(t), recv, (int)count, emu_nccl_type(t),
                            c->comm, &st->req);
        },
        [](EmuNcclState* st) { return emu_mpi_test(&st->req); }, file, line);
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
