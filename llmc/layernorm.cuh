/*
 LayerNorm on the GPU (CUDA twin of llmc/layernorm.h, same math, shapes and eps):
   mean = sum_c x_c / C,  var = sum_c (x_c - mean)^2 / C  (biased),  rstd = 1/sqrt(var + eps)
   out_c = (x_c - mean) * rstd * weight_c + bias_c
 All arithmetic is fp32 whatever floatX is; only the loads and the final stores are floatX.
 mean and rstd are saved in fp32 for the backward pass.

 Forward: one warp per row, 16 bytes a lane at a time where the shapes and pointers allow
 (llmc/cuda_common.cuh's xpack, xpack_width of C), else one element. The variance uses two
 passes (mean first, then squared deviations) like the CPU code: E[x^2] - E[x]^2 cancels
 badly when |mean| >> std, which happens on the residual stream. The row is re-read from
 global memory for each pass; at GPT-2 widths (C <= 1600, 3.2 KB in bf16) the re-reads
 hit L1/L2.

 Backward: dinp per row (one warp per row, as the forward, in the same packs); dweight/dbias
 are sums over all rows (read in the same packs), made DETERMINISTIC without atomics in two
 kernels:
   1. a grid of (column tile) x (row chunk) blocks; each block sums its chunk of rows for
      its 32 columns in a fixed order (fixed per-thread row subsets, then a fixed tree over
      the threads) and writes the fp32 partial sums to `scratch`;
   2. one thread per column adds the partials in chunk order and accumulates into
      dweight/dbias.
 The number of chunks depends only on N = B*T, so the summation order (and the bits of
 the result) depends on the inputs only, not on the GPU or on scheduling.
*/
#ifndef LLMC_LAYERNORM_CUH
#define LLMC_LAYERNORM_CUH

#include <math.h>                  // sqrtf (rsqrtf is avoided: it is approximate)
#include <stddef.h>                // size_t for offsets that may pass 2^31
#include "llmc/cuda_common.cuh"    // floatX, to_float/from_float, warp_reduce_sum, cudaCheck, CEIL_DIV

#ifndef LAYERNORM_EPS
#define LAYERNORM_EPS 1e-5f        // same value as llmc/layernorm.h (torch's default)
#endif

// rows per block in the one-warp-per-row kernels: 8 warps = 256 threads
#define LN_WARPS_PER_BLOCK 8
// backward dweight/dbias: columns per block (one warp wide: a row segment read coalesced)
// and threads stacked over rows within the block
#define LN_BWD_COLS 32
#define LN_BWD_ROWS 8
// at most this many row chunks (partial sums per column); fewer when N is small
#define LN_BWD_MAX_CHUNKS 128
// aim for at least this many rows per chunk, so that tiny N does not make empty chunks
#define LN_BWD_MIN_ROWS_PER_CHUNK 32

// ----------------------------------------------------------------------------
// kernels

// one warp normalizes one row x (C,) into y (C,); stores mean/rstd when the pointers are
// non-null (inference can skip them). Lane l handles the packs of P columns l, l+32, ...
// (llmc/cuda_common.cuh's xpack; P = X128 or 1, see xpack_width).
template <int P>
__device__ __forceinline__ void layernorm_row_warp(floatX* y, float* mean, float* rstd, size_t row,
                                                   const floatX* x, const floatX* weight,
                                                   const floatX* bias, int C, int lane) {
    float sum = 0.0f;
    for (int c = lane * P; c < C; c += 32 * P) {
        xpack<P> xv = load_pack<P>(x + c);
#pragma unroll
        for (int j = 0; j < P; j++) { sum += to_float(xv.v[j]); }
    }
    float m = warp_reduce_sum(sum) / C;
    float var = 0.0f;
    for (int c = lane * P; c < C; c += 32 * P) {
        xpack<P> xv = load_pack<P>(x + c);
#pragma unroll
        for (int j = 0; j < P; j++) { float d = to_float(xv.v[j]) - m; var += d * d; }
    }
    var = warp_reduce_sum(var) / C;
    float s = 1.0f / sqrtf(var + LAYERNORM_EPS);
    for (int c = lane * P; c < C; c += 32 * P) {
        xpack<P> xv = load_pack<P>(x + c), wv = load_pack<P>(weight + c), bv = load_pack<P>(bias + c), yv;
#pragma unroll
        for (int j = 0; j < P; j++) {
            float xhat = (to_float(xv.v[j]) - m) * s;
            yv.v[j] = from_float<floatX>(xhat * to_float(wv.v[j]) + to_float(bv.v[j]));
        }
        store_pack<P>(y + c, yv);
    }
    if (lane == 0) {
        if (mean != nullptr) { mean[row] = m; }
        if (rstd != nullptr) { rstd[row] = s; }
    }
}

// out (N,C), mean (N,), rstd (N,) <- inp (N,C); one warp per row
template <int P>
__global__ void layernorm_forward_kernel(floatX* out, float* mean, float* rstd, const floatX* inp,
                                         const floatX* weight, const floatX* bias, int N, int C) {
    int lane = threadIdx.x % 32;
    size_t row = (size_t)blockIdx.x * LN_WARPS_PER_BLOCK + threadIdx.x / 32;
    if (row >= (size_t)N) { return; }  // whole warps exit together: the shuffles stay full
    layernorm_row_warp<P>(out + row * C, mean, rstd, row, inp + row * C, weight, bias, C, lane);
}

// residual (N,C) = inp1 + inp2, then normed (N,C) = layernorm(residual); one warp per row.
// The sum is rounded to floatX and stored first; the statistics are computed from the
// STORED (rounded) values, so the forward normalizes exactly the tensor that the backward
// will see as its input. Each lane re-reads only the columns it wrote itself (the same
// lane-to-pack mapping in every pass), so no synchronization is needed.
template <int P>
__global__ void fused_residual_layernorm_forward_kernel(floatX* residual, floatX* normed, float* mean,
                                                        float* rstd, const floatX* inp1, const floatX* inp2,
                                                        const floatX* weight, const floatX* bias, int N, int C) {
    int lane = threadIdx.x % 32;
    size_t row = (size_t)blockIdx.x * LN_WARPS_PER_BLOCK + threadIdx.x / 32;
    if (row >= (size_t)N) { return; }
    floatX* r = residual + row * C;
    const floatX* a = inp1 + row * C;
    const floatX* b = inp2 + row * C;
    for (int c = lane * P; c < C; c += 32 * P) {
        xpack<P> av = load_pack<P>(a + c), bv = load_pack<P>(b + c);
#pragma unroll
        for (int j = 0; j < P; j++) { av.v[j] = from_float<floatX>(to_float(av.v[j]) + to_float(bv.v[j])); }
        store_pack<P>(r + c, av);
    }
    layernorm_row_warp<P>(normed + row * C, mean, rstd, row, r, weight, bias, C, lane);
}

// dinp (N,C) += per-row LayerNorm backward; one warp per row.
//   xhat = (x - mean) * rstd,  g = weight * dout
//   dinp_c += rstd * (g_c - mean_c'(g) - xhat_c * mean_c'(g * xhat))
// Lane l takes the row's packs of P columns l, l+32, ... (llmc/cuda_common.cuh's xpack):
// P = X128 when C is a multiple of X128 and every pointer 16-byte aligned, else 1. The
// second pass re-reads x, dy and weight, from L1/L2 (a bf16 row of C = 1600 is 3.2 KB).
template <int P>
__global__ void layernorm_backward_dinp_kernel(floatX* dinp, const floatX* dout, const floatX* inp,
                                               const floatX* weight, const float* mean, const float* rstd,
                                               int N, int C) {
    int lane = threadIdx.x % 32;
    size_t row = (size_t)blockIdx.x * LN_WARPS_PER_BLOCK + threadIdx.x / 32;
    if (row >= (size_t)N) { return; }
    const floatX* x = inp + row * C;
    const floatX* dy = dout + row * C;
    floatX* dx = dinp + row * C;
    float m = mean[row], s = rstd[row];
    float g_sum = 0.0f, gx_sum = 0.0f;
    for (int c = lane * P; c < C; c += 32 * P) {
        xpack<P> xv = load_pack<P>(x + c), dyv = load_pack<P>(dy + c), wv = load_pack<P>(weight + c);
#pragma unroll
        for (int j = 0; j < P; j++) {
            float xhat = (to_float(xv.v[j]) - m) * s;
            float g = to_float(wv.v[j]) * to_float(dyv.v[j]);
            g_sum += g;
            gx_sum += g * xhat;
        }
    }
    float g_mean = warp_reduce_sum(g_sum) / C;
    float gx_mean = warp_reduce_sum(gx_sum) / C;
    for (int c = lane * P; c < C; c += 32 * P) {
        xpack<P> xv = load_pack<P>(x + c), dyv = load_pack<P>(dy + c), wv = load_pack<P>(weight + c);
        xpack<P> dxv = load_pack<P>(dx + c);
#pragma unroll
        for (int j = 0; j < P; j++) {
            float xhat = (to_float(xv.v[j]) - m) * s;
            float g = to_float(wv.v[j]) * to_float(dyv.v[j]);
            float d = s * (g - g_mean - xhat * gx_mean);
            dxv.v[j] = from_float<floatX>(to_float(dxv.v[j]) + d);
        }
        store_pack<P>(dx + c, dxv);
    }
}

// partial sums of dweight/dbias. grid (CEIL_DIV(C, 32 * P), nchunks), block (32, LN_BWD_ROWS).
// Block (tile, k) handles columns [32*P*tile, 32*P*(tile+1)) and rows [k*rows_per_chunk, ...).
// Thread (tx, ty) sums rows ty, ty+LN_BWD_ROWS, ... of the chunk for its P columns (a pack,
// P = X128 or 1: the same rows in the same order for every column either way, so the same
// bits); then the LN_BWD_ROWS partial sums are combined by a fixed tree in shared memory,
// stored column j of a pack at [j][tx] so that a warp's accesses fall in 32 banks.
// scratch (2, nchunks, C) fp32: [0] dweight partials, [1] dbias partials.
template <int P>
__global__ void layernorm_backward_partial_kernel(float* scratch, const floatX* dout, const floatX* inp,
                                                  const float* mean, const float* rstd,
                                                  int N, int C, int rows_per_chunk) {
    __shared__ float sh_dw[LN_BWD_ROWS][P * LN_BWD_COLS];
    __shared__ float sh_db[LN_BWD_ROWS][P * LN_BWD_COLS];
    int tx = threadIdx.x, ty = threadIdx.y;
    int c0 = (blockIdx.x * LN_BWD_COLS + tx) * P;  // the pack's first column; C % P == 0
    int k = blockIdx.y;
    int nchunks = gridDim.y;
    int r0 = k * rows_per_chunk;
    int r1 = min(r0 + rows_per_chunk, N);
    float dw[P], db[P];
#pragma unroll
    for (int j = 0; j < P; j++) { dw[j] = 0.0f; db[j] = 0.0f; }
    if (c0 < C) {
        for (int r = r0 + ty; r < r1; r += LN_BWD_ROWS) {
            xpack<P> dyv = load_pack<P>(dout + (size_t)r * C + c0), xv = load_pack<P>(inp + (size_t)r * C + c0);
            float m = mean[r], s = rstd[r];
#pragma unroll
            for (int j = 0; j < P; j++) {
                float dy = to_float(dyv.v[j]);
                float xhat = (to_float(xv.v[j]) - m) * s;
                dw[j] += dy * xhat;
                db[j] += dy;
            }
        }
    }
#pragma unroll
    for (int j = 0; j < P; j++) {
        sh_dw[ty][j * LN_BWD_COLS + tx] = dw[j];
        sh_db[ty][j * LN_BWD_COLS + tx] = db[j];
    }
    __syncthreads();
    // fixed tree over ty: the same additions in the same order on every run
    for (int stride = LN_BWD_ROWS / 2; stride > 0; stride /= 2) {
        if (ty < stride) {
#pragma unroll
            for (int j = 0; j < P; j++) {
                sh_dw[ty][j * LN_BWD_COLS + tx] += sh_dw[ty + stride][j * LN_BWD_COLS + tx];
                sh_db[ty][j * LN_BWD_COLS + tx] += sh_db[ty + stride][j * LN_BWD_COLS + tx];
            }
        }
        __syncthreads();
    }
    if (ty == 0 && c0 < C) {
#pragma unroll
        for (int j = 0; j < P; j++) {
            scratch[(size_t)k * C + c0 + j] = sh_dw[0][j * LN_BWD_COLS + tx];
            scratch[(size_t)nchunks * C + (size_t)k * C + c0 + j] = sh_db[0][j * LN_BWD_COLS + tx];
        }
    }
}

// dweight (C,) +=, dbias (C,) += sums over the chunks, in chunk order; one thread per column
__global__ void layernorm_backward_final_kernel(floatX* dweight, floatX* dbias, const float* scratch,
                                                int nchunks, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) { return; }
    float dw = 0.0f, db = 0.0f;
    for (int k = 0; k < nchunks; k++) {
        dw += scratch[(size_t)k * C + c];
        db += scratch[(size_t)nchunks * C + (size_t)k * C + c];
    }
    dweight[c] = from_float<floatX>(to_float(dweight[c]) + dw);
    dbias[c] = from_float<floatX>(to_float(dbias[c]) + db);
}

// ----------------------------------------------------------------------------
// host launchers

// out (B,T,C), mean (B,T), rstd (B,T) <- inp (B,T,C), weight (C,), bias (C,).
// mean/rstd may be nullptr (not stored).
static inline void layernorm_forward(floatX* out, float* mean, float* rstd, const floatX* inp,
                                     const floatX* weight, const floatX* bias,
                                     int B, int T, int C, cudaStream_t s) {
    int N = B * T;
    unsigned grid = CEIL_DIV(N, LN_WARPS_PER_BLOCK), block = 32 * LN_WARPS_PER_BLOCK;
    if (xpack_width(C, {out, inp, weight, bias}) == X128) {
        layernorm_forward_kernel<X128><<<grid, block, 0, s>>>(out, mean, rstd, inp, weight, bias, N, C);
    } else {
        layernorm_forward_kernel<1><<<grid, block, 0, s>>>(out, mean, rstd, inp, weight, bias, N, C);
    }
    cudaCheck(cudaGetLastError());
}

// residual (N,C) = inp1 + inp2 (N,C); normed (N,C), mean (N,), rstd (N,) = layernorm(residual).
// residual must not alias inp1/inp2 partially (exact aliasing, residual == inp1, is fine:
// each element is read before it is written, by the same thread).
static inline void fused_residual_layernorm_forward(floatX* residual, floatX* normed, float* mean, float* rstd,
                                                    const floatX* inp1, const floatX* inp2,
                                                    const floatX* weight, const floatX* bias,
                                                    int N, int C, cudaStream_t s) {
    unsigned grid = CEIL_DIV(N, LN_WARPS_PER_BLOCK), block = 32 * LN_WARPS_PER_BLOCK;
    if (xpack_width(C, {residual, normed, inp1, inp2, weight, bias}) == X128) {
        fused_residual_layernorm_forward_kernel<X128><<<grid, block, 0, s>>>(
            residual, normed, mean, rstd, inp1, inp2, weight, bias, N, C);
    } else {
        fused_residual_layernorm_forward_kernel<1><<<grid, block, 0, s>>>(
            residual, normed, mean, rstd, inp1, inp2, weight, bias, N, C);
    }
    cudaCheck(cudaGetLastError());
}

// number of row chunks the backward uses for N rows (depends on N only: determinism)
static inline int layernorm_backward_nchunks(int N) {
    int n = CEIL_DIV(N, LN_BWD_MIN_ROWS_PER_CHUNK);
    if (n > LN_BWD_MAX_CHUNKS) { n = LN_BWD_MAX_CHUNKS; }
    if (n < 1) { n = 1; }
    return n;
}

// floats of `scratch` layernorm_backward needs: 2 * nchunks * C <= 2 * 128 * C
// (for C = 768: 196,608 floats = 768 KB). Allocating 2 * LN_BWD_MAX_CHUNKS * C always works.
static inline size_t layernorm_backward_scratch_floats(int B, int T, int C) {
    return (size_t)2 * layernorm_backward_nchunks(B * T) * C;
}

// dinp (B,T,C) +=, dweight (C,) +=, dbias (C,) += from dout (B,T,C), with inp (B,T,C),
// weight (C,), mean/rstd (B,T) of the forward. ACCUMULATES into all three (as the CPU).
// scratch: fp32 device buffer of layernorm_backward_scratch_floats(B,T,C) floats, content
// irrelevant on entry. dinp must not alias dout or inp.
static inline void layernorm_backward(floatX* dinp, floatX* dweight, floatX* dbias, float* scratch,
                                      const floatX* dout, const floatX* inp, const floatX* weight,
                                      const float* mean, const float* rstd,
                                      int B, int T, int C, cudaStream_t s) {
    int N = B * T;
    unsigned rows_grid = CEIL_DIV(N, LN_WARPS_PER_BLOCK), rows_block = 32 * LN_WARPS_PER_BLOCK;
    int nchunks = layernorm_backward_nchunks(N);
    int rows_per_chunk = CEIL_DIV(N, nchunks);
    dim3 block(LN_BWD_COLS, LN_BWD_ROWS);
    if (xpack_width(C, {dinp, dout, inp, weight}) == X128) {
        layernorm_backward_dinp_kernel<X128><<<rows_grid, rows_block, 0, s>>>(dinp, dout, inp, weight, mean, rstd, N, C);
        cudaCheck(cudaGetLastError());
        dim3 grid(CEIL_DIV(C, LN_BWD_COLS * X128), nchunks);
        layernorm_backward_partial_kernel<X128><<<grid, block, 0, s>>>(scratch, dout, inp, mean, rstd, N, C, rows_per_chunk);
    } else {
        layernorm_backward_dinp_kernel<1><<<rows_grid, rows_block, 0, s>>>(dinp, dout, inp, weight, mean, rstd, N, C);
        cudaCheck(cudaGetLastError());
        dim3 grid(CEIL_DIV(C, LN_BWD_COLS), nchunks);
        layernorm_backward_partial_kernel<1><<<grid, block, 0, s>>>(scratch, dout, inp, mean, rstd, N, C, rows_per_chunk);
    }
    cudaCheck(cudaGetLastError());
    layernorm_backward_final_kernel<<<CEIL_DIV(C, 256), 256, 0, s>>>(dweight, dbias, scratch, nchunks, C);
    cudaCheck(cudaGetLastError());
}

#endif // LLMC_LAYERNORM_CUH
