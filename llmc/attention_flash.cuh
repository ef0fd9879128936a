/*
 Fused flash-style causal attention on the GPU (FlashAttention-2 style forward and
 backward, plain CUDA), the trainer's --attention flash. The same math and the same
 external layout as llmc/attention.cuh's cuBLAS path: qkv (B,T,3C) in, out (B,T,C) out,
 dqkv (B,T,3C) accumulated (+=). Nothing of size T x T is ever stored: for each query row
 the forward keeps a running max m, a running sum l and an unnormalized output o while it
 walks over the key tiles (online softmax), and saves only lse = m + log(l) per row,
 (B,NH,T) floats. The backward recomputes the probabilities tile by tile from lse:
     S_ij  = scale * q_i . k_j              P_ij = exp(S_ij - lse_i) for j <= i, else 0
     dV_j  = sum_i P_ij dO_i                dP_ij = dO_i . v_j
     dS_ij = P_ij (dP_ij - D_i)             D_i = sum_j P_ij dP_ij = dO_i . O_i
     dQ_i  = scale * sum_j dS_ij k_j        dK_j = scale * sum_i dS_ij q_i
 (D_i = dO_i . sum_j P_ij v_j = dO_i . O_i: one dot of two rows instead of a row of T.)
 Q, K, V are read straight from qkv (no permuted copy) and dQ, dK, dV are added straight
 into dqkv. Every element of dqkv is owned by exactly one thread of one kernel, so the
 read-add-write needs no atomics and the result is bitwise reproducible:
   dot kernel   D (B,NH,T) floats, one warp per row
   dkdv kernel  one block per (b, h, key tile): loops over the query tiles at and below the
                diagonal, accumulates dK and dV of its keys in registers, adds them once
   dq kernel    one block per (b, h, query tile): loops over the key tiles up to the
                diagonal, accumulates dQ of its rows in registers, adds it once
 (FlashAttention-2 computes dQ inside the dK/dV loop with float atomics, whose order
 varies from run to run; the separate dq kernel recomputes S and dP instead: 7 tile
 products per (query tile, key tile) pair instead of 5, but deterministic.)

 Tiles: FA_TILE = 32 query rows per block, 32 keys per key tile, FA_WARPS = 4 warps per
 block. In the forward and dq kernels each warp owns FA_ROWS = 8 query rows and, for the
 scores, lane l takes key k0 + l; in the dkdv kernel each warp owns 8 keys and lane l
 takes query row q0 + l. For the accumulation into o, dQ, dK, dV lane l owns the head
 dims d = l + 32x, x < HS/32 (consecutive lanes, consecutive shared-memory words).
 All math is fp32: tiles are converted to fp32 on their way into shared memory.
 q is multiplied by scale on load in all three kernels and every score goes through
 fa_dot4 in the same order, so the backward recomputes bitwise the same S as the forward.
 Any T >= 1: the last tile may be ragged; rows and keys >= T are loaded as zeros, never
 written out, and masked (P = 0) wherever they could reach a valid row's result.
 Head size HS: a multiple of 32, instantiated for 64, 96, 128 (attention_use_flash()). These
 are the fp32 build's kernels: the bf16 build runs the same contract on the tensor cores
 (llmc/attention_tc.cuh, head sizes 64, 80, 96, 128), and both builds share the dot kernel,
 the host calls below and their checks.
 Shared memory at HS = 128: 52 KB (forward), 73 KB (dkdv), 68 KB (dq); above the 48 KB
 static limit, hence dynamic shared memory with cudaFuncSetAttribute (sm_80 allows 163 KB).
*/
#ifndef LLMC_ATTENTION_FLASH_CUH
#define LLMC_ATTENTION_FLASH_CUH

#include <math.h>                  // expf, logf, sqrtf
#include <stddef.h>                // size_t for offsets that may pass 2^31
#include "llmc/cuda_common.cuh"    // floatX, to_float/from_float, warp reductions, cudaCheck
#include "llmc/attention.cuh"      // attention_row_offset: the (B,T,C) offset of a (b,h,t,d)
#if !defined(ENABLE_FP32)
#include "llmc/attention_tc.cuh"   // the bf16 build's kernels: the same contract on the tensor cores
#endif

#define FA_TILE 32                    // query rows per block = keys per key tile = lanes
#define FA_WARPS 4                    // warps per block
#define FA_THREADS (FA_WARPS * 32)
#define FA_ROWS (FA_TILE / FA_WARPS)  // query rows (forward, dq) or keys (dkdv) per warp: 8

// the flash kernels' dynamic shared memory; float4 makes it 16-byte aligned for float4 reads
extern __shared__ float4 attention_flash_smem[];

// acc + a.x*b0 + a.y*b1 + a.z*b2 + a.w*b3 as four fmaf in this order. Every score and every
// dO.v of the flash kernels goes through here with d ascending, so the three kernels compute
// bitwise the same values (fmaf(x, y, acc) == fmaf(y, x, acc): the product is exact in fmaf).
__device__ __forceinline__ float fa_dot4(float acc, float4 a, float b0, float b1, float b2, float b3) {
    acc = fmaf(a.x, b0, acc);
    acc = fmaf(a.y, b1, acc);
    acc = fmaf(a.z, b2, acc);
    return fmaf(a.w, b3, acc);
}

// dst[r * ld_dst + d] = mul * src[(t0 + r) * ld_src + d] for r < FA_TILE, d < HS; rows
// t0 + r >= T (the ragged last tile) get 0, so nothing uninitialized (NaN) ever enters a
// product. All FA_THREADS threads take part; consecutive threads read consecutive d, and
// the HS elements of one row are contiguous in global memory (coalesced).
template <int HS>
__device__ __forceinline__ void fa_load_tile(float* dst, int ld_dst, const floatX* src, size_t ld_src,
                                             int t0, int T, float mul) {
    for (int e = threadIdx.x; e < FA_TILE * HS; e += FA_THREADS) {
        int r = e / HS, d = e % HS;
        int t = t0 + r;
        dst[r * ld_dst + d] = t < T ? to_float(src[(size_t)t * ld_src + d]) * mul : 0.0f;
    }
}

// Forward. Grid (B*NH, ceil(T/FA_TILE)), FA_THREADS threads: block = (b,h) x query tile
// [q0, q0 + FA_TILE); warp w owns the query rows i = q0 + w*FA_ROWS + r, r < FA_ROWS.
// out (B,T,C): rows i < T of head h written; lse (B,NH,T): natural-log sum_j<=i exp(S_ij).
template <int HS>
__global__ void __launch_bounds__(FA_THREADS)
attention_flash_forward_kernel(floatX* out, float* lse, const floatX* qkv, int T, int NH, float scale) {
    constexpr int D = HS / 32;   // head dims per lane
    constexpr int KS = HS + 1;   // K_s row stride: lane l reads row l, word l*(HS+1)+d -> bank (l+d)%32, conflict-free
    float* Q_s = (float*)attention_flash_smem;  // (FA_TILE, HS)  scale * q of the block's rows
    float* K_s = Q_s + FA_TILE * HS;            // (FA_TILE, KS)  k of the current key tile
    float* V_s = K_s + FA_TILE * KS;            // (FA_TILE, HS)  v of the current key tile
    float* P_s = V_s + FA_TILE * HS;            // (FA_WARPS, FA_ROWS, FA_TILE) probabilities
    // (every region starts at a multiple of 4 floats: FA_TILE*HS and FA_TILE*KS are, so the float4 reads are aligned)
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int bh = blockIdx.x, b = bh / NH, h = bh % NH;
    int C = NH * HS;
    size_t C3 = 3 * (size_t)C;
    // blocks are started in increasing blockIdx.y: the last query tiles see the most keys,
    // so they get the low indices and start first (less idle tail at the end of the grid)
    int q_tile = gridDim.y - 1 - blockIdx.y;
    int q0 = q_tile * FA_TILE;
    const floatX* qkv_bh = qkv + (size_t)b * T * C3 + (size_t)h * HS;  // q of (b, t=0, h, d=0); k at +C, v at +2C
    float* P_w = P_s + warp * FA_ROWS * FA_TILE;                        // (FA_ROWS, FA_TILE) this warp's

    fa_load_tile<HS>(Q_s, HS, qkv_bh, C3, q0, T, scale);

    // per row r: running max m (the same in all lanes), this lane's part of the running
    // sum l (the lanes' parts are added once at the end), o for this lane's D dims
    float m[FA_ROWS], l[FA_ROWS], o[FA_ROWS][D];
    #pragma unroll
    for (int r = 0; r < FA_ROWS; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
#pragma unroll
        for (int x = 0; x < D; x++) { o[r][x] = 0.0f; }
    }

    // key tiles 0..q_tile hold the keys j < q0 + FA_TILE: all that a row of the block may see
    for (int kt = 0; kt <= q_tile; kt++) {
        int k0 = kt * FA_TILE;
        __syncthreads();  // every warp is done reading the previous tile's K_s, V_s
        fa_load_tile<HS>(K_s, KS, qkv_bh + C, C3, k0, T, 1.0f);
        fa_load_tile<HS>(V_s, HS, qkv_bh + 2 * C, C3, k0, T, 1.0f);
        __syncthreads();  // K_s, V_s (and Q_s on the first pass) complete

        // scores of key j = k0 + lane against the warp's FA_ROWS rows at once: each K_s value
        // read serves all rows; the Q_s float4 reads are the same address in all lanes (broadcast)
        float s[FA_ROWS];
#pragma unroll
        for (int r = 0; r < FA_ROWS; r++) { s[r] = 0.0f; }
        const float* krow = K_s + lane * KS;
        #pragma unroll 2
        for (int d = 0; d < HS; d += 4) {
            float ka = krow[d], kb = krow[d + 1], kc = krow[d + 2], kd = krow[d + 3];
            #pragma unroll
            for (int r = 0; r < FA_ROWS; r++) {
                float4 q4 = *(const float4*)(Q_s + (warp * FA_ROWS + r) * HS + d);
                s[r] = fa_dot4(s[r], q4, ka, kb, kc, kd);
            }
        }

        // online softmax, row by row
        int j = k0 + lane;
#pragma unroll
        for (int r = 0; r < FA_ROWS; r++) {
            int i = q0 + warp * FA_ROWS + r;
            // causal mask; it also hides the zero-loaded keys j >= T from every row i < T
            float sv = j <= i ? s[r] : -INFINITY;
            // m_new is finite: k0 <= q0 <= i, so key k0 is visible to every row in every tile
            float m_new = fmaxf(m[r], warp_reduce_max(sv));
            float corr = expf(m[r] - m_new);  // rescales the sums so far to the new max; 0 on the first tile (m = -inf)
            float p = expf(sv - m_new);       // <= 1: no overflow; exactly 0 where masked
            l[r] = l[r] * corr + p;
            #pragma unroll
            for (int x = 0; x < D; x++) { o[r][x] *= corr; }
            m[r] = m_new;
            P_w[r * FA_TILE + lane] = p;
        }
        __syncwarp();  // all lanes' P_w entries written before any lane reads them

        // o[r][d] += sum_j P[r][j] v_j[d], four keys at a time: their v in registers (lane's
        // dims, consecutive words), then one float4 broadcast read of P_w per row
        #pragma unroll 2
        for (int jj = 0; jj < FA_TILE; jj += 4) {
            float v[4][D];
            #pragma unroll
            for (int u = 0; u < 4; u++) {
                #pragma unroll
                for (int x = 0; x < D; x++) { v[u][x] = V_s[(jj + u) * HS + lane + 32 * x]; }
            }
            #pragma unroll
            for (int r = 0; r < FA_ROWS; r++) {
                float4 p4 = *(const float4*)(P_w + r * FA_TILE + jj);
                #pragma unroll
                for (int x = 0; x < D; x++) {
                    o[r][x] += p4.x * v[0][x] + p4.y * v[1][x] + p4.z * v[2][x] + p4.w * v[3][x];
                }
            }
        }
        // (P_w is rewritten only after the next tile's __syncthreads: every lane has read it by then)
    }

    #pragma unroll
    for (int r = 0; r < FA_ROWS; r++) {
        int i = q0 + warp * FA_ROWS + r;
        // >= 1: the row's max term was exp(0) = 1 and was never rescaled after (corr = 1)
        float lsum = warp_reduce_sum(l[r]);  // all lanes take part, before the (warp-uniform) branch
        if (i < T) {
            float inv = 1.0f / lsum;
            floatX* orow = out + ((size_t)b * T + i) * C + (size_t)h * HS;  // (B,T,C) row i, head h
            #pragma unroll
            for (int x = 0; x < D; x++) { orow[lane + 32 * x] = from_float<floatX>(o[r][x] * inv); }
            if (lane == 0) { lse[(size_t)bh * T + i] = m[r] + logf(lsum); }
        }
    }
}

// Dvec (B,NH,T) = dO_i . O_i over the hs channels of each head: the softmax backward's row
// sum D_i = sum_j P_ij dP_ij. out, dout (B,T,C). One warp per row (b,h,t).
__global__ void attention_flash_backward_dot_kernel(float* Dvec, const floatX* out, const floatX* dout,
                                                    int B, int T, int NH, int hs) {
    int lane = threadIdx.x % 32;
    size_t r = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;  // flat (b,h,t)
    if (r >= (size_t)B * NH * T) { return; }  // whole warps: r is the same in all lanes
    size_t off = attention_row_offset(r * hs, T, NH, hs, (size_t)NH * hs);  // (b,t,h,d=0) in (B,T,C)
    float sum = 0.0f;
    for (int d = lane; d < hs; d += 32) { sum += to_float(out[off + d]) * to_float(dout[off + d]); }
    sum = warp_reduce_sum(sum);
    if (lane == 0) { Dvec[r] = sum; }
}

// dK, dV. Grid (B*NH, ceil(T/FA_TILE)), FA_THREADS threads: block = (b,h) x key tile
// [k0, k0 + FA_TILE); warp w owns the keys j = k0 + w*FA_ROWS + c, c < FA_ROWS.
// dqkv (B,T,3C): the k and v parts of the block's keys j < T, head h, += dK, dV.
template <int HS>
__global__ void __launch_bounds__(FA_THREADS)
attention_flash_backward_dkdv_kernel(floatX* dqkv, const floatX* qkv, const floatX* dout, const float* lse,
                                     const float* Dvec, int T, int NH, float scale) {
    constexpr int D = HS / 32;
    constexpr int QS = HS + 1;  // Q_s, G_s row stride: lane l reads row l, bank (l+d)%32, conflict-free
    float* K_s = (float*)attention_flash_smem;  // (FA_TILE, HS)  k of the block's keys
    float* V_s = K_s + FA_TILE * HS;            // (FA_TILE, HS)  v of the block's keys
    float* P_s = V_s + FA_TILE * HS;            // (FA_WARPS, FA_ROWS, FA_TILE) P[i][j]: per warp, [key c][query lane]
    float* S_s = P_s + FA_TILE * FA_TILE;       // (FA_WARPS, FA_ROWS, FA_TILE) dS[i][j], same layout
    float* Q_s = S_s + FA_TILE * FA_TILE;       // (FA_TILE, QS)  scale * q of the current query tile
    float* G_s = Q_s + FA_TILE * QS;            // (FA_TILE, QS)  dout of the current query tile
    float* L_s = G_s + FA_TILE * QS;            // (FA_TILE)      lse of the current query rows
    float* D_s = L_s + FA_TILE;                 // (FA_TILE)      D of the current query rows
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int bh = blockIdx.x, b = bh / NH, h = bh % NH;
    int C = NH * HS;
    size_t C3 = 3 * (size_t)C;
    // key tile k_tile is visited by the query tiles k_tile..end: the first ones have the most
    // work, and they start first (blocks are started in increasing blockIdx.y)
    int k_tile = blockIdx.y;
    int n_tiles = gridDim.y;  // ceil(T / FA_TILE)
    int k0 = k_tile * FA_TILE;
    const floatX* qkv_bh = qkv + (size_t)b * T * C3 + (size_t)h * HS;   // q of (b, t=0, h, d=0)
    const floatX* dout_bh = dout + (size_t)b * T * C + (size_t)h * HS;  // dout of (b, t=0, h, d=0)
    const float* lse_bh = lse + (size_t)bh * T;
    const float* D_bh = Dvec + (size_t)bh * T;
    float* P_w = P_s + warp * FA_ROWS * FA_TILE;
    float* S_w = S_s + warp * FA_ROWS * FA_TILE;

    fa_load_tile<HS>(K_s, HS, qkv_bh + C, C3, k0, T, 1.0f);
    fa_load_tile<HS>(V_s, HS, qkv_bh + 2 * C, C3, k0, T, 1.0f);

    float dk[FA_ROWS][D], dv[FA_ROWS][D];  // key c of the warp, this lane's dims
    #pragma unroll
    for (int c = 0; c < FA_ROWS; c++) {
#pragma unroll
        for (int x = 0; x < D; x++) { dk[c][x] = 0.0f; dv[c][x] = 0.0f; }
    }

    // query tiles k_tile..: the rows i >= k0, all that can see a key of the block (j <= i)
    for (int qt = k_tile; qt < n_tiles; qt++) {
        int q0 = qt * FA_TILE;
        __syncthreads();  // K_s, V_s complete (first pass); every warp done with the previous Q_s, G_s, L_s, D_s
        fa_load_tile<HS>(Q_s, QS, qkv_bh, C3, q0, T, scale);
        fa_load_tile<HS>(G_s, QS, dout_bh, (size_t)C, q0, T, 1.0f);
        if (threadIdx.x < FA_TILE) {
            int t = q0 + threadIdx.x;
            L_s[threadIdx.x] = t < T ? lse_bh[t] : 0.0f;
            D_s[threadIdx.x] = t < T ? D_bh[t] : 0.0f;
        }
        __syncthreads();  // the query tile complete

        // S[i][j] and dP[i][j] for query i = q0 + lane and the warp's FA_ROWS keys at once:
        // each Q_s, G_s value read serves all keys; K_s, V_s float4 reads are broadcasts
        float s[FA_ROWS], dp[FA_ROWS];
#pragma unroll
        for (int c = 0; c < FA_ROWS; c++) { s[c] = 0.0f; dp[c] = 0.0f; }
        const float* qrow = Q_s + lane * QS;
        const float* grow = G_s + lane * QS;
        #pragma unroll 2
        for (int d = 0; d < HS; d += 4) {
            float qa = qrow[d], qb = qrow[d + 1], qc = qrow[d + 2], qd = qrow[d + 3];
            float ga = grow[d], gb = grow[d + 1], gc = grow[d + 2], gd = grow[d + 3];
            #pragma unroll
            for (int c = 0; c < FA_ROWS; c++) {
                float4 k4 = *(const float4*)(K_s + (warp * FA_ROWS + c) * HS + d);
                float4 v4 = *(const float4*)(V_s + (warp * FA_ROWS + c) * HS + d);
                s[c] = fa_dot4(s[c], k4, qa, qb, qc, qd);
                dp[c] = fa_dot4(dp[c], v4, ga, gb, gc, gd);
            }
        }
        int i = q0 + lane;
        float lse_i = L_s[lane], D_i = D_s[lane];
#pragma unroll
        for (int c = 0; c < FA_ROWS; c++) {
            int j = k0 + warp * FA_ROWS + c;
            // masked: the future (j > i), and the rows i >= T of a ragged last tile (their
            // zero-loaded q and dO already make their dK, dV terms 0, but with P = exp(0 - 0)
            // = 1: the mask states the intent instead of relying on the zeros)
            float p = (j <= i && i < T) ? expf(s[c] - lse_i) : 0.0f;
            P_w[c * FA_TILE + lane] = p;
            S_w[c * FA_TILE + lane] = p * (dp[c] - D_i);  // dS, the gradient w.r.t. the scaled score
        }
        __syncwarp();  // all lanes' P_w, S_w entries written before any lane reads them

        // dV_j += sum_i P[i][j] dO_i; dK_j += sum_i dS[i][j] (scale q_i) (Q_s holds scale * q,
        // which supplies dK's factor scale). Four query rows at a time: their dO and q values
        // (lane's dims) in registers, then one float4 broadcast read of P_w and S_w per key
        #pragma unroll 1
        for (int ii = 0; ii < FA_TILE; ii += 4) {
            float g[4][D], q[4][D];
            #pragma unroll
            for (int u = 0; u < 4; u++) {
                #pragma unroll
                for (int x = 0; x < D; x++) {
                    g[u][x] = G_s[(ii + u) * QS + lane + 32 * x];
                    q[u][x] = Q_s[(ii + u) * QS + lane + 32 * x];
                }
            }
            #pragma unroll
            for (int c = 0; c < FA_ROWS; c++) {
                float4 p4 = *(const float4*)(P_w + c * FA_TILE + ii);
                float4 s4 = *(const float4*)(S_w + c * FA_TILE + ii);
                #pragma unroll
                for (int x = 0; x < D; x++) {
                    dv[c][x] += p4.x * g[0][x] + p4.y * g[1][x] + p4.z * g[2][x] + p4.w * g[3][x];
                    dk[c][x] += s4.x * q[0][x] + s4.y * q[1][x] + s4.z * q[2][x] + s4.w * q[3][x];
                }
            }
        }
        // (P_w, S_w are rewritten only after the next tile's __syncthreads)
    }

    #pragma unroll
    for (int c = 0; c < FA_ROWS; c++) {
        int j = k0 + warp * FA_ROWS + c;
        if (j < T) {  // warp-uniform
            floatX* dk_row = dqkv + ((size_t)b * T + j) * C3 + C + (size_t)h * HS;  // (B,T,3C): k part of row j, head h
            floatX* dv_row = dk_row + C;                                             // v part
            #pragma unroll
            for (int x = 0; x < D; x++) {
                int d = lane + 32 * x;
                dk_row[d] = from_float<floatX>(to_float(dk_row[d]) + dk[c][x]);
                dv_row[d] = from_float<floatX>(to_float(dv_row[d]) + dv[c][x]);
            }
        }
    }
}

// dQ. Grid (B*NH, ceil(T/FA_TILE)), FA_THREADS threads: block = (b,h) x query tile
// [q0, q0 + FA_TILE); warp w owns the query rows i = q0 + w*FA_ROWS + r, r < FA_ROWS.
// dqkv (B,T,3C): the q part of the block's rows i < T, head h, += dQ.
template <int HS>
__global__ void __launch_bounds__(FA_THREADS)
attention_flash_backward_dq_kernel(floatX* dqkv, const floatX* qkv, const floatX* dout, const float* lse,
                                   const float* Dvec, int T, int NH, float scale) {
    constexpr int D = HS / 32;
    constexpr int KS = HS + 1;  // K_s, V_s row stride: lane l reads row l, conflict-free
    float* Q_s = (float*)attention_flash_smem;  // (FA_TILE, HS)  scale * q of the block's rows
    float* G_s = Q_s + FA_TILE * HS;            // (FA_TILE, HS)  dout of the block's rows
    float* K_s = G_s + FA_TILE * HS;            // (FA_TILE, KS)  k of the current key tile
    float* V_s = K_s + FA_TILE * KS;            // (FA_TILE, KS)  v of the current key tile
    float* P_s = V_s + FA_TILE * KS;            // (FA_WARPS, FA_ROWS, FA_TILE) dS[i][j]: per warp, [row r][key lane]
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int bh = blockIdx.x, b = bh / NH, h = bh % NH;
    int C = NH * HS;
    size_t C3 = 3 * (size_t)C;
    int q_tile = gridDim.y - 1 - blockIdx.y;  // the most work first, as in the forward
    int q0 = q_tile * FA_TILE;
    const floatX* qkv_bh = qkv + (size_t)b * T * C3 + (size_t)h * HS;
    const floatX* dout_bh = dout + (size_t)b * T * C + (size_t)h * HS;
    float* P_w = P_s + warp * FA_ROWS * FA_TILE;

    fa_load_tile<HS>(Q_s, HS, qkv_bh, C3, q0, T, scale);
    fa_load_tile<HS>(G_s, HS, dout_bh, (size_t)C, q0, T, 1.0f);

    float lse_r[FA_ROWS], D_r[FA_ROWS], dq[FA_ROWS][D];
    #pragma unroll
    for (int r = 0; r < FA_ROWS; r++) {
        int i = q0 + warp * FA_ROWS + r;
        lse_r[r] = i < T ? lse[(size_t)bh * T + i] : 0.0f;  // the same address in all lanes
        D_r[r] = i < T ? Dvec[(size_t)bh * T + i] : 0.0f;
#pragma unroll
        for (int x = 0; x < D; x++) { dq[r][x] = 0.0f; }
    }

    for (int kt = 0; kt <= q_tile; kt++) {
        int k0 = kt * FA_TILE;
        __syncthreads();  // every warp is done reading the previous tile's K_s, V_s
        fa_load_tile<HS>(K_s, KS, qkv_bh + C, C3, k0, T, 1.0f);
        fa_load_tile<HS>(V_s, KS, qkv_bh + 2 * C, C3, k0, T, 1.0f);
        __syncthreads();  // K_s, V_s (and Q_s, G_s on the first pass) complete

        // S and dP of key j = k0 + lane against the warp's rows, as in the forward
        float s[FA_ROWS], dp[FA_ROWS];
#pragma unroll
        for (int r = 0; r < FA_ROWS; r++) { s[r] = 0.0f; dp[r] = 0.0f; }
        const float* krow = K_s + lane * KS;
        const float* vrow = V_s + lane * KS;
        #pragma unroll 2
        for (int d = 0; d < HS; d += 4) {
            float ka = krow[d], kb = krow[d + 1], kc = krow[d + 2], kd = krow[d + 3];
            float va = vrow[d], vb = vrow[d + 1], vc = vrow[d + 2], vd = vrow[d + 3];
            #pragma unroll
            for (int r = 0; r < FA_ROWS; r++) {
                float4 q4 = *(const float4*)(Q_s + (warp * FA_ROWS + r) * HS + d);
                float4 g4 = *(const float4*)(G_s + (warp * FA_ROWS + r) * HS + d);
                s[r] = fa_dot4(s[r], q4, ka, kb, kc, kd);
                dp[r] = fa_dot4(dp[r], g4, va, vb, vc, vd);
            }
        }
        int j = k0 + lane;
#pragma unroll
        for (int r = 0; r < FA_ROWS; r++) {
            int i = q0 + warp * FA_ROWS + r;
            float p = (j <= i && i < T) ? expf(s[r] - lse_r[r]) : 0.0f;  // causal; rows >= T are never written anyway
            P_w[r * FA_TILE + lane] = p * (dp[r] - D_r[r]);             // dS
        }
        __syncwarp();  // all lanes' dS entries written before any lane reads them

        // dQ_i += sum_j dS[i][j] k_j (times scale at the end), four keys at a time
        #pragma unroll 2
        for (int jj = 0; jj < FA_TILE; jj += 4) {
            float k[4][D];
            #pragma unroll
            for (int u = 0; u < 4; u++) {
                #pragma unroll
                for (int x = 0; x < D; x++) { k[u][x] = K_s[(jj + u) * KS + lane + 32 * x]; }
            }
            #pragma unroll
            for (int r = 0; r < FA_ROWS; r++) {
                float4 s4 = *(const float4*)(P_w + r * FA_TILE + jj);
                #pragma unroll
                for (int x = 0; x < D; x++) {
                    dq[r][x] += s4.x * k[0][x] + s4.y * k[1][x] + s4.z * k[2][x] + s4.w * k[3][x];
                }
            }
        }
    }

    #pragma unroll
    for (int r = 0; r < FA_ROWS; r++) {
        int i = q0 + warp * FA_ROWS + r;
        if (i < T) {  // warp-uniform
            floatX* dq_row = dqkv + ((size_t)b * T + i) * C3 + (size_t)h * HS;  // (B,T,3C): q part of row i, head h
            #pragma unroll
            for (int x = 0; x < D; x++) {
                int d = lane + 32 * x;
                dq_row[d] = from_float<floatX>(to_float(dq_row[d]) + scale * dq[r][x]);
            }
        }
    }
}

// ----------------------------------------------------------------------------
// flash path, host side

// Which kernels run: the bf16 build's are the tensor-core ones (llmc/attention_tc.cuh: head
// sizes 64, 80, 96, 128), the fp32 build's these CUDA-core ones (exact fp32, matching the CPU
// trainer to its rounding: head sizes 64, 96, 128, a multiple of 32 and a case below each).
// The dot kernel above and the contract below are both's.
#if defined(ENABLE_FP32)
static inline int attention_flash_supports_hs(int hs) { return hs == 64 || hs == 96 || hs == 128; }
#define ATTENTION_FLASH_HEAD_SIZES "64, 96 or 128 (this fp32 build's CUDA-core kernels)"
#else
static inline int attention_flash_supports_hs(int hs) { return attention_tc_supports_hs(hs); }
#define ATTENTION_FLASH_HEAD_SIZES "64, 80, 96 or 128"
#endif

// The run-time choice between the two paths: 1 to use attention_flash_forward/_backward, 0 for
// attention_forward/_backward (cuBLAS, the reference). The flash kernels take any T >= 1 (the
// last tile may be ragged), so for a given head size the answer is the same for every T >= 1:
// a trainer that decides once, at allocation with its largest T, may call the flash path
// with any smaller T later (the sampling loop runs T = 1, 2, ...).
static inline int attention_use_flash(int T, int hs) {
    return T >= 1 && T <= 65535 * FA_TILE && attention_flash_supports_hs(hs);
}

// floats of the lse buffer that attention_flash_forward writes and attention_flash_backward
// reads (per layer, kept between the two): (B,NH,T)
static inline size_t attention_flash_lse_floats(int B, int NH, int T) { return (size_t)B * NH * T; }

// floats of the `scratch` argument of attention_flash_backward: D (B,NH,T)
static inline size_t attention_flash_backward_scratch_floats(int B, int NH, int T) { return (size_t)B * NH * T; }

static inline void attention_flash_check(const char* fn, int B, int T, int C, int NH) {
    if (B < 1 || NH < 1 || C % NH != 0 || !attention_use_flash(T, C / NH)) {
        fprintf(stderr, "error: %s: unsupported shape B=%d T=%d C=%d NH=%d: the flash kernels need B >= 1, "
                "1 <= T <= %d and a head size C/NH of " ATTENTION_FLASH_HEAD_SIZES " (check attention_use_flash() and use "
                "attention_forward/attention_backward otherwise)\n", fn, B, T, C, NH, 65535 * FA_TILE);
        exit(EXIT_FAILURE);
    }
}

// kernels whose dynamic shared memory passes 48 KB must opt in; cheap, so done at every launch
static inline void attention_flash_smem_opt_in(const void* kernel, size_t bytes) {
    cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

template <int HS>
static inline void attention_flash_forward_hs(floatX* out, float* lse, const floatX* qkv, int B, int T, int NH,
                                              cudaStream_t s) {
    // Q_s, V_s (FA_TILE, HS), K_s (FA_TILE, HS+1), P_s (FA_TILE, FA_TILE)
    size_t smem = sizeof(float) * (2 * FA_TILE * HS + FA_TILE * (HS + 1) + FA_TILE * FA_TILE);
    attention_flash_smem_opt_in((const void*)attention_flash_forward_kernel<HS>, smem);
    dim3 grid((unsigned int)(B * NH), (unsigned int)CEIL_DIV(T, FA_TILE));
    attention_flash_forward_kernel<HS><<<grid, FA_THREADS, smem, s>>>(out, lse, qkv, T, NH, 1.0f / sqrtf((float)HS));
    cudaCheck(cudaGetLastError());
}

template <int HS>
static inline void attention_flash_backward_hs(floatX* dqkv, const float* Dvec, const floatX* dout, const floatX* qkv,
                                               const float* lse, int B, int T, int NH, cudaStream_t s) {
    float scale = 1.0f / sqrtf((float)HS);
    dim3 grid((unsigned int)(B * NH), (unsigned int)CEIL_DIV(T, FA_TILE));
    // K_s, V_s (FA_TILE, HS), P_s, S_s (FA_TILE, FA_TILE), Q_s, G_s (FA_TILE, HS+1), L_s, D_s (FA_TILE)
    size_t smem_kv = sizeof(float) * (2 * FA_TILE * HS + 2 * FA_TILE * FA_TILE + 2 * FA_TILE * (HS + 1) + 2 * FA_TILE);
    attention_flash_smem_opt_in((const void*)attention_flash_backward_dkdv_kernel<HS>, smem_kv);
    attention_flash_backward_dkdv_kernel<HS><<<grid, FA_THREADS, smem_kv, s>>>(dqkv, qkv, dout, lse, Dvec, T, NH, scale);
    cudaCheck(cudaGetLastError());
    // Q_s, G_s (FA_TILE, HS), K_s, V_s (FA_TILE, HS+1), P_s (FA_TILE, FA_TILE)
    size_t smem_q = sizeof(float) * (2 * FA_TILE * HS + 2 * FA_TILE * (HS + 1) + FA_TILE * FA_TILE);
    attention_flash_smem_opt_in((const void*)attention_flash_backward_dq_kernel<HS>, smem_q);
    attention_flash_backward_dq_kernel<HS><<<grid, FA_THREADS, smem_q, s>>>(dqkv, qkv, dout, lse, Dvec, T, NH, scale);
    cudaCheck(cudaGetLastError());
}

// out (B,T,C) OVERWRITTEN; lse (B,NH,T) floats OVERWRITTEN (attention_flash_lse_floats()),
// kept with out and qkv for attention_flash_backward; qkv (B,T,3C) is only read.
// Any T >= 1 with a supported head size (attention_use_flash), else an error and exit.
static inline void attention_flash_forward(floatX* out, float* lse, const floatX* qkv,
                                           int B, int T, int C, int NH, cudaStream_t s) {
    attention_flash_check("attention_flash_forward", B, T, C, NH);
    switch (C / NH) {
#if defined(ENABLE_FP32)
        case 64:  attention_flash_forward_hs<64>(out, lse, qkv, B, T, NH, s); break;
        case 96:  attention_flash_forward_hs<96>(out, lse, qkv, B, T, NH, s); break;
        case 128: attention_flash_forward_hs<128>(out, lse, qkv, B, T, NH, s); break;
#else
        case 64:  attention_tc_forward_hs<64>(out, lse, qkv, B, T, NH, s); break;
        case 80:  attention_tc_forward_hs<80>(out, lse, qkv, B, T, NH, s); break;
        case 96:  attention_tc_forward_hs<96>(out, lse, qkv, B, T, NH, s); break;
        case 128: attention_tc_forward_hs<128>(out, lse, qkv, B, T, NH, s); break;
#endif
        default: break;  // refused by attention_flash_check
    }
}

// dqkv (B,T,3C) += gradient of the attention given dout (B,T,C). ACCUMULATES, like
// attention_backward: zero dqkv first if it should receive this gradient only.
// qkv, out, lse: the input, output and lse of attention_flash_forward (unchanged since).
// scratch: attention_flash_backward_scratch_floats() floats, OVERWRITTEN (content irrelevant).
// Deterministic: no atomics; the same inputs give bitwise the same dqkv.
static inline void attention_flash_backward(floatX* dqkv, float* scratch, const floatX* dout, const floatX* qkv,
                                            const floatX* out, const float* lse,
                                            int B, int T, int C, int NH, cudaStream_t s) {
    attention_flash_check("attention_flash_backward", B, T, C, NH);
    int hs = C / NH;
    float* Dvec = scratch;  // (B,NH,T)
    const int block = 256;
    size_t rows = (size_t)B * NH * T;
    attention_flash_backward_dot_kernel<<<(unsigned int)CEIL_DIV(rows, (size_t)(block / 32)), block, 0, s>>>(
        Dvec, out, dout, B, T, NH, hs);
    cudaCheck(cudaGetLastError());
    switch (hs) {
#if defined(ENABLE_FP32)
        case 64:  attention_flash_backward_hs<64>(dqkv, Dvec, dout, qkv, lse, B, T, NH, s); break;
        case 96:  attention_flash_backward_hs<96>(dqkv, Dvec, dout, qkv, lse, B, T, NH, s); break;
        case 128: attention_flash_backward_hs<128>(dqkv, Dvec, dout, qkv, lse, B, T, NH, s); break;
#else
        case 64:  attention_tc_backward_hs<64>(dqkv, Dvec, dout, qkv, lse, B, T, NH, s); break;
        case 80:  attention_tc_backward_hs<80>(dqkv, Dvec, dout, qkv, lse, B, T, NH, s); break;
        case 96:  attention_tc_backward_hs<96>(dqkv, Dvec, dout, qkv, lse, B, T, NH, s); break;
        case 128: attention_tc_backward_hs<128>(dqkv, Dvec, dout, qkv, lse, B, T, NH, s); break;
#endif
        default: break;  // refused by attention_flash_check
    }
}

#endif // LLMC_ATTENTION_FLASH_CUH
