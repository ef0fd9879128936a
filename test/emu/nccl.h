/*
 NCCL as zero3/nccl.cuh uses it, over MPI_COMM_WORLD, for test/emu/test_device_emu.cc: each
 collective runs at the call (MPI's), so a group is just its calls in order; the ranks
 issue them in the same order, as NCCL requires too. Buffers are host memory (see
 cuda_runtime.h here).
*/
#ifndef EMU_NCCL_H
#define EMU_NCCL_H

#include <mpi.h>      // the collectives
#include <vector>     // bf16 sums in fp32
#include <cuda_runtime.h>  // cudaStream_t (the emulated runtime here)
#include <cuda_bf16.h>     // __nv_bfloat16
#include <stddef.h>   // size_t
#include <string.h>   // memset

typedef enum { ncclSuccess = 0, ncclSystemError = 2, ncclInvalidArgument = 4 } ncclResult_t;
typedef enum { ncclFloat16 = 6, ncclFloat32 = 7, ncclFloat64 = 8, ncclBfloat16 = 9 } ncclDataType_t;
typedef enum { ncclSum = 0 } ncclRedOp_t;
typedef struct { char internal[128]; } ncclUniqueId;
typedef struct EmuNcclComm { int rank, world; }* ncclComm_t;

static inline const char* ncclGetErrorString(ncclResult_t r) { return r == ncclSuccess ? "no error" : "emulated NCCL error"; }
static inline ncclResult_t ncclGetUniqueId(ncclUniqueId* id) { memset(id, 0, sizeof(*id)); return ncclSuccess; }
static inline ncclResult_t ncclCommInitRank(ncclComm_t* c, int world, ncclUniqueId, int rank) {
    *c = new EmuNcclComm{rank, world};
    return ncclSuccess;
}
static inline ncclResult_t ncclCommDestroy(ncclComm_t c) { delete c; return ncclSuccess; }
static inline ncclResult_t ncclGroupStart(void) { return ncclSuccess; }
static inline ncclResult_t ncclGroupEnd(void) { return ncclSuccess; }

// fp32 and fp64 as themselves; bf16 sums are done in fp32 and rounded once (NCCL rounds
// after each hop of its ring: at one rank the two agree, both being copies)
static inline MPI_Datatype emu_nccl_type(ncclDataType_t t) {
    return t == ncclFloat32 ? MPI_FLOAT : t == ncclFloat64 ? MPI_DOUBLE : t == ncclBfloat16 ? MPI_UNSIGNED_SHORT : MPI_DATATYPE_NULL;
}
static inline size_t emu_nccl_size(ncclDataType_t t) { return t == ncclFloat64 ? 8 : t == ncclBfloat16 ? 2 : 4; }

static inline std::vector<float> emu_nccl_widen(const void* p, size_t n) {
    std::vector<float> f(n);
    for (size_t i = 0; i < n; i++) { f[i] = (float)((const __nv_bfloat16*)p)[i]; }
    return f;
}
static inline void emu_nccl_narrow(void* p, const std::vector<float>& f) {
    for (size_t i = 0; i < f.size(); i++) { ((__nv_bfloat16*)p)[i] = __nv_bfloat16(f[i]); }
}

static inline ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t,
                                         ncclComm_t, cudaStream_t) {
    if (emu_nccl_type(t) == MPI_DATATYPE_NULL) { return ncclInvalidArgument; }
    int rc;
    if (t == ncclBfloat16) {
        std::vector<float> f = emu_nccl_widen(send, count);
        rc = MPI_Allreduce(MPI_IN_PLACE, f.data(), (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        emu_nccl_narrow(recv, f);
    } else {
        rc = MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count, emu_nccl_type(t), MPI_SUM, MPI_COMM_WORLD);
    }
    return rc == MPI_SUCCESS ? ncclSuccess : ncclSystemError;
}

static inline ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t,
                                             ncclComm_t c, cudaStream_t) {
    if (emu_nccl_type(t) == MPI_DATATYPE_NULL) { return ncclInvalidArgument; }
    int rc;
    if (t == ncclBfloat16) {
        std::vector<float> f = emu_nccl_widen(send, count * (size_t)c->world), out(count);
        rc = MPI_Reduce_scatter_block(f.data(), out.data(), (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        emu_nccl_narrow(recv, out);
    } else {
        rc = MPI_Reduce_scatter_block(send, recv, (int)count, emu_nccl_type(t), MPI_SUM, MPI_COMM_WORLD);
    }
    return rc == MPI_SUCCESS ? ncclSuccess : ncclSystemError;
}

// in place when send is this rank's block of recv, as NCCL allows
static inline ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t t, ncclComm_t c,
                                         cudaStream_t) {
    if (emu_nccl_type(t) == MPI_DATATYPE_NULL) { return ncclInvalidArgument; }
    int in_place = (const char*)send == (const char*)recv + (size_t)c->rank * count * emu_nccl_size(t);
    int rc = MPI_Allgather(in_place ? MPI_IN_PLACE : send, (int)count, emu_nccl_type(t), recv, (int)count,
                           emu_nccl_type(t), MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? ncclSuccess : ncclSystemError;
}

#endif // EMU_NCCL_H
