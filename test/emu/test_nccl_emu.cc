/*
 The emulated NCCL's bf16 sums (test/emu/nccl.h) round as a GPU's ring does: after every
 hop, in ring order, so that tests of bf16 reductions see results that depend on the world
 size as they do on a GPU. Each rank contributes 1.0 to every element and rank 0 256.0: in
 bf16 (8 bits of mantissa) 256 + 1 rounds back to 256, so the sum depends on where along
 the ring the 256 comes. Checked against a ring summed here, element by element (the
 chunk an element falls in says where its ring starts), and against one rounding of the
 exact sum, which a GPU does not give; the reduce-scatter likewise; fp32 exact.
 usage: mpirun -np N test_nccl_emu   (N >= 3); prints PASS/FAIL lines and "ok" at the end
*/
#define EMU_DEFINE_GLOBALS
#include <stdio.h>        // printf
#include <math.h>         // ldexpf, frexpf
#include <vector>         // buffers
#include <mpi.h>          // the ranks
#include <cuda_runtime.h> // test/emu's
#include <nccl.h>         // test/emu's

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

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_);
    ncclUniqueId id;
    ncclGetUniqueId(&id);
    ncclComm_t comm;
    ncclCommInitRank(&comm, world_, id, rank_);
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
    ncclCommDestroy(comm);
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank_ == 0) { printf("%s: emulated NCCL at %d ranks\n", all == 0 ? "ok" : "FAILED", world_); }
    MPI_Finalize();
    return all == 0 ? 0 : 1;
}
