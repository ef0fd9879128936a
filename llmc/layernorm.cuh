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

 Backward: one pass over dout and inp (a second over each row from L1/L2) in one kernel:
 a warp per row makes dinp, as the forward, and adds the row's dout * xhat and dout into its
 own slice of shared memory; each block of row chunk k leaves its dweight/dbias partial
 sums in `scratch`, and llmc/cuda_common.cuh's partials_add adds the chunks per column
 into dweight/dbias by a fixed tree. DETERMINISTIC without atomics: the chunks, the warps
 a block and so every sum's order depend on N and C only, not on the GPU or on
 scheduling. The earlier backward, a dinp kernel then a partial-sums kernel reading dout
 and inp again, moved 12 bytes an element of the row in bf16 where this moves 8
 (docs/RESULTS.md).
*/
#ifndef LLMC_LAYERNORM_CUH
#define LLMC_LAYERNORM_CUH

#include <math.h>                  // sqrtf (rsqrtf is avoided: it is approximate)
#include <stddef.h>                // size_t for offsets that may pass 2^31
#include <stdio.h>                 // fprintf: a row too wide for the backward
#include <stdlib.h>                // exit
#include "llmc/cuda_common.cuh"    // floatX, to_float/from_float, warp_reduce_sum, cudaCheck, CEIL_DIV, partials_add

#ifndef LAYERNORM_EPS
#define LAYERNORM_EPS 1e-5f        // same value as llmc/layernorm.h (torch's default)
#endif

// rows per block in the one-warp-per-row kernels: 8 warps = 256 threads
#define LN_WARPS_PER_BLOCK 8
// at most this many row chunks (partial sums per column; blocks of the fused kernel, about
// two an SM on an H100); fewer when N is small
#define LN_BWD_MAX_CHUNKS 256
// the fused backward's shared memory a block at most: its warps' slices of 2 x Cpad floats.
// 96 KB opts in past 48 KB on every GPU of compute capability 8.x and 9.x (sm_86's limit is
// 99 KB); the same budget on all of them keeps the warps a block, and the bits, the same
#define LN_BWD_SMEM (96 * 1024)
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

// dinp (N,C) += the per-row LayerNorm backward, and the chunk's partial sums of dweight and
// dbias, in one pass over the chunk's rows of dout and inp:
//   xhat = (x - mean) * rstd,  g = weight * dout
//   dinp_c += rstd * (g_c - mean_c'(g) - xhat_c * mean_c'(g * xhat))
//   dweight_c += sum_rows dout_c * xhat_c,  dbias_c += sum_rows dout_c
// grid (nchunks,), block (32 * W,): block k takes rows [k * rows_per_chunk, ...), its warp w
// the rows w, w + W, ... of them, one at a time, lane l the row's packs of P columns l, l+32,
// ... (llmc/cuda_common.cuh's xpack; P = X128 when C is a multiple of X128 and every pointer
// 16-byte aligned, else 1). The second pass over a row re-reads x, dy and weight from L1/L2.
// [Note: no atomics] Each lane adds its columns' dout * xhat and dout into slots of its
// warp's own slice of shared memory that no other lane touches (slot it*32P + j*32 + l for
// column it*32P + l*P + j: a warp's 32 lanes in 32 banks), so every column's rows are added
// in the order the warp takes them, whatever the pack width; the block then adds its W
// slices in warp order into scratch's row k. The bits depend on N and C only.
// smem: (W, 2, Cpad) fp32, Cpad = C rounded up to 32 * X128; scratch (2, nchunks, C) fp32.
template <int P>
__global__ void layernorm_backward_fused_kernel(floatX* dinp, float* scratch, const floatX* dout, const floatX* inp,
                                                const floatX* weight, const float* mean, const float* rstd,
                                                int N, int C, int Cpad, int rows_per_chunk) {
    extern __shared__ float layernorm_bwd_smem[];
    int W = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int k = blockIdx.x, nchunks = gridDim.x;
    float* sdw = layernorm_bwd_smem + (size_t)warp * 2 * Cpad;  // (Cpad,) this warp's dweight sums
    float* sdb = sdw + Cpad;                                     // (Cpad,) its dbias sums
    for (int i = lane; i < Cpad; i += 32) { sdw[i] = 0.0f; sdb[i] = 0.0f; }  // (a lane's own slots: i % 32 == lane)
    int r1 = min((k + 1) * rows_per_chunk, N);
    for (int r = k * rows_per_chunk + warp; r < r1; r += W) {
        const floatX* x = inp + (size_t)r * C;
        const floatX* dy = dout + (size_t)r * C;
        floatX* dx = dinp + (size_t)r * C;
        float m = mean[r], s = rstd[r];
        float g_sum = 0.0f, gx_sum = 0.0f;
        for (int c = lane * P, slot = lane; c < C; c += 32 * P, slot += 32 * P) {
            xpack<P> xv = load_pack<P>(x + c), dyv = load_pack<P>(dy + c), wv = load_pack<P>(weight + c);
#pragma unroll
            for (int j = 0; j < P; j++) {
                float xhat = (to_float(xv.v[j]) - m) * s, d = to_float(dyv.v[j]);
                float g = to_float(wv.v[j]) * d;
                g_sum += g;
                gx_sum += g * xhat;
                sdw[slot + j * 32] += d * xhat;
                sdb[slot + j * 32] += d;
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
                dxv.v[j] = from_float<floatX>(to_float(dxv.v[j]) + s * (g - g_mean - xhat * gx_mean));
            }
            store_pack<P>(dx + c, dxv);
        }
    }
    __syncthreads();
    for (int c = threadIdx.x; c < C; c += blockDim.x) {  // the W slices in warp order
        int it = c / (32 * P), l = c % (32 * P) / P, j = c % P;
        int slot = it * 32 * P + j * 32 + l;
        float dw = 0.0f, db = 0.0f;
        for (int w = 0; w < W; w++) {
            dw += layernorm_bwd_smem[(size_t)w * 2 * Cpad + slot];
            db += layernorm_bwd_smem[(size_t)w * 2 * Cpad + Cpad + slot];
        }
        scratch[(size_t)k * C + c] = dw;
        scratch[(size_t)nchunks * C + (size_t)k * C + c] = db;
    }
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

// warps a block of the fused backward: the most, up to 8 and a power of two, whose slices
// of 2 x Cpad floats fit LN_BWD_SMEM (C = 768: 8, 1600: 4, 12288: 1); 0 when not even one
// does. From C alone: the rows' order in a chunk, so the bits, is the same on every GPU.
static inline int layernorm_backward_warps(int C) {
    size_t slice = (size_t)2 * CEIL_DIV(C, 32 * X128) * 32 * X128 * sizeof(float);
    int w = 8;
    while (w > 0 && (size_t)w * slice > LN_BWD_SMEM) { w /= 2; }
    return w;
}

// floats of `scratch` layernorm_backward needs: 2 * nchunks * C <= 2 * 128 * C
// (for C = 768: 393,216 floats = 1.5 MB). Allocating 2 * LN_BWD_MAX_CHUNKS * C always works.
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
    int nchunks = layernorm_backward_nchunks(N), rows_per_chunk = CEIL_DIV(N, nchunks);
    int cpad = CEIL_DIV(C, 32 * X128) * 32 * X128, warps = layernorm_backward_warps(C);
    if (warps == 0) {
        fprintf(stderr, "layernorm_backward: C = %d is too wide (its sums need %zu bytes of shared memory, at most %d)\n",
                C, (size_t)2 * cpad * sizeof(float), LN_BWD_SMEM);
        exit(EXIT_FAILURE);
    }
    size_t smem = (size_t)warps * 2 * cpad * sizeof(float);
    if (xpack_width(C, {dinp, dout, inp, weight}) == X128) {
        cudaCheck(cudaFuncSetAttribute((const void*)layernorm_backward_fused_kernel<X128>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        layernorm_backward_fused_kernel<X128><<<nchunks, 32 * warps, smem, s>>>(dinp, scratch, dout, inp, weight, mean, rstd,
                                                                                N, C, cpad, rows_per_chunk);
    } else {
        cudaCheck(cudaFuncSetAttribute((const void*)layernorm_backward_fused_kernel<1>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        layernorm_backward_fused_kernel<1><<<nchunks, 32 * warps, smem, s>>>(dinp, scratch, dout, inp, weight, mean, rstd,
                                                                             N, C, cpad, rows_per_chunk);
    }
    cudaCheck(cudaGetLastError());
    partials_add(dweight, dbias, scratch, nchunks, C, s);  // the chunks added per column, in a fixed order
}

#endif // LLMC_LAYERNORM_CUH
