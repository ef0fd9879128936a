/*
 The emulated NCCL (test/emu/nccl.h) against what NCCL documents.

 bf16 sums round as a GPU's ring does: after every hop, in ring order, so that tests of bf16
 reductions see results that depend on the world size as they do on a GPU. Each rank
 contributes 1.0 to every element and rank 0 256.0: in bf16 (8 bits of mantissa) 256 + 1
 rounds back to 256, so the sum depends on where along the ring the 256 comes. Checked
 against a ring summed here, element by element (the chunk an element falls in says where
 its ring starts), and against one rounding of the exact sum, which a GPU does not give; the
 reduce-scatter likewise; fp32 exact.

 What the device engine's quantised collectives will need, each as NCCL's user guide states
 it: int8 and uint8 (gathered as bytes, summed as integers); ncclSend / ncclRecv fused by
 ncclGroupStart / ncclGroupEnd ("calls within a group ... should never block each other":
 an all-to-all with this rank's own block, a ring of neighbours; "point-to-point calls within
 a group targeting the same peer ... are executed in order": two messages of one size to one
 peer land in the order sent), a send and a receive outside a group (each blocking its
 stream until matched, ordered here so that they match), a group over two streams (it waits
 for the work issued before it on both, and both wait for it: the race checker stops the run
 otherwise), groups nested, an end without a start (ncclInvalidUsage), a peer out of range
 (ncclInvalidArgument); ncclCommSplit (ranks of a color ordered by key, ties by the parent's
 rank; NCCL_SPLIT_NOCOLOR gives NULL; the new communicator's all-reduce and all-gather over
 its own ranks, made while the parent still has an all-reduce queued; the parent usable
 after); and zero3/nccl.cuh's zero_nccl_alltoall on int8 with its byte count. The watchdog's
 records of zero3/nccl_watch.cuh (a ring of 3 here): gathers issued past a full ring land, the
 ring never over full; ncclCommGetAsyncError of a sound communicator is ncclSuccess.
 usage: mpirun -np N test_nccl_emu   (N >= 3); prints PASS/FAIL lines and "ok" at the end
*/
#define EMU_DEFINE_GLOBALS
#include <stdio.h>        // printf
#include <math.h>         // ldexpf, frexpf
#include <vector>         // buffers
#include <mpi.h>          // the ranks
#include <stdint.h>       // int8_t, uint8_t
#include <cuda_runtime.h> // test/emu's
#include <nccl.h>         // test/emu's
#define ZERO_NCCL_WATCH_RING 3  // (zero3/nccl_watch.cuh's records: a ring that fills)
#include "zero3/nccl.cuh" // zero_nccl_alltoall, zero_nccl_allgather and their watch, over test/emu's NCCL

static int rank_ = 0, world_ = 1, failures = 0;
static void check(const char* what, int ok) {
    if (!ok) { failures++; }
    if (!ok || rank_ == 0) { printf("%s rank %d: %s\n", ok ? "PASS" : "FAIL", rank_, what); }
}

// round to bf16 here, independently of the emulator's type: nearest, ties to even
static float bf16_round(float x) {
    int e;
    float m = frexpf(x, &e);           // x = m 2^e, 0.5 <= |m| < 1
    float scaled = ldexpf(m, 8);       // 8 significant bits
    float r = nearbyintf(scaled);      // (the default rounding mode: ties to even)
    return ldexpf(r, e - 8);
}
// what rank `owner`'s ring gives: contributions v[(owner + 1) % W], then onwards to owner
static float ring_sum(const std::vector<float>& v, int owner) {
    int W = (int)v.size();
    float acc = v[(owner + 1) % W];
    for (int h = 2; h <= W; h++) { acc = bf16_round(acc + v[(owner + h) % W]); }
    return acc;
}

// device copies of host vectors and back (synchronous)
template <typename T> static T* dev_of(const std::vector<T>& h) {
    T* d = NULL;
    cudaMalloc(&d, h.size() * sizeof(T) + 1);
    cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
    return d;
}
template <typename T> static std::vector<T> host_of(const T* d, size_t n) {
    std::vector<T> h(n);
    cudaDeviceSynchronize();
    cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost);
    return h;
}

// int8 gathered byte for byte (every value -128..127 on some rank); uint8 summed exactly
static void test_int8(ncclComm_t comm, cudaStream_t s) {
    const size_t n = 259;
    auto val = [](int r, size_t i) { return (int8_t)(uint8_t)((size_t)r * 37 + i * 11); };
    std::vector<int8_t> all(n * world_, 0);
    for (size_t i = 0; i < n; i++) { all[(size_t)rank_ * n + i] = val(rank_, i); }
    int8_t* d = dev_of(all);
    ncclAllGather(d + (size_t)rank_ * n, d, n, ncclInt8, comm, s);
    std::vector<int8_t> got = host_of(d, n * world_);
    int ok = 1;
    for (int r = 0; r < world_; r++) {
        for (size_t i = 0; i < n; i++) { ok &= got[(size_t)r * n + i] == val(r, i); }
    }
    check("int8 all-gather: every rank's bytes at its block", ok);
    std::vector<uint8_t> u(n);
    for (size_t i = 0; i < n; i++) { u[i] = (uint8_t)((rank_ + i) % 50); }
    uint8_t* du = dev_of(u);
    ncclAllReduce(du, du, n, ncclUint8, ncclSum, comm, s);
    std::vector<uint8_t> sum = host_of(du, n);
    ok = 1;
    for (size_t i = 0; i < n; i++) {
        int want = 0;
        for (int r = 0; r < world_; r++) { want += (int)((r + i) % 50); }
        ok &= sum[i] == want;
    }
    check("uint8 all-reduce: the integer sum", ok);
    cudaFree(d); cudaFree(du);
}

static void test_p2p(ncclComm_t comm, cudaStream_t s) {
    // an all-to-all: a send and a receive per peer, this rank's own included, in one group
    const size_t n = 5;
    std::vector<float> out(n * world_), in(n * world_, -1.0f);
    for (int p = 0; p < world_; p++) {
        for (size_t i = 0; i < n; i++) { out[(size_t)p * n + i] = 1000.0f * rank_ + 10.0f * p + (float)i; }
    }
    float* d_out = dev_of(out);
    float* d_in = dev_of(in);
    int rc = ncclGroupStart();
    for (int p = 0; p < world_; p++) {
        rc |= ncclSend(d_out + (size_t)p * n, n, ncclFloat32, p, comm, s);
        rc |= ncclRecv(d_in + (size_t)p * n, n, ncclFloat32, p, comm, s);
    }
    rc |= ncclGroupEnd();
    std::vector<float> got = host_of(d_in, n * world_);
    int ok = rc == ncclSuccess;
    for (int p = 0; p < world_; p++) {
        for (size_t i = 0; i < n; i++) { ok &= got[(size_t)p * n + i] == 1000.0f * p + 10.0f * rank_ + (float)i; }
    }
    check("grouped send/recv all-to-all: block p from rank p, this rank's own too", ok);

    // a ring: send to the next, receive from the one before, both in a group (nested in another)
    int next = (rank_ + 1) % world_, prev = (rank_ + world_ - 1) % world_;
    rc = ncclGroupStart();
    rc |= ncclGroupStart();
    rc |= ncclRecv(d_in, n, ncclFloat32, prev, comm, s);
    rc |= ncclGroupEnd();
    rc |= ncclSend(d_out + (size_t)next * n, n, ncclFloat32, next, comm, s);
    rc |= ncclGroupEnd();
    got = host_of(d_in, n);
    ok = rc == ncclSuccess;
    for (size_t i = 0; i < n; i++) { ok &= got[i] == 1000.0f * prev + 10.0f * rank_ + (float)i; }
    check("grouped ring (groups nested): each rank's block from the one before", ok);

    // two messages of one size to one peer in a group land in the order they were sent
    std::vector<float> two(2 * n);
    for (size_t i = 0; i < 2 * n; i++) { two[i] = (float)(rank_ * 100) + (i < n ? 1.0f : 2.0f); }
    float* d_two = dev_of(two);
    rc = ncclGroupStart();
    rc |= ncclRecv(d_in, n, ncclFloat32, prev, comm, s);
    rc |= ncclSend(d_two, n, ncclFloat32, next, comm, s);
    rc |= ncclSend(d_two + n, n, ncclFloat32, next, comm, s);
    rc |= ncclRecv(d_in + n, n, ncclFloat32, prev, comm, s);
    rc |= ncclGroupEnd();
    got = host_of(d_in, 2 * n);
    ok = rc == ncclSuccess;
    for (size_t i = 0; i < 2 * n; i++) { ok &= got[i] == (float)(prev * 100) + (i < n ? 1.0f : 2.0f); }
    check("a group's transfers to one peer matched in call order", ok);

    // outside a group: pairs (0,1), (2,3)...; the lower sends first, the higher receives first
    int partner = rank_ ^ 1;
    if (partner < world_) {
        rc = rank_ < partner ? ncclSend(d_out, n, ncclFloat32, partner, comm, s) : ncclRecv(d_in, n, ncclFloat32, partner, comm, s);
        rc |= rank_ < partner ? ncclRecv(d_in, n, ncclFloat32, partner, comm, s) : ncclSend(d_out, n, ncclFloat32, partner, comm, s);
        got = host_of(d_in, n);
        ok = rc == ncclSuccess;
        for (size_t i = 0; i < n; i++) { ok &= got[i] == 1000.0f * partner + (float)i; }
    } else {
        ok = 1;  // (the odd one out)
    }
    check("send and receive outside a group, in an order that matches", ok);

    // a group over two streams: the send buffer written on s2 before, the receive read on s2 after
    cudaStream_t s2;
    cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
    unsigned char *d_src, *d_dst, *d_copy;
    cudaMalloc(&d_src, 64); cudaMalloc(&d_dst, 64); cudaMalloc(&d_copy, 64);
    cudaDeviceSynchronize();
    cudaMemsetAsync(d_src, rank_ + 1, 64, s2);
    rc = ncclGroupStart();
    rc |= ncclSend(d_src, 64, ncclUint8, next, comm, s);
    rc |= ncclRecv(d_dst, 64, ncclUint8, prev, comm, s2);
    rc |= ncclGroupEnd();
    cudaMemcpyAsync(d_copy, d_dst, 64, cudaMemcpyDeviceToDevice, s2);
    cudaStreamSynchronize(s2);
    std::vector<unsigned char> b = host_of(d_copy, 64);
    ok = rc == ncclSuccess;
    for (int i = 0; i < 64; i++) { ok &= b[i] == prev + 1; }
    check("a group over two streams: after the work before it on both, before the work after it on both", ok);

    // refusals
    check("ncclGroupEnd without ncclGroupStart: ncclInvalidUsage", ncclGroupEnd() == ncclInvalidUsage);
    check("a send to rank world: ncclInvalidArgument", ncclSend(d_out, n, ncclFloat32, world_, comm, s) == ncclInvalidArgument);
    cudaDeviceSynchronize();
    cudaStreamDestroy(s2);
    cudaFree(d_out); cudaFree(d_in); cudaFree(d_two); cudaFree(d_src); cudaFree(d_dst); cudaFree(d_copy);
}

// colors (rank / 2) % 2, the last rank none; keys -rank: each color's ranks in reverse order
static void test_split(ncclComm_t comm, cudaStream_t s) {
    float* d_parent = dev_of(std::vector<float>(3, 1.0f));
    ncclAllReduce(d_parent, d_parent, 3, ncclFloat32, ncclSum, comm, s);  // still queued at the split
    int color = rank_ == world_ - 1 ? NCCL_SPLIT_NOCOLOR : (rank_ / 2) % 2;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    ncclComm_t sub = NULL;
    int rc = ncclCommSplit(comm, color, -rank_, &sub, &config);
    std::vector<int> members;  // parent ranks of this color, by key (-rank): descending
    for (int r = world_ - 2; r >= 0; r--) {
        if (color != NCCL_SPLIT_NOCOLOR && (r / 2) % 2 == color) { members.push_back(r); }
    }
    int ok = rc == ncclSuccess;
    if (color == NCCL_SPLIT_NOCOLOR) {
        ok &= sub == NULL;
    } else {
        int count = -1, me = -1;
        ncclCommCount(sub, &count);
        ncclCommUserRank(sub, &me);
        ok &= count == (int)members.size() && me >= 0 && me < count && members[(size_t)me] == rank_;
        float* d_sum = dev_of(std::vector<float>(1, (float)(rank_ + 1)));
        float* d_ids = dev_of(std::vector<float>((size_t)count, -1.0f));
        cudaMemcpy(d_ids + me, d_sum, sizeof(float), cudaMemcpyDeviceToDevice);
        ncclAllReduce(d_sum, d_sum, 1, ncclFloat32, ncclSum, sub, s);
        ncclAllGather(d_ids + me, d_ids, 1, ncclFloat32, sub, s);
        float want = 0.0f;
        for (int r : members) { want += (float)(r + 1); }
        ok &= host_of(d_sum, 1)[0] == want;
        std::vector<float> ids = host_of(d_ids, (size_t)count);
        for (int k = 0; k < count; k++) { ok &= ids[(size_t)k] == (float)(members[(size_t)k] + 1); }
        ncclCommDestroy(sub);
        cudaFree(d_sum); cudaFree(d_ids);
    }
    check("ncclCommSplit: by color, ordered by key; NOCOLOR gives NULL; collectives over the new ranks", ok);
    check("ncclCommSplit: a color below -1 is ncclInvalidArgument", ncclCommSplit(comm, -2, 0, &sub, &config) == ncclInvalidArgument);
    ncclAllReduce(d_parent, d_parent, 3, ncclFloat32, ncclSum, comm, s);
    std::vector<float> p = host_of(d_parent, 3);
    check("the parent's collectives before and after the split", p[0] == (float)world_ * world_ && p[2] == (float)world_ * world_);
    cudaFree(d_parent);
}

// zero3/nccl.cuh's all-to-all on int8 blocks (qgZ's quantised hops): the blocks, and the bytes
// counted under the collective it is a hop of, the call left to that collective
static void test_zero_alltoall(void) {
    ZeroNccl zc;
    if (zero_nccl_init(&zc, MPI_COMM_WORLD, -1, NULL) != 0) { check(zero_errmsg(), 0); return; }
    const size_t n = 1041;  // zero_quant_bytes(1024): a quantised block of 1024 values
    std::vector<int8_t> out(n * world_), in(n * world_, 0);
    for (int p = 0; p < world_; p++) {
        for (size_t i = 0; i < n; i++) { out[(size_t)p * n + i] = (int8_t)(uint8_t)(rank_ * 61 + p * 7 + i); }
    }
    int8_t* d_out = dev_of(out);
    int8_t* d_in = dev_of(in);
    int rc = zero_nccl_alltoall(&zc, d_out, d_in, n, ncclInt8, ZERO_REDUCE_SCATTER);
    cudaStreamSynchronize(zc.stream);
    std::vector<int8_t> got = host_of(d_in, n * world_);
    int ok = rc == 0;
    for (int p = 0; p < world_; p++) {
        for (size_t i = 0; i < n; i++) { ok &= got[(size_t)p * n + i] == (int8_t)(uint8_t)(p * 61 + rank_ * 7 + i); }
    }
    check("zero_nccl_alltoall (int8): block p from rank p", ok);
    check("zero_nccl_alltoall: (world - 1) blocks counted under the reduce-scatter, no call",
          zc.bytes[ZERO_REDUCE_SCATTER] == (double)(world_ - 1) * n && zc.calls[ZERO_REDUCE_SCATTER] == 0 &&
          zc.bytes[ZERO_ALLGATHER] == 0.0);
    cudaFree(d_out); cudaFree(d_in);
    zero_nccl_free(&zc);
}

// zero3/nccl_watch.cuh: seven gathers issued in a row through a ring of three records (a full
// ring waits for its oldest, whose events serve again) all land, and the host's watched wait
// sees them through; the communicator reports no asynchronous error
static void test_watch(void) {
    ZeroNccl zc;
    if (zero_nccl_init(&zc, MPI_COMM_WORLD, -1, NULL) != 0) { check(zero_errmsg(), 0); return; }
    const size_t n = 5;
    std::vector<float> blocks((size_t)world_ * n, 0.0f);
    int ok = 1;
    float* d = dev_of(blocks);
    for (int k = 0; k < 7; k++) {
        std::vector<float> mine(n);
        for (size_t i = 0; i < n; i++) { mine[i] = (float)(100 * k + 10 * rank_ + (int)i); }
        cudaMemcpyAsync(d + (size_t)rank_ * n, mine.data(), n * sizeof(float), cudaMemcpyHostToDevice, zc.stream);
        ok &= zero_nccl_allgather(&zc, d, n, ncclFloat32, k) == 0 && zero_nccl_watch.count <= 3;
    }
    ok &= zero_gpu_wait(zc.stream, NULL, "the test's gathers") == 0;
    std::vector<float> got = host_of(d, (size_t)world_ * n);
    for (int p = 0; p < world_; p++) {
        for (size_t i = 0; i < n; i++) { ok &= got[(size_t)p * n + i] == (float)(600 + 10 * p + (int)i); }
    }
    check("zero_nccl_watch: seven gathers through a ring of three records land, the ring never over full", ok);
    ncclResult_t err = ncclInvalidUsage;
    check("ncclCommGetAsyncError of a sound communicator: ncclSuccess",
          ncclCommGetAsyncError(zc.comm, &err) == ncclSuccess && err == ncclSuccess);
    cudaFree(d);
    zero_nccl_free(&zc);
}

// communicators of groups, each made from its own unique id (as zero3/nccl.cuh makes MiCS's
// and hpZ's): the ranks of each parity, whose all-reduce sums only its own ranks
static void test_groups(cudaStream_t s) {
    MPI_Comm half;
    MPI_Comm_split(MPI_COMM_WORLD, rank_ % 2, rank_, &half);
    int hr = 0, hw = 0;
    MPI_Comm_rank(half, &hr);
    MPI_Comm_size(half, &hw);
    ncclUniqueId id;
    if (hr == 0) { ncclGetUniqueId(&id); }
    MPI_Bcast(&id, (int)sizeof(id), MPI_BYTE, 0, half);
    ncclComm_t g = NULL;
    int rc = ncclCommInitRank(&g, hw, id, hr);
    check("ncclCommInitRank of a group from its own id", rc == ncclSuccess && g != NULL);
    if (g == NULL) { MPI_Comm_free(&half); return; }
    std::vector<float> one(2, (float)(rank_ + 1));
    float* d = dev_of(one);
    ncclAllReduce(d, d, 2, ncclFloat32, ncclSum, g, s);
    std::vector<float> got = host_of(d, 2);
    float want = 0.0f;  // the sum of rank + 1 over this parity's ranks
    for (int r = rank_ % 2; r < world_; r += 2) { want += (float)(r + 1); }
    check("a group's all-reduce sums its own ranks only", got[0] == want && got[1] == want);
    cudaFree(d);
    ncclCommDestroy(g);
    MPI_Comm_free(&half);
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_);
    ncclUniqueId id;  // (rank 0's, broadcast, as NCCL asks)
    if (rank_ == 0) { ncclGetUniqueId(&id); }
    MPI_Bcast(&id, (int)sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclComm_t comm;
    if (ncclCommInitRank(&comm, world_, id, rank_) != ncclSuccess) { fprintf(stderr, "FAIL ncclCommInitRank\n"); MPI_Abort(MPI_COMM_WORLD, 1); }
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);

    const size_t n = 7 * (size_t)world_ + 3;  // chunks of uneven size at every world size
    std::vector<float> contrib(world_, 1.0f);
    contrib[0] = 256.0f;
    std::vector<__nv_bfloat16> host(n, __nv_bfloat16(contrib[rank_]));
    __nv_bfloat16* buf;
    cudaMalloc(&buf, n * sizeof(__nv_bfloat16));
    cudaMemcpy(buf, host.data(), n * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice);
    ncclAllReduce(buf, buf, n, ncclBfloat16, ncclSum, comm, s);
    cudaStreamSynchronize(s);
    cudaMemcpy(host.data(), buf, n * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost);
    size_t chunk = (n + world_ - 1) / world_;
    int ring_ok = 1, differs = 0;
    float exact = 256.0f + (float)(world_ - 1);
    for (size_t i = 0; i < n; i++) {
        float want = ring_sum(contrib, (int)(i / chunk));
        ring_ok &= (float)host[i] == want;
        differs |= (float)host[i] != bf16_round(exact);
    }
    check("bf16 all-reduce: every element the ring's sum, rounded at each hop", ring_ok);
    check("bf16 all-reduce: some element differs from one rounding of the exact sum", differs);

    // reduce-scatter: this rank's block, summed along its ring
    std::vector<__nv_bfloat16> rs_in(n * world_, __nv_bfloat16(contrib[rank_]));
    __nv_bfloat16 *rs_dev, *rs_out;
    cudaMalloc(&rs_dev, n * world_ * sizeof(__nv_bfloat16));
    cudaMalloc(&rs_out, n * sizeof(__nv_bfloat16));
    cudaMemcpy(rs_dev, rs_in.data(), n * world_ * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice);
    ncclReduceScatter(rs_dev, rs_out, n, ncclBfloat16, ncclSum, comm, s);
    cudaStreamSynchronize(s);
    std::vector<__nv_bfloat16> rs_host(n);
    cudaMemcpy(rs_host.data(), rs_out, n * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost);
    int rs_ok = 1;
    for (size_t i = 0; i < n; i++) { rs_ok &= (float)rs_host[i] == ring_sum(contrib, rank_); }
    check("bf16 reduce-scatter: this rank's block summed along its ring", rs_ok);

    // fp32: exact for these values, whatever the order
    std::vector<float> f(n, contrib[rank_]);
    float* fd;
    cudaMalloc(&fd, n * sizeof(float));
    cudaMemcpy(fd, f.data(), n * sizeof(float), cudaMemcpyHostToDevice);
    ncclAllReduce(fd, fd, n, ncclFloat32, ncclSum, comm, s);
    cudaStreamSynchronize(s);
    cudaMemcpy(f.data(), fd, n * sizeof(float), cudaMemcpyDeviceToHost);
    int f_ok = 1;
    for (size_t i = 0; i < n; i++) { f_ok &= f[i] == exact; }
    check("fp32 all-reduce: the exact sum", f_ok);

    cudaFree(buf); cudaFree(rs_dev); cudaFree(rs_out); cudaFree(fd);

    test_int8(comm, s);
    test_p2p(comm, s);
    test_split(comm, s);
    test_zero_alltoall();
    test_watch();
    test_groups(s);
    ncclCommDestroy(comm);
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank_ == 0) { printf("%s: emulated NCCL at %d ranks\n", all == 0 ? "ok" : "FAILED", world_); }
    MPI_Finalize();
    return all == 0 ? 0 : 1;
}
