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

// grid (BT,), block (CLASSIFIER_THREADS,): see the header comment
__global__ void __launch_bounds__(CLASSIFIER_THREADS)
fused_classifier_kernel(floatX* logits, float* losses, const int* targets, float dloss,
                        int V, int Vp, int write_dlogits) {
    __shared__ float warp_max[32];
    __shared__ float warp_sum[32];
    __shared__ float row_max;
    __shared__ float row_sum;
    size_t row = blockIdx.x;
    ClassifierPack* xp = reinterpret_cast<ClassifierPack*>(logits + row * (size_t)Vp);
    int lane = threadIdx.x % 32;
    int warp = threadIdx.x / 32;
    int nwarps = blockDim.x / 32;

    // pass 1: per-thread online softmax over the packs that hold real columns (< V)
    int npacks_real = CEIL_DIV(V, kClassifierPack);
    float m = -INFINITY;
    float s = 0.0f;
    for (int p = threadIdx.x; p < npacks_real; p += blockDim.x) {
        ClassifierPack pk = xp[p];
        float vals[kClassifierPack];
        float pmax = -INFINITY;
        #pragma unroll
        for (int k = 0; k < kClassifierPack; k++) {
            int col = p * kClassifierPack + k;
            vals[k] = col < V ? to_float(pk.v[k]) : -INFINITY;  // padding takes no part
            pmax = fmaxf(pmax, vals[k]);
        }
        // one rescale per pack rather than per element; pmax is finite (column p*pack < V)
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
        warp_max[warp] = m;
        warp_sum[warp] = s;
    }
    int target = targets[row];
    float x_target = 0.0f;
    if (threadIdx.x == 0) { x_target = to_float(logits[row * (size_t)Vp + target]); }  // before any write
    __syncthreads();
    if (warp == 0) {
        m = lane < nwarps ? warp_max[lane] : -INFINITY;
        s = lane < nwarps ? warp_sum[lane] : 0.0f;
        for (int offset = 16; offset > 0; offset >>= 1) {
            float m2 = __shfl_xor_sync(0xffffffffu, m, offset);
            float s2 = __shfl_xor_sync(0xffffffffu, s, offset);
            classifier_merge(m, s, m2, s2);
        }
        if (lane == 0) {
            row_max = m;
            row_sum = s;
        }
    }
    __syncthreads();
    float mx = row_max;
    float sum = row_sum;  // >= 1: the max term is exp(0)
    if (threadIdx.x == 0) { losses[row] = logf(sum) + mx - x_target; }
    if (!write_dlogits) { return; }

    // pass 2: dlogits in place, padding included (set to 0)
    float inv_sum = 1.0f / sum;
    int npacks = Vp / kClassifierPack;
    for (int p = threadIdx.x; p < npacks; p += blockDim.x) {
        ClassifierPack pk = xp[p];
        ClassifierPack out;
        #pragma unroll
        for (int k = 0; k < kClassifierPack; k++) {
            int col = p * kClassifierPack + k;
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

#endif // LLMC_FUSED_CLASSIFIER_CUH
