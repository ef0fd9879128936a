/*
 Causal flash attention on the tensor cores (bf16 in, fp32 accumulation), forward and
 backward: what --attention flash runs in the bf16 build (llmc/attention_flash.cuh keeps the
 CUDA-core kernels, which the fp32 build runs, and the public calls that choose). The math,
 the layout and the contract are attention_flash.cuh's: qkv (B,T,3C) in, out (B,T,C) and
 lse (B,NH,T) out, dqkv (B,T,3C) accumulated, nothing of size T x T stored, deterministic
 (every element of dqkv owned by one thread of one kernel: no atomics). Learned from the
 FlashAttention-2 paper's algorithm; the code is this project's.

 Tiles: a block is TC_WARPS = 4 warps over TC_BR = 64 query rows (forward, dq) or key rows
 (dkdv), 16 a warp, the rows of one m16n8k16 product; the other side walks tiles of TC_BC =
 64 keys or queries. Every product is mma_bf16_16816 (llmc/mma.cuh has the fragment
 layouts): a warp's 16 x 64 scores are 8 accumulators of 16 x 8, each summed over the head
 dims 16 at a time, and the scores, turned into probabilities in registers, are the A
 operand of the next product as they are (the accumulator's layout is the A fragment's:
 llmc/mma.cuh's note), so P never goes through shared memory. Tiles reach shared memory by
 cp.async, the next tile's copies in flight while this one is multiplied (two buffers), rows
 padded by 16 bytes so that ldmatrix's eight 16-byte rows fall in eight distinct bank
 quads; rows past T are zero-filled.

   forward      grid (B*NH, ceil(T/64)), the last query tiles first (they see the most keys):
                Q's fragments in registers; per key tile at or below the diagonal S = Q K^T,
                the causal mask on the diagonal tile, the online softmax (running max and sum
                per row, in log2 units: exp2 of the scores times scale*log2(e)), O += P V;
                then O / l and lse = ln(l) + max
   dot          D = rowsum(dO o O), attention_flash.cuh's kernel
   dkdv         grid (B*NH, ceil(T/64)), a block per key tile: per query tile at or after the
                diagonal, S^T = K Q^T and dP^T = V dO^T, P^T from lse, dS^T = P^T (dP^T - D),
                dV += P^T dO and dK += dS^T Q in registers; added to dqkv once
   dq           grid (B*NH, ceil(T/64)), a block per query tile: per key tile up to the
                diagonal, S = Q K^T (the forward's products in the forward's order: the same
                bits), dP = dO V^T, dS = P (dP - D), dQ += dS K; added once
 (FlashAttention-2 adds dQ inside the dkdv loop with float atomics in a varying order; here
 dq is its own kernel, recomputing S and dP: deterministic, for 2 products more per tile pair.)

 Head sizes: multiples of 16 (instantiated for 64, 80, 96, 128); any T >= 1; any B and NH
 (grid.x = B*NH). Fully masked tiles (above the diagonal) are never visited. Shared memory,
 HS = 128: 87 KB forward, 105 KB dkdv and dq (opted in past 48 KB).
*/
#ifndef LLMC_ATTENTION_TC_CUH
#define LLMC_ATTENTION_TC_CUH

#include <math.h>                  // exp2f, log2f
#include <stdint.h>                // uint32_t: bf16 pairs
#include <string.h>                // memcpy: tc_store2 under a host compiler
#include "llmc/cuda_common.cuh"    // cudaCheck, CEIL_DIV, __nv_bfloat16
#include "llmc/mma.cuh"            // mma_bf16_16816, ldmatrix, cp.async, mma_pack_bf16

#define TC_BR 64                      // rows of a block: query rows (forward, dq) or keys (dkdv)
#define TC_BC 64                      // the other side's tile: keys (forward, dq) or queries (dkdv)
#define TC_WARPS 4
#define TC_THREADS (TC_WARPS * 32)
#define TC_LOG2E 1.4426950408889634f
#define TC_LN2 0.6931471805599453f
typedef __nv_bfloat16 tc_bf16;        // the kernels' one precision (the fp32 build never includes them)

// the tensor-core kernels' dynamic shared memory (16-byte aligned: cp.async and ldmatrix)
extern __shared__ float4 attention_tc_smem[];

// rows [t0, t0 + 64) of a (., ld_src) bf16 matrix's HS columns at src into dst (64, HS + 8),
// by cp.async, 16 bytes a copy, every thread of the block taking part; rows >= T zero-filled
template <int HS>
__device__ __forceinline__ void tc_load_tile(tc_bf16* dst, const tc_bf16* src, size_t ld_src, int t0, int T) {
    constexpr int CH = HS / 8;  // 16-byte chunks a row
    for (int e = threadIdx.x; e < 64 * CH; e += TC_THREADS) {
        int r = e / CH, c = e % CH;
        int t = t0 + r;
        const tc_bf16* from = t < T ? src + (size_t)t * ld_src + c * 8 : src;  // (not read when zero-filled)
        cp_async_16(dst + r * (HS + 8) + c * 8, from, t < T);
    }
}

// the A fragments of rows r0..r0+15 of tile X (ld elements a row) at columns c..c+15
__device__ __forceinline__ void tc_frag_a(uint32_t a[4], const tc_bf16* X, int ld, int r0, int c, int lane) {
    ldmatrix_x4(a, X + (r0 + (lane & 7) + ((lane >> 3) & 1) * 8) * ld + c + (lane >> 4) * 8);
}
// B fragments of B = X^T for two n-tiles: X's rows n0..n0+15 (n), columns c..c+15 (k);
// b[0..1] for rows n0..n0+7, b[2..3] for n0+8..n0+15
__device__ __forceinline__ void tc_frag_bt(uint32_t b[4], const tc_bf16* X, int ld, int n0, int c, int lane) {
    ldmatrix_x4(b, X + (n0 + (lane & 7) + (lane >> 4) * 8) * ld + c + ((lane >> 3) & 1) * 8);
}
// B fragments of B = X for two n-tiles: X's rows k0..k0+15 (k), columns n0..n0+15 (n);
// b[0..1] for columns n0..n0+7, b[2..3] for n0+8..n0+15
__device__ __forceinline__ void tc_frag_b(uint32_t b[4], const tc_bf16* X, int ld, int k0, int n0, int lane) {
    ldmatrix_x4_trans(b, X + (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * ld + n0 + (lane >> 4) * 8);
}
// acc[NT2 * 2] (16 x 8 each) += A (16 x 16) X[k0..k0+15][0..8*NT2*2): one k-step of A B with B
// = X, every n-tile of X's columns
template <int NT>
__device__ __forceinline__ void tc_mma_b(float acc[NT][4], const uint32_t a[4], const tc_bf16* X, int ld, int k0, int lane) {
    #pragma unroll
    for (int np = 0; np < NT / 2; np++) {
        uint32_t b[4];
        tc_frag_b(b, X, ld, k0, np * 16, lane);
        mma_bf16_16816(acc[2 * np], a, b);
        mma_bf16_16816(acc[2 * np + 1], a, b + 2);
    }
}
// s[8] (16 x 64) = A (16 x HS) X^T (X: a tile of 64 rows of HS): the scores of 16 rows against
// a tile, summed over HS 16 at a time in this order. A's fragments from registers (afrag, the
// forward's Q) or, afrag NULL, from rows a_r0.. of the tile A_s (the backward: fewer registers)
template <int HS>
__device__ __forceinline__ void tc_scores(float s[8][4], const uint32_t (*afrag)[4], const tc_bf16* A_s, int a_r0,
                                          const tc_bf16* X, int lane) {
    #pragma unroll
    for (int nt = 0; nt < 8; nt++) { s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f; }
    #pragma unroll
    for (int kk = 0; kk < HS / 16; kk++) {
        uint32_t a[4];
        if (afrag == NULL) { tc_frag_a(a, A_s, HS + 8, a_r0, kk * 16, lane); }
        const uint32_t* ak = afrag != NULL ? afrag[kk] : a;
        #pragma unroll
        for (int np = 0; np < 4; np++) {
            uint32_t b[4];
            tc_frag_bt(b, X, HS + 8, np * 16, kk * 16, lane);
            mma_bf16_16816(s[2 * np], ak, b);
            mma_bf16_16816(s[2 * np + 1], ak, b + 2);
        }
    }
}
// the accumulators of a 16 x 64 product as the A fragment of its k-step kk (columns 16kk..16kk+15)
__device__ __forceinline__ void tc_acc_to_a(uint32_t a[4], const float s[8][4], int kk) {
    a[0] = mma_pack_bf16(s[2 * kk][0], s[2 * kk][1]);
    a[1] = mma_pack_bf16(s[2 * kk][2], s[2 * kk][3]);
    a[2] = mma_pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    a[3] = mma_pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
}
// two bf16 (a mma_pack_bf16 pair) to p, 4-byte aligned: one 32-bit store (a host compiler,
// test/emu's, gets a memcpy: its aliasing rules)
__device__ __forceinline__ void tc_store2(tc_bf16* p, uint32_t v) {
#if defined(__CUDACC__)
    *(uint32_t*)p = v;
#else
    memcpy(p, &v, sizeof(v));
#endif
}

// dst (rows of ld elements) += acc (16 x 8 NT) at rows r0 (this lane's r0 + g and r0 + g + 8,
// those < T), columns 8 nt + 2t, scaled by mul: one read-add-write of two bf16 each
template <int NT>
__device__ __forceinline__ void tc_add_rows(tc_bf16* dst, size_t ld, int r0, int T, const float acc[NT][4], float mul, int lane) {
    int g = lane / 4, t = lane % 4;
    #pragma unroll
    for (int half = 0; half < 2; half++) {
        int r = r0 + g + 8 * half;
        if (r >= T) { continue; }
        tc_bf16* row = dst + (size_t)r * ld + 2 * t;
        #pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            tc_bf16* p = row + 8 * nt;
            tc_store2(p, mma_pack_bf16(__bfloat162float(p[0]) + mul * acc[nt][2 * half], __bfloat162float(p[1]) + mul * acc[nt][2 * half + 1]));
        }
    }
}

// Forward. Block = (b,h) x query tile [q0, q0 + 64), warp w: rows q0 + 16w .. + 15.
// out (B,T,C): rows < T of head h; lse (B,NH,T): ln sum_j<=i exp(scale q_i.k_j).
template <int HS>
__global__ void __launch_bounds__(TC_THREADS)
attention_tc_forward_kernel(tc_bf16* out, float* lse, const tc_bf16* qkv, int T, int NH, float scale) {
    constexpr int LD = HS + 8, NT = HS / 8;
    tc_bf16* Q_s = (tc_bf16*)attention_tc_smem;  // (64, LD)
    tc_bf16* K_s = Q_s + TC_BR * LD;             // 2 x (64, LD)
    tc_bf16* V_s = K_s + 2 * TC_BC * LD;         // 2 x (64, LD)
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    int bh = blockIdx.x, b = bh / NH, h = bh % NH, C = NH * HS;
    size_t C3 = 3 * (size_t)C;
    int q_tile = gridDim.y - 1 - blockIdx.y, q0 = q_tile * TC_BR;
    const tc_bf16* q_g = qkv + (size_t)b * T * C3 + (size_t)h * HS;  // (b, t=0, head h): q; k at +C, v at +2C
    const float sl2 = scale * TC_LOG2E;                             // scores in log2 units

    tc_load_tile<HS>(Q_s, q_g, C3, q0, T);
    tc_load_tile<HS>(K_s, q_g + C, C3, 0, T);
    tc_load_tile<HS>(V_s, q_g + 2 * C, C3, 0, T);
    cp_async_commit();

    uint32_t qf[HS / 16][4];
    float o[NT][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // rows g, g + 8
    #pragma unroll
    for (int nt = 0; nt < NT; nt++) { o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.0f; }
    int i0 = q0 + warp * 16 + g;  // this lane's rows: i0, i0 + 8

    // key tiles 0..q_tile (TC_BC == TC_BR): every key a row of the block may see
    for (int kt = 0; kt <= q_tile; kt++) {
        int buf = kt & 1, k0 = kt * TC_BC;
        if (kt < q_tile) {  // the next tile's copies fly while this one is multiplied
            tc_load_tile<HS>(K_s + (buf ^ 1) * TC_BC * LD, q_g + C, C3, k0 + TC_BC, T);
            tc_load_tile<HS>(V_s + (buf ^ 1) * TC_BC * LD, q_g + 2 * C, C3, k0 + TC_BC, T);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();  // this tile (and Q on the first pass) in shared memory for every warp
        if (kt == 0) {
            #pragma unroll
            for (int kk = 0; kk < HS / 16; kk++) { tc_frag_a(qf[kk], Q_s, LD, warp * 16, kk * 16, lane); }
        }
        const tc_bf16* Kb = K_s + buf * TC_BC * LD;
        const tc_bf16* Vb = V_s + buf * TC_BC * LD;

        float s[8][4];
        tc_scores<HS>(s, qf, NULL, 0, Kb, lane);
        // scale, mask (the diagonal tile: keys after the row; it also hides keys >= T from
        // every row < T), and each row's max over the tile (the 4 lanes of a row: xor 1, 2)
        float mx[2] = {-INFINITY, -INFINITY};
        #pragma unroll
        for (int nt = 0; nt < 8; nt++) {
            #pragma unroll
            for (int e = 0; e < 4; e++) {
                int j = k0 + 8 * nt + 2 * t + (e & 1), i = i0 + 8 * (e >> 1);
                float v = kt == q_tile && j > i ? -INFINITY : s[nt][e] * sl2;
                s[nt][e] = v;
                mx[e >> 1] = fmaxf(mx[e >> 1], v);
            }
        }
        float corr[2];
        #pragma unroll
        for (int r = 0; r < 2; r++) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            float m_new = fmaxf(m[r], mx[r]);  // finite: key k0 <= q0 <= every row of the block
            corr[r] = exp2f(m[r] - m_new);     // 0 on the first tile (m = -inf)
            m[r] = m_new;
            l[r] *= corr[r];
        }
        #pragma unroll
        for (int nt = 0; nt < 8; nt++) {
            #pragma unroll
            for (int e = 0; e < 4; e++) {
                float p = exp2f(s[nt][e] - m[e >> 1]);  // exactly 0 where masked
                s[nt][e] = p;
                l[e >> 1] += p;  // this lane's share of the row sum (added across the 4 lanes at the end)
            }
        }
        #pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            o[nt][0] *= corr[0]; o[nt][1] *= corr[0];
            o[nt][2] *= corr[1]; o[nt][3] *= corr[1];
        }
        // O += P V: P's accumulators are the A fragments, 16 keys a k-step
        #pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            uint32_t pa[4];
            tc_acc_to_a(pa, s, kk);
            tc_mma_b<NT>(o, pa, Vb, LD, kk * 16, lane);
        }
        __syncthreads();  // every warp done with this buffer: the next pass's copies go into it
    }

    #pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);  // >= 1: the row's max term is exp2(0)
        int i = i0 + 8 * r;
        if (i < T) {
            float inv = 1.0f / l[r];
            tc_bf16* orow = out + ((size_t)b * T + i) * C + (size_t)h * HS + 2 * t;  // (B,T,C) row i, head h
            #pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                tc_store2(orow + 8 * nt, mma_pack_bf16(o[nt][2 * r] * inv, o[nt][2 * r + 1] * inv));
            }
            if (t == 0) { lse[(size_t)bh * T + i] = (m[r] + log2f(l[r])) * TC_LN2; }
        }
    }
}

// P and dS of a 16 x 64 block of scores s (their rows r0 + g, r0 + g + 8 and columns c0 + 8nt
// + 2t + e as the accumulators lay them out), in place: p = exp2(s * sl2 - lse2) where the
// key is not after the query, else 0, and the query < T; ds = p (dp - D). key_rows: the rows
// are keys (dkdv, S^T) or queries (dq, S). lse2 and D by query: in registers (per row) or
// shared memory (per column).
__device__ __forceinline__ void tc_probs(float s[8][4], float dp[8][4], int r0, int c0, int T, int key_rows,
                                         const float* lse2_col, const float* D_col, const float lse2_row[2],
                                         const float D_row[2], float sl2, int lane) {
    int g = lane / 4, t = lane % 4;
    #pragma unroll
    for (int nt = 0; nt < 8; nt++) {
        #pragma unroll
        for (int e = 0; e < 4; e++) {
            int row = r0 + g + 8 * (e >> 1), col = c0 + 8 * nt + 2 * t + (e & 1);
            int key = key_rows ? row : col, query = key_rows ? col : row;
            float l2 = key_rows ? lse2_col[col - c0] : lse2_row[e >> 1];
            float Dq = key_rows ? D_col[col - c0] : D_row[e >> 1];
            float p = key <= query && query < T ? exp2f(s[nt][e] * sl2 - l2) : 0.0f;
            s[nt][e] = p;
            dp[nt][e] = p * (dp[nt][e] - Dq);  // dS: the gradient of the scaled score
        }
    }
}

// dK, dV. Block = (b,h) x key tile [k0, k0 + 64), warp w: keys k0 + 16w .. + 15.
// dqkv (B,T,3C): the k and v parts of the block's keys < T, head h, += dK, dV.
template <int HS>
__global__ void __launch_bounds__(TC_THREADS)
attention_tc_backward_dkdv_kernel(tc_bf16* dqkv, const tc_bf16* qkv, const tc_bf16* dout, const float* lse,
                                  const float* Dvec, int T, int NH, float scale) {
    constexpr int LD = HS + 8, NT = HS / 8;
    tc_bf16* K_s = (tc_bf16*)attention_tc_smem;  // (64, LD)
    tc_bf16* V_s = K_s + TC_BR * LD;             // (64, LD)
    tc_bf16* Q_s = V_s + TC_BR * LD;             // 2 x (64, LD)
    tc_bf16* G_s = Q_s + 2 * TC_BC * LD;         // 2 x (64, LD): dout
    float* L_s = (float*)(G_s + 2 * TC_BC * LD);  // 2 x 64: lse of the queries, in log2 units
    float* D_s = L_s + 2 * TC_BC;                 // 2 x 64
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int bh = blockIdx.x, b = bh / NH, h = bh % NH, C = NH * HS;
    size_t C3 = 3 * (size_t)C;
    int k_tile = blockIdx.y, n_tiles = gridDim.y, k0 = k_tile * TC_BR;
    const tc_bf16* q_g = qkv + (size_t)b * T * C3 + (size_t)h * HS;
    const tc_bf16* g_g = dout + (size_t)b * T * C + (size_t)h * HS;
    const float* lse_bh = lse + (size_t)bh * T;
    const float* D_bh = Dvec + (size_t)bh * T;
    const float sl2 = scale * TC_LOG2E;

    tc_load_tile<HS>(K_s, q_g + C, C3, k0, T);
    tc_load_tile<HS>(V_s, q_g + 2 * C, C3, k0, T);
    // the query tiles k_tile..: every row that can see a key of the block (j <= i)
    auto load_queries = [&](int qt, int buf) {
        tc_load_tile<HS>(Q_s + buf * TC_BC * LD, q_g, C3, qt * TC_BC, T);
        tc_load_tile<HS>(G_s + buf * TC_BC * LD, g_g, (size_t)C, qt * TC_BC, T);
        if (threadIdx.x < TC_BC) {  // (plain loads: read after the barrier below)
            int i = qt * TC_BC + threadIdx.x;
            L_s[buf * TC_BC + threadIdx.x] = i < T ? lse_bh[i] * TC_LOG2E : 0.0f;
            D_s[buf * TC_BC + threadIdx.x] = i < T ? D_bh[i] : 0.0f;
        }
        cp_async_commit();
    };
    load_queries(k_tile, 0);

    float dk[NT][4], dv[NT][4];
    #pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        #pragma unroll
        for (int e = 0; e < 4; e++) { dk[nt][e] = dv[nt][e] = 0.0f; }
    }
    const float none[2] = {0.0f, 0.0f};
    for (int qt = k_tile; qt < n_tiles; qt++) {
        int buf = (qt - k_tile) & 1;
        if (qt + 1 < n_tiles) { load_queries(qt + 1, buf ^ 1); cp_async_wait<1>(); } else { cp_async_wait<0>(); }
        __syncthreads();
        const tc_bf16* Qb = Q_s + buf * TC_BC * LD;
        const tc_bf16* Gb = G_s + buf * TC_BC * LD;
        // S^T = K Q^T and dP^T = V dO^T for the warp's 16 keys against the 64 queries
        float st[8][4], dpt[8][4];
        tc_scores<HS>(st, NULL, K_s, warp * 16, Qb, lane);
        tc_scores<HS>(dpt, NULL, V_s, warp * 16, Gb, lane);
        tc_probs(st, dpt, k0 + warp * 16, qt * TC_BC, T, 1, L_s + buf * TC_BC, D_s + buf * TC_BC, none, none, sl2, lane);
        // dV += P^T dO, dK += dS^T Q (scale at the end): 16 queries a k-step
        #pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            uint32_t a[4];
            tc_acc_to_a(a, st, kk);
            tc_mma_b<NT>(dv, a, Gb, LD, kk * 16, lane);
            tc_acc_to_a(a, dpt, kk);
            tc_mma_b<NT>(dk, a, Qb, LD, kk * 16, lane);
        }
        __syncthreads();  // every warp done with this buffer before the next copies into it
    }
    tc_bf16* dk_g = dqkv + (size_t)b * T * C3 + C + (size_t)h * HS;  // (B,T,3C): the k part, head h
    tc_add_rows<NT>(dk_g, C3, k0 + warp * 16, T, dk, scale, lane);
    tc_add_rows<NT>(dk_g + C, C3, k0 + warp * 16, T, dv, 1.0f, lane);
}

// dQ. Block = (b,h) x query tile [q0, q0 + 64), warp w: rows q0 + 16w .. + 15.
// dqkv (B,T,3C): the q part of the block's rows < T, head h, += dQ.
template <int HS>
__global__ void __launch_bounds__(TC_THREADS)
attention_tc_backward_dq_kernel(tc_bf16* dqkv, const tc_bf16* qkv, const tc_bf16* dout, const float* lse,
                                const float* Dvec, int T, int NH, float scale) {
    constexpr int LD = HS + 8, NT = HS / 8;
    tc_bf16* Q_s = (tc_bf16*)attention_tc_smem;  // (64, LD)
    tc_bf16* G_s = Q_s + TC_BR * LD;             // (64, LD): dout
    tc_bf16* K_s = G_s + TC_BR * LD;             // 2 x (64, LD)
    tc_bf16* V_s = K_s + 2 * TC_BC * LD;         // 2 x (64, LD)
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4;
    int bh = blockIdx.x, b = bh / NH, h = bh % NH, C = NH * HS;
    size_t C3 = 3 * (size_t)C;
    int q_tile = gridDim.y - 1 - blockIdx.y, q0 = q_tile * TC_BR;  // the most work first
    const tc_bf16* q_g = qkv + (size_t)b * T * C3 + (size_t)h * HS;
    const float sl2 = scale * TC_LOG2E;

    tc_load_tile<HS>(Q_s, q_g, C3, q0, T);
    tc_load_tile<HS>(G_s, dout + (size_t)b * T * C + (size_t)h * HS, (size_t)C, q0, T);
    tc_load_tile<HS>(K_s, q_g + C, C3, 0, T);
    tc_load_tile<HS>(V_s, q_g + 2 * C, C3, 0, T);
    cp_async_commit();
    float lse2[2], Dr[2];
    #pragma unroll
    for (int r = 0; r < 2; r++) {
        int i = q0 + warp * 16 + g + 8 * r;
        lse2[r] = i < T ? lse[(size_t)bh * T + i] * TC_LOG2E : 0.0f;
        Dr[r] = i < T ? Dvec[(size_t)bh * T + i] : 0.0f;
    }
    float dq[NT][4];
    #pragma unroll
    for (int nt = 0; nt < NT; nt++) { dq[nt][0] = dq[nt][1] = dq[nt][2] = dq[nt][3] = 0.0f; }

    for (int kt = 0; kt <= q_tile; kt++) {
        int buf = kt & 1;
        if (kt < q_tile) {
            tc_load_tile<HS>(K_s + (buf ^ 1) * TC_BC * LD, q_g + C, C3, (kt + 1) * TC_BC, T);
            tc_load_tile<HS>(V_s + (buf ^ 1) * TC_BC * LD, q_g + 2 * C, C3, (kt + 1) * TC_BC, T);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const tc_bf16* Kb = K_s + buf * TC_BC * LD;
        const tc_bf16* Vb = V_s + buf * TC_BC * LD;
        // S = Q K^T as the forward computed it (the same fragments, the same order), dP = dO V^T
        float s[8][4], dp[8][4];
        tc_scores<HS>(s, NULL, Q_s, warp * 16, Kb, lane);
        tc_scores<HS>(dp, NULL, G_s, warp * 16, Vb, lane);
        tc_probs(s, dp, q0 + warp * 16, kt * TC_BC, T, 0, NULL, NULL, lse2, Dr, sl2, lane);
        // dQ += dS K (scale at the end): 16 keys a k-step
        #pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            uint32_t a[4];
            tc_acc_to_a(a, dp, kk);
            tc_mma_b<NT>(dq, a, Kb, LD, kk * 16, lane);
        }
        __syncthreads();
    }
    tc_add_rows<NT>(dqkv + (size_t)b * T * C3 + (size_t)h * HS, C3, q0 + warp * 16, T, dq, scale, lane);
}

// ----------------------------------------------------------------------------
// host side

// head sizes with instantiated tensor-core kernels (a new one: a multiple of 16 and a case below)
static inline int attention_tc_supports_hs(int hs) { return hs == 64 || hs == 80 || hs == 96 || hs == 128; }

// bytes of dynamic shared memory of each kernel at head size hs
static inline size_t attention_tc_smem_forward(int hs) { return sizeof(tc_bf16) * 5 * 64 * (size_t)(hs + 8); }
static inline size_t attention_tc_smem_backward(int hs) { return sizeof(tc_bf16) * 6 * 64 * (size_t)(hs + 8) + 4 * 64 * sizeof(float); }

template <int HS>
static inline void attention_tc_forward_hs(tc_bf16* out, float* lse, const tc_bf16* qkv, int B, int T, int NH, cudaStream_t s) {
    size_t smem = attention_tc_smem_forward(HS);
    cudaCheck(cudaFuncSetAttribute((const void*)attention_tc_forward_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((unsigned int)(B * NH), (unsigned int)CEIL_DIV(T, TC_BR));
    attention_tc_forward_kernel<HS><<<grid, TC_THREADS, smem, s>>>(out, lse, qkv, T, NH, 1.0f / sqrtf((float)HS));
    cudaCheck(cudaGetLastError());
}

template <int HS>
static inline void attention_tc_backward_hs(tc_bf16* dqkv, const float* Dvec, const tc_bf16* dout, const tc_bf16* qkv,
                                            const float* lse, int B, int T, int NH, cudaStream_t s) {
    size_t smem = attention_tc_smem_backward(HS);
    float scale = 1.0f / sqrtf((float)HS);
    dim3 grid((unsigned int)(B * NH), (unsigned int)CEIL_DIV(T, TC_BR));
    cudaCheck(cudaFuncSetAttribute((const void*)attention_tc_backward_dkdv_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    attention_tc_backward_dkdv_kernel<HS><<<grid, TC_THREADS, smem, s>>>(dqkv, qkv, dout, lse, Dvec, T, NH, scale);
    cudaCheck(cudaGetLastError());
    cudaCheck(cudaFuncSetAttribute((const void*)attention_tc_backward_dq_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    attention_tc_backward_dq_kernel<HS><<<grid, TC_THREADS, smem, s>>>(dqkv, qkv, dout, lse, Dvec, T, NH, scale);
    cudaCheck(cudaGetLastError());
}

#endif // LLMC_ATTENTION_TC_CUH
