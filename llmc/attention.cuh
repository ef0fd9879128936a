/*
 Causal multi-head self-attention on the GPU (CUDA twin of llmc/attention.h, same math and
 the same external layout): qkv (B,T,3C) holds q, k, v side by side along the last
 dimension, head h of each being channels [h*hs, (h+1)*hs), hs = C/NH; out (B,T,C) holds
 the heads concatenated; att (B,NH,T,T) is saved for the backward pass.

 First version: cuBLAS strided-batched GEMMs (fp32 accumulation) plus small kernels.
   qkvr (3,B,NH,T,hs) = permute(qkv)                     so each (b,h) operand is contiguous
   att  = scale * Q K^T            (B*NH batches, T x T)   cublasGemmStridedBatchedEx
   att  = causal softmax(att)      in place, one warp per row, fp32; exact 0 above the diagonal
   out  = att V                    written straight into out (B,T,C): see attention_forward
 The T x T products are computed in full (upper triangle included) as in the CPU code: the
 exact zeros in att make the second product causal by itself.

 This version is the readable reference on the GPU and is O(B*NH*T^2) in memory.
 llmc/attention_flash.cuh is a fused flash-style path (attention_flash_forward/_backward:
 online softmax over key tiles, no T x T matrix in memory, recompute in the backward) that
 the trainer selects with attention_use_flash().

 cuBLAS is column-major while our tensors are row-major: a row-major (R x Ccols) matrix
 with row stride ld is the column-major (Ccols x R) matrix with the same ld, i.e. its
 transpose. So the row-major product P = X Y^T is computed as the column-major P^T = Y X^T,
 and so on; each call below states the row-major product it computes.
*/
#ifndef LLMC_ATTENTION_CUH
#define LLMC_ATTENTION_CUH

#include <math.h>                  // expf, sqrtf
#include <stddef.h>                // size_t for offsets that may pass 2^31
#include <cublas_v2.h>             // cublasGemmStridedBatchedEx, cublasSetStream
#include "llmc/cuda_common.cuh"    // floatX, to_float/from_float, warp reductions, cudaCheck, cublasCheck

// cuBLAS data type matching floatX; accumulation is always fp32 (CUBLAS_COMPUTE_32F, which
// does not use TF32 unless the handle's math mode allows it: the fp32 build stays exact fp32)
#if defined(ENABLE_FP32)
#define ATTN_CUBLAS_TYPE CUDA_R_32F
#else
#define ATTN_CUBLAS_TYPE CUDA_R_16BF
#endif

// ----------------------------------------------------------------------------
// kernels

// For a flat index over (b,h,t,d) of a (B,NH,T,hs) tensor: the offset of the same
// (b,t,h,d) in a (B,T,row) tensor whose head h sits at [h*hs, (h+1)*hs) of each row.
__device__ __forceinline__ size_t attention_row_offset(size_t idx, int T, int NH, int hs, size_t row) {
    int d = (int)(idx % hs);
    int t = (int)((idx / hs) % T);
    int h = (int)((idx / ((size_t)hs * T)) % NH);
    int b = (int)(idx / ((size_t)hs * T * NH));
    return ((size_t)b * T + t) * row + (size_t)h * hs + d;
}

// The three layout kernels below: thread i moves the N elements [i*N, i*N + N) of the flat
// (b,h,t,d) index. N = X128 (16 bytes) when hs is a multiple of X128, so that the N are
// contiguous in both layouts, and the pointers are 16-byte aligned (xpack_width of hs);
// else 1. Consecutive threads have consecutive d: coalesced both ways.

// qkvr (3,B,NH,T,hs) <- qkv (B,T,3,NH,hs), moving q, k and v
template <int N>
__global__ void attention_permute_kernel(floatX* qkvr, const floatX* qkv, int B, int T, int NH, int hs) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * N;  // flat (b,h,t,d)
    size_t total = (size_t)B * NH * T * hs;
    if (i >= total) { return; }
    int C = NH * hs;
    size_t src = attention_row_offset(i, T, NH, hs, 3 * (size_t)C);  // q of (b,t,h,d)
    for (int m = 0; m < 3; m++) { store_pack<N>(qkvr + m * total + i, load_pack<N>(qkv + src + (size_t)m * C)); }
}

// dst (B,NH,T,hs) <- src (B,T,NH,hs): the head split of dout for the backward
template <int N>
__global__ void attention_split_heads_kernel(floatX* dst, const floatX* src, int B, int T, int NH, int hs) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * N;  // flat (b,h,t,d)
    if (i >= (size_t)B * NH * T * hs) { return; }
    store_pack<N>(dst + i, load_pack<N>(src + attention_row_offset(i, T, NH, hs, (size_t)NH * hs)));
}

// dqkv (B,T,3,NH,hs) += dqkvr (3,B,NH,T,hs): the inverse permutation, accumulating
template <int N>
__global__ void attention_unpermute_acc_kernel(floatX* dqkv, const floatX* dqkvr, int B, int T, int NH, int hs) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * N;  // flat (b,h,t,d)
    size_t total = (size_t)B * NH * T * hs;
    if (i >= total) { return; }
    int C = NH * hs;
    size_t dst = attention_row_offset(i, T, NH, hs, 3 * (size_t)C);
    for (int m = 0; m < 3; m++) {
        size_t o = dst + (size_t)m * C;
        xpack<N> acc = load_pack<N>(dqkv + o), g = load_pack<N>(dqkvr + m * total + i);
#pragma unroll
        for (int j = 0; j < N; j++) { acc.v[j] = from_float<floatX>(to_float(acc.v[j]) + to_float(g.v[j])); }
        store_pack<N>(dqkv + o, acc);
    }
}

// att (B*NH*T rows of T) <- causal softmax of the scaled scores held in att, in place.
// One warp per row r = (b,h,t): keys t2 <= t only; att[t2] = 0 exactly for t2 > t.
// Lane l handles t2 = l, l+32, ...; each lane reads its own elements before overwriting them.
__global__ void attention_softmax_kernel(floatX* att, int rows, int T) {
    int lane = threadIdx.x % 32;
    size_t r = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (r >= (size_t)rows) { return; }
    int t = (int)(r % T);
    floatX* row = att + r * T;
    float maxval = -INFINITY;
    for (int t2 = lane; t2 <= t; t2 += 32) { maxval = fmaxf(maxval, to_float(row[t2])); }
    maxval = warp_reduce_max(maxval);  // finite: t2 = 0 is always present
    // subtracting the max keeps expf <= 1: no overflow
    float sum = 0.0f;
    for (int t2 = lane; t2 <= t; t2 += 32) { sum += expf(to_float(row[t2]) - maxval); }
    float inv = 1.0f / warp_reduce_sum(sum);  // sum >= 1 (the max term is exp(0))
    for (int t2 = lane; t2 < T; t2 += 32) {
        float v = t2 <= t ? expf(to_float(row[t2]) - maxval) * inv : 0.0f;  // the future: masked
        row[t2] = from_float<floatX>(v);
    }
}

// datt (rows of T) <- dpreatt in place: dpre[t2] = att[t2] * (datt[t2] - sum_j att[j] datt[j])
// for t2 <= t, 0 above the diagonal (masked: no gradient). One warp per row (b,h,t).
__global__ void attention_softmax_backward_kernel(floatX* datt, const floatX* att, int rows, int T) {
    int lane = threadIdx.x % 32;
    size_t r = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (r >= (size_t)rows) { return; }
    int t = (int)(r % T);
    floatX* drow = datt + r * T;
    const floatX* arow = att + r * T;
    float dot = 0.0f;
    for (int t2 = lane; t2 <= t; t2 += 32) { dot += to_float(arow[t2]) * to_float(drow[t2]); }
    dot = warp_reduce_sum(dot);
    for (int t2 = lane; t2 < T; t2 += 32) {
        float v = t2 <= t ? to_float(arow[t2]) * (to_float(drow[t2]) - dot) : 0.0f;
        drow[t2] = from_float<floatX>(v);
    }
}

// The two softmax kernels above, 16 bytes at a time with the row held in registers: one
// read of the keys at or before t, one write of the whole row (the scalar kernels read each
// element two or three times and move 2 bytes a lane an instruction). Lane l holds the
// row's 16-byte vectors l, l+32, ..., VECS of them (a power of two up to ATTN_ROW_VECS,
// picked by attention_row_vecs so that short rows do not pay long rows' registers): rows of
// T <= 32 * ATTN_ROW_VECS * X128 elements (2048 in bf16, 1024 in fp32) with T a multiple of
// X128 and att, datt 16-byte aligned; other rows take the scalar kernels. The register
// arrays are indexed only by unrolled loop counters, so they stay in registers (no stack
// frame in ptxas -v). A vector wholly above the diagonal is written as zeros, never read.
#define ATTN_ROW_VECS 8

// the vectors a lane holds for rows of T (1, 2, 4 or 8), or 0: the scalar kernels
static inline int attention_row_vecs(const void* a, const void* b, int T) {
    if (xpack_width(T, {a, b}) != X128) { return 0; }
    int per_lane = CEIL_DIV(T / X128, 32);
    for (int v = 1; v <= ATTN_ROW_VECS; v *= 2) {
        if (per_lane <= v) { return v; }
    }
    return 0;
}

template <int VECS>
__global__ void attention_softmax_vec_kernel(floatX* att, int rows, int T) {
    int lane = threadIdx.x % 32;
    size_t r = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (r >= (size_t)rows) { return; }
    int t = (int)(r % T);
    floatX* row = att + r * T;
    xpack<X128> a[VECS];
    float maxval = -INFINITY;
#pragma unroll
    for (int i = 0; i < VECS; i++) {
        int c = (i * 32 + lane) * X128;  // the vector's first key
        if (c > t) { continue; }
        a[i] = load_pack<X128>(row + c);
#pragma unroll
        for (int j = 0; j < X128; j++) {
            if (c + j <= t) { maxval = fmaxf(maxval, to_float(a[i].v[j])); }
        }
    }
    maxval = warp_reduce_max(maxval);  // finite: key 0 is always present
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < VECS; i++) {
        int c = (i * 32 + lane) * X128;
        if (c > t) { continue; }
#pragma unroll
        for (int j = 0; j < X128; j++) {
            if (c + j <= t) { sum += expf(to_float(a[i].v[j]) - maxval); }
        }
    }
    float inv = 1.0f / warp_reduce_sum(sum);
#pragma unroll
    for (int i = 0; i < VECS; i++) {
        int c = (i * 32 + lane) * X128;
        if (c >= T) { continue; }
        xpack<X128> o;
#pragma unroll
        for (int j = 0; j < X128; j++) {
            o.v[j] = from_float<floatX>(c + j <= t ? expf(to_float(a[i].v[j]) - maxval) * inv : 0.0f);
        }
        store_pack<X128>(row + c, o);
    }
}

template <int VECS>
__global__ void attention_softmax_backward_vec_kernel(floatX* datt, const floatX* att, int rows, int T) {
    int lane = threadIdx.x % 32;
    size_t r = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (r >= (size_t)rows) { return; }
    int t = (int)(r % T);
    floatX* drow = datt + r * T;
    const floatX* arow = att + r * T;
    xpack<X128> a[VECS], d[VECS];
    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < VECS; i++) {
        int c = (i * 32 + lane) * X128;
        if (c > t) { continue; }
        a[i] = load_pack<X128>(arow + c);
        d[i] = load_pack<X128>(drow + c);
#pragma unroll
        for (int j = 0; j < X128; j++) {
            if (c + j <= t) { dot += to_float(a[i].v[j]) * to_float(d[i].v[j]); }
        }
    }
    dot = warp_reduce_sum(dot);
#pragma unroll
    for (int i = 0; i < VECS; i++) {
        int c = (i * 32 + lane) * X128;
        if (c >= T) { continue; }
        xpack<X128> o;
#pragma unroll
        for (int j = 0; j < X128; j++) {
            float v = c + j <= t ? to_float(a[i].v[j]) * (to_float(d[i].v[j]) - dot) : 0.0f;
            o.v[j] = from_float<floatX>(v);
        }
        store_pack<X128>(drow + c, o);
    }
}

// ----------------------------------------------------------------------------
// host side

// column-major C (m x n) = alpha op(A) op(B) + beta C, `batch` times with the given strides
static inline void attention_gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                  int m, int n, int k, float alpha,
                                  const floatX* A, int lda, long long strideA,
                                  const floatX* Bm, int ldb, long long strideB, float beta,
                                  floatX* Cm, int ldc, long long strideC, int batch) {
    cublasCheck(cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, &alpha,
                                           A, ATTN_CUBLAS_TYPE, lda, strideA,
                                           Bm, ATTN_CUBLAS_TYPE, ldb, strideB, &beta,
                                           Cm, ATTN_CUBLAS_TYPE, ldc, strideC,
                                           batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// out (B,T,C); qkvr (3,B,NH,T,hs) scratch, OVERWRITTEN, and it must be kept unchanged
// until attention_backward (which reads Q, K, V from it); att (B,NH,T,T) OVERWRITTEN with
// the softmax (0 above the diagonal), kept for the backward; qkv (B,T,3C) is only read.
// Sets the stream of the cuBLAS handle to s.
static inline void attention_forward(floatX* out, floatX* qkvr, floatX* att, const floatX* qkv,
                                     int B, int T, int C, int NH, cublasHandle_t h, cudaStream_t s) {
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    long long Ths = (long long)T * hs, TT = (long long)T * T;
    size_t n_one = (size_t)B * NH * T * hs;  // elements of each of q, k, v in qkvr
    const floatX* q = qkvr;
    const floatX* k = qkvr + n_one;
    const floatX* v = qkvr + 2 * n_one;
    cublasCheck(cublasSetStream(h, s));

    const int block = 256;
    if (xpack_width(hs, {qkvr, qkv}) == X128) {
        attention_permute_kernel<X128><<<xpack_blocks(n_one, X128, block), block, 0, s>>>(qkvr, qkv, B, T, NH, hs);
    } else {
        attention_permute_kernel<1><<<xpack_blocks(n_one, 1, block), block, 0, s>>>(qkvr, qkv, B, T, NH, hs);
    }
    cudaCheck(cudaGetLastError());

    // att[b,h] (T,T) = scale * Q (T,hs) @ K^T (hs,T)   [column-major: att^T = K Q^T]
    attention_gemm(h, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, scale,
                   k, hs, Ths, q, hs, Ths, 0.0f, att, T, TT, B * NH);

    int rows = B * NH * T;
    int grid = CEIL_DIV(rows, block / 32);
    switch (attention_row_vecs(att, att, T)) {
        case 1: attention_softmax_vec_kernel<1><<<grid, block, 0, s>>>(att, rows, T); break;
        case 2: attention_softmax_vec_kernel<2><<<grid, block, 0, s>>>(att, rows, T); break;
        case 4: attention_softmax_vec_kernel<4><<<grid, block, 0, s>>>(att, rows, T); break;
        case 8: attention_softmax_vec_kernel<8><<<grid, block, 0, s>>>(att, rows, T); break;
        default: attention_softmax_kernel<<<grid, block, 0, s>>>(att, rows, T); break;
    }
    cudaCheck(cudaGetLastError());

    // out[b,:,h] (T,hs) = att[b,h] (T,T) @ V (T,hs)   [column-major: out^T = V^T att^T]
    // The result is written directly in the (B,T,C) layout (row stride ldc = C, head h at
    // column h*hs), which fuses the "unpermute" into the GEMM and needs no extra buffer.
    // Within one b the NH heads are a uniform stride hs apart, so one batched call per b;
    // across b the stride (T*C) differs from NH*hs, hence the loop. The NH output matrices
    // interleave in memory but never share an element.
    for (int b = 0; b < B; b++) {
        attention_gemm(h, CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, 1.0f,
                       v + (size_t)b * NH * Ths, hs, Ths,
                       att + (size_t)b * NH * TT, T, TT, 0.0f,
                       out + (size_t)b * T * C, C, hs, NH);
    }
}

// elements (floatX) of the `scratch` argument of attention_backward: B*NH*T*hs = B*T*C
static inline size_t attention_backward_scratch_elems(int B, int T, int C) {
    return (size_t)B * T * C;
}

// dqkv (B,T,3C) += gradient of the attention given dout (B,T,C). ACCUMULATES into dqkv (as
// the CPU version): zero it first if it should receive this gradient only.
// Buffers, all OVERWRITTEN (content on entry irrelevant):
//   dqkvr   (3,B,NH,T,hs)  gradients w.r.t. q, k, v in the permuted layout (floatX)
//   datt    (B,NH,T,T)     on exit: the gradient w.r.t. the scaled scores (0 above the diagonal)
//   scratch (B,NH,T,hs)    dout split into heads; attention_backward_scratch_elems() elements
// qkvr and att are the ones attention_forward left. Sets the stream of the handle to s.
//   datt    = dout_h V^T                 dV = att^T dout_h
//   dpre    = att * (datt - rowsum(att * datt))   (softmax backward, in place in datt)
//   dQ      = scale * dpre K             dK = scale * dpre^T Q
static inline void attention_backward(floatX* dqkv, floatX* dqkvr, floatX* datt, floatX* scratch,
                                      const floatX* dout, const floatX* qkvr, const floatX* att,
                                      int B, int T, int C, int NH, cublasHandle_t h, cudaStream_t s) {
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    long long Ths = (long long)T * hs, TT = (long long)T * T;
    size_t n_one = (size_t)B * NH * T * hs;
    int batch = B * NH;
    const floatX* q = qkvr;
    const floatX* k = qkvr + n_one;
    const floatX* v = qkvr + 2 * n_one;
    floatX* dq = dqkvr;
    floatX* dk = dqkvr + n_one;
    floatX* dv = dqkvr + 2 * n_one;
    floatX* dout_r = scratch;  // (B,NH,T,hs)
    cublasCheck(cublasSetStream(h, s));

    const int block = 256;
    if (xpack_width(hs, {dout_r, dout}) == X128) {
        attention_split_heads_kernel<X128><<<xpack_blocks(n_one, X128, block), block, 0, s>>>(dout_r, dout, B, T, NH, hs);
    } else {
        attention_split_heads_kernel<1><<<xpack_blocks(n_one, 1, block), block, 0, s>>>(dout_r, dout, B, T, NH, hs);
    }
    cudaCheck(cudaGetLastError());

    // datt (T,T) = dout_h (T,hs) @ V^T (hs,T)   [column-major: datt^T = V dout_h^T]
    attention_gemm(h, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, 1.0f,
                   v, hs, Ths, dout_r, hs, Ths, 0.0f, datt, T, TT, batch);
    // dV (T,hs) = att^T (T,T) @ dout_h (T,hs)   [column-major: dV^T = dout_h^T att]
    attention_gemm(h, CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, 1.0f,
                   dout_r, hs, Ths, att, T, TT, 0.0f, dv, hs, Ths, batch);

    int rows = B * NH * T;
    int grid = CEIL_DIV(rows, block / 32);
    switch (attention_row_vecs(datt, att, T)) {
        case 1: attention_softmax_backward_vec_kernel<1><<<grid, block, 0, s>>>(datt, att, rows, T); break;
        case 2: attention_softmax_backward_vec_kernel<2><<<grid, block, 0, s>>>(datt, att, rows, T); break;
        case 4: attention_softmax_backward_vec_kernel<4><<<grid, block, 0, s>>>(datt, att, rows, T); break;
        case 8: attention_softmax_backward_vec_kernel<8><<<grid, block, 0, s>>>(datt, att, rows, T); break;
        default: attention_softmax_backward_kernel<<<grid, block, 0, s>>>(datt, att, rows, T); break;
    }
    cudaCheck(cudaGetLastError());

    // dQ (T,hs) = scale * dpre (T,T) @ K (T,hs)    [column-major: dQ^T = K^T dpre^T]
    attention_gemm(h, CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, scale,
                   k, hs, Ths, datt, T, TT, 0.0f, dq, hs, Ths, batch);
    // dK (T,hs) = scale * dpre^T (T,T) @ Q (T,hs)  [column-major: dK^T = Q^T dpre]
    attention_gemm(h, CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, scale,
                   q, hs, Ths, datt, T, TT, 0.0f, dk, hs, Ths, batch);

    if (xpack_width(hs, {dqkv, dqkvr}) == X128) {
        attention_unpermute_acc_kernel<X128><<<xpack_blocks(n_one, X128, block), block, 0, s>>>(dqkv, dqkvr, B, T, NH, hs);
    } else {
        attention_unpermute_acc_kernel<1><<<xpack_blocks(n_one, 1, block), block, 0, s>>>(dqkv, dqkvr, B, T, NH, hs);
    }
    cudaCheck(cudaGetLastError());
}

#endif // LLMC_ATTENTION_CUH
