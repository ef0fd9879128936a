/*
 The ZeRO collectives on the GPU, over NCCL: what zero3/comm.h is for host memory.

 One communicator per group of ranks, one GPU per rank. Set up through MPI: the group's
 rank 0 makes the NCCL unique id and broadcasts it over the MPI communicator given, every
 rank joins with its MPI rank, so NCCL's ranks are MPI's. The engine's first one owns the
 collective stream and its events; the others (MiCS's replicas, hpZ's group) are made with
 it as their parent and share them, so every collective of a rank runs in one order.

 Streams and ordering, without the host ever waiting inside a step:
   - the collectives run on their own stream (zero_nccl's `stream`), so a reduction or
     a gather overlaps the kernels on the compute stream;
   - zero_nccl_after(c, compute): the collective stream waits (an event, on the GPU)
     for everything issued so far on the compute stream: call it before a collective
     whose input the compute stream wrote;
   - the compute stream waits for every collective issued so far on an event recorded
     on `stream` (`done`) before it reads what they wrote (zero3/device.cuh's
     zero_dev_join, which also times the wait).
 Reusing one event for many records is fine: cudaStreamWaitEvent captures the event's
 most recent record at the time of the call.

 Nodes. Each communicator knows how its ranks lie on the nodes (zero3/comm.h's ZeroSpan,
 from zero_comm_node's number); one of M nodes of n ranks each, node-major, also gets the
 node's communicator and the cross-node one (same local index on every node), split from
 it with ncclCommSplit. NCCL's own collectives (all-gather, reduce-scatter, all-reduce) are
 left to NCCL, which is topology-aware itself; only qgZ's quantised reduce-scatter runs in
 hops of our own (inside the node, then across), because it quantises between them.

 Byte counters: per rank, as a ring algorithm moves them (zero3/comm.h's model), in the
 element size of the collective (a bf16 collective moves half the bytes of an fp32 one, an
 int8 one a quarter), and split by link as a ring in rank order crosses the nodes: a rank
 sends to the next, so on M nodes of n ranks the last rank of each node sends across and
 the others inside (the sum over ranks, what the report compares with the network, is that
 of any ring through the nodes one after the other); on one node nothing crosses; one rank
 per node, or an uneven layout, count every byte as crossing (an upper bound). A hop of our
 own counts on its communicator's link. An all-to-all (zero_nccl_alltoall: grouped sends and
 receives) is a hop of a collective and counts its bytes under that collective's kind.
 Watched (zero3/nccl_watch.cuh): every collective is bracketed by two events for the watchdog,
 with the unit it moves (-1: none), and every communicator is polled for asynchronous errors
 while the host waits for the GPU (zero_gpu_wait) and aborted when the process ends on one.

 Errors return -1 with zero_error naming the collective and NCCL's or CUDA's message.
*/
#ifndef ZERO3_NCCL_CUH
#define ZERO3_NCCL_CUH

#include <string.h>          // memset
#include <mpi.h>             // the unique id's broadcast
#include <nccl.h>            // ncclComm_t and the collectives
#include <cuda_runtime.h>    // streams and events
#include "zero3/util.h"      // zero_error
#include "zero3/cuda_util.cuh"  // zero_cuda
#include "zero3/comm.h"      // ZERO_ALLGATHER ..., ZERO_LINK_*, ZeroSpan: the counters' kinds and links, the nodes
#include "zero3/quant.cuh"   // qwZ and qgZ: zero_quantize_cuda, zero_dequantize(_add)_cuda
#include "zero3/nccl_watch.cuh"  // zero_nccl_watch_*: every collective bracketed for the watchdog; zero_gpu_wait

typedef struct {
    ncclComm_t comm;
    int rank, world, ready_;   // ready_: the communicator was created (for zero_nccl_free)
    int owns_stream;           // the stream and events below are this one's (made without a parent)
    cudaStream_t stream;       // the collectives' stream
    cudaEvent_t after;         // recorded on the compute stream by zero_nccl_after
    cudaEvent_t done;          // recorded on `stream` when the compute stream must wait for it
    ZeroSpan span;             // how the ranks lie on the nodes (zero3/comm.h)
    ncclComm_t node_comm;      // hierarchical span: this node's ranks (rank: span.local)
    ncclComm_t cross_comm;     //   and the ranks of this local index on every node (rank: span.node)
    double bytes[ZERO_NUM_COLLECTIVES];
    long calls[ZERO_NUM_COLLECTIVES];
    double link_bytes[ZERO_NUM_LINKS][ZERO_NUM_COLLECTIVES];  // the same bytes, by link
} ZeroNccl;

static inline int zero_nccl_error(ncclResult_t r, const char* what) {
    if (r == ncclSuccess) { return 0; }
    return zero_error("zero nccl: %s failed: %s", what, ncclGetErrorString(r));
}

// bytes of an element of the types the engine moves (fp64: its scalars)
static inline size_t zero_nccl_elem_bytes(ncclDataType_t t) {
    return t == ncclFloat32 ? 4 : t == ncclBfloat16 || t == ncclFloat16 ? 2 : t == ncclInt8 || t == ncclUint8 ? 1 : 8;
}

// A communicator over the ranks of `comm` (collective over it), told the node of this rank
// (zero_comm_node's number; -1: all on one node). Without a parent it creates the collective
// stream and events; with one it shares the parent's. The device must be chosen
// (cudaSetDevice) before. On failure what was made is left for zero_nccl_free.
static int zero_nccl_init(ZeroNccl* c, MPI_Comm comm, int node, const ZeroNccl* parent) {
    memset(c, 0, sizeof(*c));
    if (MPI_Comm_rank(comm, &c->rank) != MPI_SUCCESS || MPI_Comm_size(comm, &c->world) != MPI_SUCCESS) {
        return zero_error("zero nccl: MPI communicator unusable");
    }
    zero_span_set(&c->span, ZERO_SPAN_NODE, 1, c->world, 0, c->rank);
    if (node >= 0 && zero_comm_span(comm, node, &c->span) != 0) { return -1; }
    ncclUniqueId id;
    if (c->rank == 0 && zero_nccl_error(ncclGetUniqueId(&id), "ncclGetUniqueId") != 0) { return -1; }
    if (MPI_Bcast(&id, (int)sizeof(id), MPI_BYTE, 0, comm) != MPI_SUCCESS) {
        return zero_error("zero nccl: broadcasting the NCCL unique id failed");
    }
    if (zero_nccl_error(ncclCommInitRank(&c->comm, c->world, id, c->rank), "ncclCommInitRank") != 0) { return -1; }
    c->ready_ = 1;
    if (zero_nccl_watch_add(c->comm) != 0) { return -1; }
    if (c->span.span == ZERO_SPAN_HIER) {
        if (zero_nccl_error(ncclCommSplit(c->comm, c->span.node, c->span.local, &c->node_comm, NULL), "ncclCommSplit (the node)") != 0 ||
            zero_nccl_error(ncclCommSplit(c->comm, c->span.local, c->span.node, &c->cross_comm, NULL), "ncclCommSplit (across nodes)") != 0 ||
            zero_nccl_watch_add(c->node_comm) != 0 || zero_nccl_watch_add(c->cross_comm) != 0) {
            return -1;
        }
    }
    if (parent != NULL) {
        c->stream = parent->stream; c->after = parent->after; c->done = parent->done;
        return 0;
    }
    c->owns_stream = 1;
    if (zero_cuda(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "creating the collective stream") != 0 ||
        zero_cuda(cudaEventCreateWithFlags(&c->after, cudaEventDisableTiming), "creating an event") != 0 ||
        zero_cuda(cudaEventCreateWithFlags(&c->done, cudaEventDisableTiming), "creating an event") != 0) {
        return -1;
    }
    return 0;
}

// (communicators sharing a stream: free the children before the parent)
static void zero_nccl_free(ZeroNccl* c) {
    if (c->owns_stream) {
        if (c->stream != NULL) { cudaStreamSynchronize(c->stream); cudaStreamDestroy(c->stream); }
        if (c->after != NULL) { cudaEventDestroy(c->after); }
        if (c->done != NULL) { cudaEventDestroy(c->done); }
    } else if (c->stream != NULL) {
        cudaStreamSynchronize(c->stream);
    }
    if (c->node_comm != NULL) { zero_nccl_watch_remove(c->node_comm); ncclCommDestroy(c->node_comm); }
    if (c->cross_comm != NULL) { zero_nccl_watch_remove(c->cross_comm); ncclCommDestroy(c->cross_comm); }
    if (c->ready_) { zero_nccl_watch_remove(c->comm); ncclCommDestroy(c->comm); }
    memset(c, 0, sizeof(*c));
}

// the link a rank's sends in one of NCCL's collectives cross, by the ring model (see the top)
static inline int zero_nccl_ring_link(const ZeroNccl* c) {
    if (c->span.span == ZERO_SPAN_NODE) { return ZERO_LINK_INTRA; }
    if (c->span.span == ZERO_SPAN_HIER) { return c->span.local == c->span.per_node - 1 ? ZERO_LINK_INTER : ZERO_LINK_INTRA; }
    return ZERO_LINK_INTER;
}

static inline void zero_nccl_count(ZeroNccl* c, int kind, int link, double bytes) {
    c->bytes[kind] += bytes;
    c->link_bytes[link][kind] += bytes;
}

// closes the watchdog's record of a collective issued with result rc (zero3/nccl_watch.cuh):
// `return zero_nccl_watch_begin(...) != 0 ? -1 : zero_nccl_watched(<the call>);`
static inline int zero_nccl_watched(int rc) { return zero_nccl_watch_end() == 0 ? rc : -1; }

// a group of collectives (ncclGroupStart ... zero_nccl_group_end) on c's stream, one record
// for the watchdog: `what` of unit (-1: none)
static inline int zero_nccl_group_start(ZeroNccl* c, const char* what, int unit) {
    if (zero_nccl_watch_begin(c->stream, what, unit) != 0) { return -1; }
    if (zero_nccl_error(ncclGroupStart(), "ncclGroupStart") != 0) { zero_nccl_watch_end(); return -1; }
    return 0;
}
static inline int zero_nccl_group_end(void) { return zero_nccl_watched(zero_nccl_error(ncclGroupEnd(), "ncclGroupEnd")); }

// the collective stream waits for the work issued so far on `compute`
static inline int zero_nccl_after(ZeroNccl* c, cudaStream_t compute) {
    if (zero_cuda(cudaEventRecord(c->after, compute), "cudaEventRecord") != 0) { return -1; }
    return zero_cuda(cudaStreamWaitEvent(c->stream, c->after, 0), "cudaStreamWaitEvent");
}

// in place: buf (count) becomes the sum over ranks; unit: the one it is of (-1: none), for the watchdog
static inline int zero_nccl_allreduce(ZeroNccl* c, void* buf, size_t count, ncclDataType_t t, int unit) {
    c->calls[ZERO_ALLREDUCE]++;
    zero_nccl_count(c, ZERO_ALLREDUCE, zero_nccl_ring_link(c), 2.0 * (c->world - 1) * (double)count * zero_nccl_elem_bytes(t) / c->world);
    return zero_nccl_watch_begin(c->stream, zero_comm_kind_name(ZERO_ALLREDUCE), unit) != 0 ? -1 :
           zero_nccl_watched(zero_nccl_error(ncclAllReduce(buf, buf, count, t, ncclSum, c->comm, c->stream), "all-reduce"));
}

// send (world * count) summed over ranks; rank r's block of `count` lands in recv (count)
static inline int zero_nccl_reduce_scatter(ZeroNccl* c, const void* send, void* recv, size_t count, ncclDataType_t t, int unit) {
    c->calls[ZERO_REDUCE_SCATTER]++;
    zero_nccl_count(c, ZERO_REDUCE_SCATTER, zero_nccl_ring_link(c), (double)(c->world - 1) * (double)count * zero_nccl_elem_bytes(t));
    return zero_nccl_watch_begin(c->stream, zero_comm_kind_name(ZERO_REDUCE_SCATTER), unit) != 0 ? -1 :
           zero_nccl_watched(zero_nccl_error(ncclReduceScatter(send, recv, count, t, ncclSum, c->comm, c->stream), "reduce-scatter"));
}

// in place: buf is world blocks of count; this rank's block r is its input, every
// block is filled from its rank
static inline int zero_nccl_allgather(ZeroNccl* c, void* buf, size_t count, ncclDataType_t t, int unit) {
    c->calls[ZERO_ALLGATHER]++;
    zero_nccl_count(c, ZERO_ALLGATHER, zero_nccl_ring_link(c), (double)(c->world - 1) * (double)count * zero_nccl_elem_bytes(t));
    const char* mine = (const char*)buf + (size_t)c->rank * count * zero_nccl_elem_bytes(t);
    return zero_nccl_watch_begin(c->stream, zero_comm_kind_name(ZERO_ALLGATHER), unit) != 0 ? -1 :
           zero_nccl_watched(zero_nccl_error(ncclAllGather(mine, buf, count, t, c->comm, c->stream), "all-gather"));
}

// send (k blocks of count elements) -> recv (k blocks) over `comm` of k ranks (c's own, or
// its node or cross-node communicator): block p of send goes to rank p, block p of recv
// comes from rank p (this rank's own through NCCL too). NCCL has no all-to-all call: its
// idiom is a group of a send and a receive per peer, which progress together (no transfer
// waits for another) and, to one peer, in call order. send and recv must not overlap.
// An all-to-all is a hop of one of the engine's collectives (qgZ's reduce-scatter: within the
// node, then across), so its bytes are counted under that collective's `kind` on `link`, as
// zero3/comm.h counts its hops: the k - 1 blocks that leave this rank; the call is the
// caller's to count.
static inline int zero_nccl_alltoall_on(ZeroNccl* c, ncclComm_t comm, int k, int link, const void* send, void* recv,
                                        size_t count, ncclDataType_t t, int kind) {
    size_t bytes = count * zero_nccl_elem_bytes(t);
    zero_nccl_count(c, kind, link, (double)(k - 1) * (double)bytes);
    // (one record for the watchdog, or a part of the collective's it is a hop of)
    if (zero_nccl_group_start(c, "all-to-all", -1) != 0) { return -1; }
    ncclResult_t r = ncclSuccess;
    for (int p = 0; p < k && r == ncclSuccess; p++) {
        r = ncclSend((const char*)send + (size_t)p * bytes, count, t, p, comm, c->stream);
        if (r == ncclSuccess) { r = ncclRecv((char*)recv + (size_t)p * bytes, count, t, p, comm, c->stream); }
    }
    int end = zero_nccl_group_end();  // (the group closed whatever failed inside it)
    if (zero_nccl_error(r, "all-to-all: a send or receive") != 0) { return -1; }
    return end;
}

// over c's own ranks
static inline int zero_nccl_alltoall(ZeroNccl* c, const void* send, void* recv, size_t count, ncclDataType_t t, int kind) {
    int link = c->span.span == ZERO_SPAN_NODE ? ZERO_LINK_INTRA : ZERO_LINK_INTER;
    return zero_nccl_alltoall_on(c, c->comm, c->world, link, send, recv, count, t, kind);
}

// ----------------------------------------------------------------------------
// ZeRO++'s quantised collectives (zero3/quant.cuh's int8 blocks, a scale per 256 values)

// qwZ: buf as zero_nccl_allgather's (world blocks of count, this rank's block its input),
// T fp32 or bf16. This rank's block is quantised into q, the int8 blocks all-gathered, and
// every block dequantised into buf, this rank's too, so all ranks hold the same values.
// q: world * zero_quant_bytes(count) bytes, 4-byte aligned (count is a multiple of 16).
template <typename T>
static int zero_nccl_allgather_q_issue(ZeroNccl* c, T* buf, size_t count, unsigned char* q) {
    size_t qb = zero_quant_bytes(count);
    c->calls[ZERO_ALLGATHER]++;
    zero_nccl_count(c, ZERO_ALLGATHER, zero_nccl_ring_link(c), (double)(c->world - 1) * (double)qb);
    unsigned char* mine = q + (size_t)c->rank * qb;
    if (zero_quantize_cuda(buf + (size_t)c->rank * count, count, mine, c->stream) != 0 ||
        zero_nccl_error(ncclAllGather(mine, q, qb, ncclUint8, c->comm, c->stream), "all-gather (qwZ)") != 0) {
        return -1;
    }
    for (int p = 0; p < c->world; p++) {
        if (zero_dequantize_cuda(q + (size_t)p * qb, count, buf + (size_t)p * count, c->stream) != 0) { return -1; }
    }
    return 0;
}

template <typename T>
static int zero_nccl_allgather_q(ZeroNccl* c, T* buf, size_t count, unsigned char* q, int unit) {
    return zero_nccl_watch_begin(c->stream, zero_comm_kind_name(ZERO_ALLGATHER), unit) != 0 ? -1 :
           zero_nccl_watched(zero_nccl_allgather_q_issue(c, buf, count, q));
}

// the scratch zero_nccl_reduce_scatter_q needs for blocks of `count`
static inline size_t zero_nccl_rs_q_scratch(const ZeroNccl* c, size_t count) {
    return 2 * (size_t)c->world * zero_quant_bytes(count) + (size_t)c->span.nodes * count * sizeof(float);
}

// qgZ: send (world blocks of count, T fp32 or bf16; block p is rank p's) summed over the ranks
// into out (count) fp32, each hop's blocks sent as int8 and summed in fp32 after dequantising,
// in rank order. On M nodes of n ranks (node-major) two hops: inside the node, each rank
// sends local rank j the M blocks j will own a part of (those of ranks m * n + j) and sums
// what the node's ranks sent it into M partial sums; then across nodes, each partial sum to
// the node whose rank owns it, summed again. Otherwise one hop over all the ranks. scratch:
// zero_nccl_rs_q_scratch bytes, 4-byte aligned.
template <typename T>
static int zero_nccl_reduce_scatter_q_issue(ZeroNccl* c, const T* send, float* out, size_t count, unsigned char* scratch) {
    size_t qb = zero_quant_bytes(count);
    unsigned char* sq = scratch;                           // (world * qb) what this rank sends
    unsigned char* rq = scratch + (size_t)c->world * qb;   // (world * qb) what it receives
    float* partial = (float*)(scratch + 2 * (size_t)c->world * qb);  // (M * count) the node's sums
    cudaStream_t s = c->stream;
    c->calls[ZERO_REDUCE_SCATTER]++;
    if (c->span.span != ZERO_SPAN_HIER) {
        for (int p = 0; p < c->world; p++) {
            if (zero_quantize_cuda(send + (size_t)p * count, count, sq + (size_t)p * qb, s) != 0) { return -1; }
        }
        if (zero_nccl_alltoall(c, sq, rq, qb, ncclUint8, ZERO_REDUCE_SCATTER) != 0 ||
            zero_cuda(cudaMemsetAsync(out, 0, count * sizeof(float), s), "cudaMemsetAsync") != 0) {
            return -1;
        }
        for (int p = 0; p < c->world; p++) {
            if (zero_dequantize_add_cuda(rq + (size_t)p * qb, count, out, s) != 0) { return -1; }
        }
        return 0;
    }
    int M = c->span.nodes, n = c->span.per_node;
    // hop 1, inside the node: to local rank j, blocks m * n + j for m = 0..M-1, in that order
    for (int j = 0; j < n; j++) {
        for (int m = 0; m < M; m++) {
            if (zero_quantize_cuda(send + (size_t)(m * n + j) * count, count, sq + (size_t)(j * M + m) * qb, s) != 0) { return -1; }
        }
    }
    if (zero_nccl_alltoall_on(c, c->node_comm, n, ZERO_LINK_INTRA, sq, rq, (size_t)M * qb, ncclUint8, ZERO_REDUCE_SCATTER) != 0 ||
        zero_cuda(cudaMemsetAsync(partial, 0, (size_t)M * count * sizeof(float), s), "cudaMemsetAsync") != 0) {
        return -1;
    }
    for (int j = 0; j < n; j++) {  // (from local rank j: its blocks for this rank, node by node)
        for (int m = 0; m < M; m++) {
            if (zero_dequantize_add_cuda(rq + (size_t)(j * M + m) * qb, count, partial + (size_t)m * count, s) != 0) { return -1; }
        }
    }
    // hop 2, across nodes: partial sum m to node m (the rank of this local index there)
    for (int m = 0; m < M; m++) {
        if (zero_quantize_cuda(partial + (size_t)m * count, count, sq + (size_t)m * qb, s) != 0) { return -1; }
    }
    if (zero_nccl_alltoall_on(c, c->cross_comm, M, ZERO_LINK_INTER, sq, rq, qb, ncclUint8, ZERO_REDUCE_SCATTER) != 0 ||
        zero_cuda(cudaMemsetAsync(out, 0, count * sizeof(float), s), "cudaMemsetAsync") != 0) {
        return -1;
    }
    for (int m = 0; m < M; m++) {
        if (zero_dequantize_add_cuda(rq + (size_t)m * qb, count, out, s) != 0) { return -1; }
    }
    return 0;
}
template <typename T>
static int zero_nccl_reduce_scatter_q(ZeroNccl* c, const T* send, float* out, size_t count, unsigned char* scratch, int unit) {
    return zero_nccl_watch_begin(c->stream, zero_comm_kind_name(ZERO_REDUCE_SCATTER), unit) != 0 ? -1 :
           zero_nccl_watched(zero_nccl_reduce_scatter_q_issue(c, send, out, count, scratch));
}

#endif // ZERO3_NCCL_CUH
