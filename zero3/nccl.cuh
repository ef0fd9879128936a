/*
 The ZeRO collectives on the GPU, over NCCL: what zero3/comm.h is for host memory.

 One communicator per process, one GPU per rank. Set up through MPI: rank 0 makes the
 NCCL unique id and broadcasts it over the MPI communicator given, every rank joins
 with its MPI rank, so NCCL's ranks are MPI's.

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

 Byte counters: per rank, as a ring algorithm moves them (zero3/comm.h's model), in the
 element size of the collective (a bf16 collective moves half the bytes of an fp32 one, an
 int8 one a quarter). An all-to-all (zero_nccl_alltoall: grouped sends and receives) is a
 hop of a collective and counts its bytes under that collective's kind.
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
#include "zero3/comm.h"      // ZERO_ALLGATHER ... : the collective kinds of the byte counters

typedef struct {
    ncclComm_t comm;
    int rank, world, ready_;   // ready_: the communicator was created (for zero_nccl_free)
    cudaStream_t stream;       // the collectives' stream
    cudaEvent_t after;         // recorded on the compute stream by zero_nccl_after
    cudaEvent_t done;          // recorded on `stream` when the compute stream must wait for it
    double bytes[ZERO_NUM_COLLECTIVES];
    long calls[ZERO_NUM_COLLECTIVES];
} ZeroNccl;

static inline int zero_nccl_error(ncclResult_t r, const char* what) {
    if (r == ncclSuccess) { return 0; }
    return zero_error("zero nccl: %s failed: %s", what, ncclGetErrorString(r));
}

// bytes of an element of the types the engine moves (fp64: its scalars)
static inline size_t zero_nccl_elem_bytes(ncclDataType_t t) {
    return t == ncclFloat32 ? 4 : t == ncclBfloat16 || t == ncclFloat16 ? 2 : t == ncclInt8 || t == ncclUint8 ? 1 : 8;
}

// the device must be chosen (cudaSetDevice) before
static int zero_nccl_init(ZeroNccl* c, MPI_Comm comm) {
    memset(c, 0, sizeof(*c));
    if (MPI_Comm_rank(comm, &c->rank) != MPI_SUCCESS || MPI_Comm_size(comm, &c->world) != MPI_SUCCESS) {
        return zero_error("zero nccl: MPI communicator unusable");
    }
    ncclUniqueId id;
    if (c->rank == 0 && zero_nccl_error(ncclGetUniqueId(&id), "ncclGetUniqueId") != 0) { return -1; }
    if (MPI_Bcast(&id, (int)sizeof(id), MPI_BYTE, 0, comm) != MPI_SUCCESS) {
        return zero_error("zero nccl: broadcasting the NCCL unique id failed");
    }
    if (zero_nccl_error(ncclCommInitRank(&c->comm, c->world, id, c->rank), "ncclCommInitRank") != 0) { return -1; }
    c->ready_ = 1;
    if (zero_cuda(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "creating the collective stream") != 0 ||
        zero_cuda(cudaEventCreateWithFlags(&c->after, cudaEventDisableTiming), "creating an event") != 0 ||
        zero_cuda(cudaEventCreateWithFlags(&c->done, cudaEventDisableTiming), "creating an event") != 0) {
        return -1;
    }
    return 0;
}

static void zero_nccl_free(ZeroNccl* c) {
    if (c->stream != NULL) { cudaStreamSynchronize(c->stream); cudaStreamDestroy(c->stream); }
    if (c->after != NULL) { cudaEventDestroy(c->after); }
    if (c->done != NULL) { cudaEventDestroy(c->done); }
    if (c->ready_) { ncclCommDestroy(c->comm); }
    memset(c, 0, sizeof(*c));
}

// the collective stream waits for the work issued so far on `compute`
static inline int zero_nccl_after(ZeroNccl* c, cudaStream_t compute) {
    if (zero_cuda(cudaEventRecord(c->after, compute), "cudaEventRecord") != 0) { return -1; }
    return zero_cuda(cudaStreamWaitEvent(c->stream, c->after, 0), "cudaStreamWaitEvent");
}

// in place: buf (count) becomes the sum over ranks
static inline int zero_nccl_allreduce(ZeroNccl* c, void* buf, size_t count, ncclDataType_t t) {
    c->calls[ZERO_ALLREDUCE]++;
    c->bytes[ZERO_ALLREDUCE] += 2.0 * (c->world - 1) * (double)count * zero_nccl_elem_bytes(t) / c->world;
    return zero_nccl_error(ncclAllReduce(buf, buf, count, t, ncclSum, c->comm, c->stream), "all-reduce");
}

// send (world * count) summed over ranks; rank r's block of `count` lands in recv (count)
static inline int zero_nccl_reduce_scatter(ZeroNccl* c, const void* send, void* recv, size_t count, ncclDataType_t t) {
    c->calls[ZERO_REDUCE_SCATTER]++;
    c->bytes[ZERO_REDUCE_SCATTER] += (double)(c->world - 1) * (double)count * zero_nccl_elem_bytes(t);
    return zero_nccl_error(ncclReduceScatter(send, recv, count, t, ncclSum, c->comm, c->stream), "reduce-scatter");
}

// in place: buf is world blocks of count; this rank's block r is its input, every
// block is filled from its rank
static inline int zero_nccl_allgather(ZeroNccl* c, void* buf, size_t count, ncclDataType_t t) {
    c->calls[ZERO_ALLGATHER]++;
    c->bytes[ZERO_ALLGATHER] += (double)(c->world - 1) * (double)count * zero_nccl_elem_bytes(t);
    const char* mine = (const char*)buf + (size_t)c->rank * count * zero_nccl_elem_bytes(t);
    return zero_nccl_error(ncclAllGather(mine, buf, count, t, c->comm, c->stream), "all-gather");
}

// send (world blocks of count elements) -> recv (world blocks): block p of send goes to rank p,
// block p of recv comes from rank p (this rank's own through NCCL too). NCCL has no all-to-all
// call: its idiom is a group of a send and a receive per peer, which progress together (no
// transfer waits for another) and, to one peer, in call order. send and recv must not overlap.
// An all-to-all is a hop of one of the engine's collectives (qgZ's reduce-scatter: within the
// node, then across), so its bytes are counted under that collective's `kind`, as zero3/comm.h
// counts its hops: the world - 1 blocks that leave this rank; the call is the caller's to count.
static inline int zero_nccl_alltoall(ZeroNccl* c, const void* send, void* recv, size_t count, ncclDataType_t t, int kind) {
    size_t bytes = count * zero_nccl_elem_bytes(t);
    c->bytes[kind] += (double)(c->world - 1) * (double)bytes;
    if (zero_nccl_error(ncclGroupStart(), "ncclGroupStart") != 0) { return -1; }
    ncclResult_t r = ncclSuccess;
    for (int p = 0; p < c->world && r == ncclSuccess; p++) {
        r = ncclSend((const char*)send + (size_t)p * bytes, count, t, p, c->comm, c->stream);
        if (r == ncclSuccess) { r = ncclRecv((char*)recv + (size_t)p * bytes, count, t, p, c->comm, c->stream); }
    }
    ncclResult_t end = ncclGroupEnd();  // (the group closed whatever failed inside it)
    if (zero_nccl_error(r, "all-to-all: a send or receive") != 0) { return -1; }
    return zero_nccl_error(end, "all-to-all: ncclGroupEnd");
}

#endif // ZERO3_NCCL_CUH
