/*
 The classifier head on the GPU, fused: softmax over the vocabulary, cross-entropy loss and
 its gradient in one kernel, the gradient written in place over the logits.
   logits (BT,Vp) in: logits; out (write_dlogits != 0): dlogits
   losses (BT,)   = -log softmax(logits[i, :V])[targets[i]]
   dlogits[i, v]  = (softmax[i, v] - [v == targets[i]]) * dloss    for v < V
                  = 0                                                for V <= v < Vp (padding)
 Same math as llmc/classifier.h (softmax_forward + crossentropy_forward +
 crossentropy_softmax_backward with dlosses[i] = dloss and dlogits starting at zero), but
 no (BT,Vp) probs buffer: at GPT-2 sizes that buffer would be B*T*50304 floats.

 One thread block per row:
   pass 1 reads the row once and keeps, per thread, a running max m and a sum s of
          exp(x - m) (online softmax: when m grows, s is rescaled by exp(m_old - m_new)),
          then merges the (m, s) pairs across the block;
   loss   = log(sum) + max - x[target]  (= -log p[target], without forming p, so a tiny
          p cannot underflow to log(0));
   pass 2 reads the row again (it is in L1/L2: 100 KB for a GPT-2 row in bf16) and
          overwrites it with the gradient.
 Every read of the row in pass 1 (and of x[target]) happens before the block barrier that
 precedes pass 2, and in pass 2 each thread reads and writes only its own elements, so
 the in-place write is safe.

 Vocabulary tiles (--vocab-tile, llmc/classifier.h has the math): the logits come one tile
 of columns [v0, v0 + w) at a time, (BT,w). classifier_tile_forward makes pass 1 over the
 tile and merges the block's (m, s) into the row's running state in global memory (fp32,
 three floats per row with the target's logit); the last tile also writes the loss and,
 in training, its own dlogits (pass 2), so that the backward starts from it.
 classifier_tile_backward is pass 2 alone, over a tile the backward recomputed, with the
 final state. w must be a multiple of 16 bytes of floatX, like Vp.
*/
#ifndef LLMC_FUSED_CLASSIFIER_CUH
#define LLMC_FUSED_CLASSIFIER_CUH

#include <stdint.h>         // uintptr_t for the alignment check
#include <stdio.h>          // fprintf for the error messages
#include <stdlib.h>         // exit
#include <math.h>           // INFINITY
#include "llmc/cuda_common.cuh"  // floatX, cudaCheck, to_float/from_float, CEIL_DIV

// threads per row: a GPT-2 row (50304 bf16 = 6288 packs of 8) gives each thread ~12 packs
#define CLASSIFIER_THREADS 512

// a 16-byte vector of floatX (8 bf16 or 4 fp32): rows are read and written in 16-byte
// accesses, coalesced across the warp
constexpr int kClassifierPack = 16 / (int)sizeof(floatX);
struct alignas(16) ClassifierPack { floatX v[kClassifierPack]; };

// merge the online-softmax state (m2, s2) into (m, s): both are "sum of exp(x - m)"
// over disjoint sets of columns; an empty set is (-inf, 0)
__device__ __forceinline__ void classifier_merge(float& m, float& s, float m2, float s2) {
    float mn = fmaxf(m, m2);
    if (mn == -INFINITY) { return; }  // both empty: exp(-inf - -inf) would be NaN
    s = s * expf(m - mn) + s2 * expf(m2 - mn);
    m = mn;
}

// the block's shared memory for merging the threads' online softmax states
struct ClassifierShared {
    float warp_max[32];
    float warp_sum[32];
    float row_max, row_sum;
};

// Pass 1 over one row of n packs whose first nreal columns are real (the rest padding):
// the block's online softmax state, max *mx and sum *sum of exp(x - max), handed to every
// thread; (-inf, 0) when nreal <= 0. sh is the calling kernel's shared memory. Every
// thread of the block must call it (barriers).
__device__ void classifier_row_stats(const ClassifierPack* xp, int n, int nreal, ClassifierShared* sh, float* mx, float* sum) {
    int lane = threadIdx.x % 32;
    int warp = threadIdx.x / 32;
    int nwarps = blockDim.x / 32;
    // per thread, over the packs that hold real columns
    int npacks_real = min(n, CEIL_DIV(max(nreal, 0), kClassifierPack));
    float m = -INFINITY;
    float s = 0.0f;
    for (int p = threadIdx.x; p < npacks_real; p += blockDim.x) {
        ClassifierPack pk = xp[p];
        float vals[kClassifierPack];
        float pmax = -INFINITY;
        #pragma unroll
        for (int k = 0; k < kClassifierPack; k++) {
            int col = p * kClassifierPack + k;
            vals[k] = col < nreal ? to_float(pk.v[k]) : -INFINITY;  // padding takes no part
            pmax = fmaxf(pmax, vals[k]);
        }
        // one rescale per pack rather than per element; pmax is finite (column p*pack < nreal)
        float mn = fmaxf(m, pmax);
        float acc = s * expf(m - mn);  // m = -inf on the first pack: 0
        #pragma unroll
        for (int k = 0; k < kClassifierPack; k++) { acc += expf(vals[k] - mn); }  // exp(-inf) = 0
        s = acc;
        m = mn;
    }
    // merge across the warp (butterfly: every lane ends with the warp's state)
    for (int offset = 16; offset > 0; offset >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, offset);
        float s2 = __shfl_xor_sync(0xffffffffu, s, offset);
        classifier_merge(m, s, m2, s2);
    }
    if (lane == 0) {
        sh->warp_max[warp] = m;
        sh->warp_sum[warp] = s;
    }
    __syncthreads();
    if (warp == 0) {
        m = lane < nwarps ? sh->warp_max[lane] : -INFINITY;
        s = lane < nwarps ? sh->warp_sum[lane] : 0.0f;
        for (int offset = 16; offset > 0; offset >>= 1) {
            float m2 = __shfl_xor_sync(0xffffffffu, m, offset);
            float s2 = __shfl_xor_sync(0xffffffffu, s, offset);
            classifier_merge(m, s, m2, s2);
        }
        if (lane == 0) {
            sh->row_max = m;
            sh->row_sum = s;
        }
    }
    __syncthreads();
    *mx = sh->row_max;
    *sum = sh->row_sum;
}

// Pass 2: n packs of one row, whose first column is column col0 of the vocabulary, turned
// in place into dloss * (exp(x - mx) * inv_sum - [col == target]); 0 on padding (col >= V).
// Each thread reads and writes only its own packs.
__device__ void classifier_row_grad(ClassifierPack* xp, int n, int col0, int V, int target, float mx, float inv_sum,
                                    float dloss) {
    for (int p = threadIdx.x; p < n; p += blockDim.x) {
        ClassifierPack pk = xp[p];
        ClassifierPack out;
        #pragma unroll
        for (int k = 0; k < kClassifierPack; k++) {
            int col = col0 + p * kClassifierPack + k;
            float g = 0.0f;
            if (col < V) {
                float prob = expf(to_float(pk.v[k]) - mx) * inv_sum;
                g = (prob - (col == target ? 1.0f : 0.0f)) * dloss;
            }
            out.v[k] = from_float<floatX>(g);
        }
        xp[p] = out;
    }
}

// grid (BT,), block (CLASSIFIER_THREADS,): see the header comment
__global__ void __launch_bounds__(CLASSIFIER_THREADS)
fused_classifier_kernel(floatX* logits, float* losses, const int* targets, float dloss,
                        int V, int Vp, int write_dlogits) {
    __shared__ ClassifierShared sh;
    size_t row = blockIdx.x;
    ClassifierPack* xp = reinterpret_cast<ClassifierPack*>(logits + row * (size_t)Vp);
    int target = targets[row];
    float x_target = 0.0f;
    if (threadIdx.x == 0) { x_target = to_float(logits[row * (size_t)Vp + target]); }  // before any write
    float mx, sum;  // sum >= 1: the max term is exp(0)
    classifier_row_stats(xp, Vp / kClassifierPack, V, &sh, &mx, &sum);
    if (threadIdx.x == 0) { losses[row] = logf(sum) + mx - x_target; }
    if (!write_dlogits) { return; }
    // pass 2: dlogits in place, padding included (set to 0)
    classifier_row_grad(xp, Vp / kClassifierPack, 0, V, target, mx, 1.0f / sum, dloss);
}

// One tile of the vocabulary, columns [v0, v0 + w): grid (BT,), block (CLASSIFIER_THREADS,).
// Folds the tile's logits (BT,w) into each row's running state row_max, row_sum (BT,),
// which the first tile (v0 == 0) starts, and keeps the target's logit in target_logit
// (BT,) when the tile holds it. The last tile (v0 + w == Vp) writes the losses and, with
// write_dlogits, its own dlogits in place: the backward starts from it.
__global__ void __launch_bounds__(CLASSIFIER_THREADS)
classifier_tile_forward_kernel(floatX* logits, float* row_max, float* row_sum, float* target_logit, float* losses,
                               const int* targets, float dloss, int v0, int w, int V, int Vp, int write_dlogits) {
    __shared__ ClassifierShared sh;
    size_t row = blockIdx.x;
    ClassifierPack* xp = reinterpret_cast<ClassifierPack*>(logits + row * (size_t)w);
    int target = targets[row];
    int t = target - v0;
    if (threadIdx.x == 0 && t >= 0 && t < w) { target_logit[row] = to_float(logits[row * (size_t)w + t]); }  // before any write
    float mx, sum;
    classifier_row_stats(xp, w / kClassifierPack, V - v0, &sh, &mx, &sum);
    if (v0 > 0) { classifier_merge(mx, sum, row_max[row], row_sum[row]); }  // every thread: the same state
    __syncthreads();  // every thread has read the old state before thread 0 replaces it
    if (threadIdx.x == 0) {
        row_max[row] = mx;
        row_sum[row] = sum;
    }
    if (v0 + w < Vp) { return; }
    if (threadIdx.x == 0) { losses[row] = logf(sum) + mx - target_logit[row]; }
    if (write_dlogits) { classifier_row_grad(xp, w / kClassifierPack, v0, V, target, mx, 1.0f / sum, dloss); }
}

// The tile's logits (BT,w), columns [v0, v0 + w), recomputed by the backward, turned in
// place into its dlogits from the final row_max, row_sum. grid (BT,), block (CLASSIFIER_THREADS,).
__global__ void __launch_bounds__(CLASSIFIER_THREADS)
classifier_tile_backward_kernel(floatX* logits, const float* row_max, const float* row_sum, const int* targets,
                                float dloss, int v0, int w, int V) {
    size_t row = blockIdx.x;
    ClassifierPack* xp = reinterpret_cast<ClassifierPack*>(logits + row * (size_t)w);
    classifier_row_grad(xp, w / kClassifierPack, v0, V, targets[row], row_max[row], 1.0f / row_sum[row], dloss);
}

// host launcher. logits (BT,Vp) must be 16-byte aligned and Vp a multiple of 16 bytes of
// floatX (8 in bf16, 4 in fp32); targets (BT,) in [0, V) (not checked on the device).
// losses (BT,) are overwritten; with write_dlogits == 0 the logits are left untouched.
static inline void fused_classifier(floatX* logits, float* losses, const int* targets, float dloss,
                                    int BT, int V, int Vp, int write_dlogits, cudaStream_t s) {
    if (((uintptr_t)logits & 15u) != 0 || Vp % kClassifierPack != 0 || V < 1 || V > Vp) {
        fprintf(stderr, "error: fused_classifier: need 16-byte aligned logits, 1 <= V <= Vp and Vp a "
                        "multiple of %d (got logits=%p V=%d Vp=%d)\n", kClassifierPack, (void*)logits, V, Vp);
        exit(EXIT_FAILURE);
    }
    if (BT <= 0) { return; }
    fused_classifier_kernel<<<BT, CLASSIFIER_THREADS, 0, s>>>(logits, losses, targets, dloss, V, Vp, write_dlogits);
    cudaCheck(cudaGetLastError());
}

// the tile kernels' shared requirements: 16-byte aligned logits, w a multiple of 16 bytes
// of floatX, the tile inside [0, Vp)
static inline void classifier_tile_check(const floatX* logits, int v0, int w, int V, int Vp, const char* fn) {
    if (((uintptr_t)logits & 15u) != 0 || w <= 0 || w % kClassifierPack != 0 || v0 < 0 || v0 + w > Vp || V < 1 || V > Vp) {
        fprintf(stderr, "error: %s: need 16-byte aligned logits, a tile width that is a multiple of %d and "
                        "0 <= v0 < v0 + w <= Vp, 1 <= V <= Vp (got logits=%p v0=%d w=%d V=%d Vp=%d)\n",
                fn, kClassifierPack, (void*)logits, v0, w, V, Vp);
        exit(EXIT_FAILURE);
    }
}

// host launcher of the forward over one tile (classifier_tile_forward_kernel): logits (BT,w)
// of columns [v0, v0 + w); row_max, row_sum, target_logit (BT,) fp32, started by v0 == 0;
// the last tile (v0 + w == Vp) writes losses (BT,) and, with write_dlogits, its dlogits.
static inline void classifier_tile_forward(floatX* logits, float* row_max, float* row_sum, float* target_logit,
                                           float* losses, const int* targets, float dloss, int BT, int v0, int w,
                                           int V, int Vp, int write_dlogits, cudaStream_t s) {
    classifier_tile_check(logits, v0, w, V, Vp, "classifier_tile_forward");
    if (BT <= 0) { return; }
    classifier_tile_forward_kernel<<<BT, CLASSIFIER_THREADS, 0, s>>>(logits, row_max, row_sum, target_logit, losses,
                                                                    targets, dloss, v0, w, V, Vp, write_dlogits);
    cudaCheck(cudaGetLastError());
}

// host launcher of the backward over one tile (classifier_tile_backward_kernel): logits
// (BT,w) of columns [v0, v0 + w) become dlogits, from the final row_max, row_sum (BT,)
static inline void classifier_tile_backward(floatX* logits, const float* row_max, const float* row_sum, const int* targets,
                                            float dloss, int BT, int v0, int w, int V, int Vp, cudaStream_t s) {
    classifier_tile_check(logits, v0, w, V, Vp, "classifier_tile_backward");
    if (BT <= 0) { return; }
    classifier_tile_backward_kernel<<<BT, CLASSIFIER_THREADS, 0, s>>>(logits, row_max, row_sum, targets, dloss, v0, w, V);
    cudaCheck(cudaGetLastError());
}

#endif // LLMC_FUSED_CLASSIFIER_CUH
