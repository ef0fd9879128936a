/*
 The classifier head: softmax over the vocabulary and the cross-entropy loss.
 logits and probs are (B,T,Vp): Vp >= V is the vocabulary padded (e.g. to a multiple of 64
 for faster matmuls). The padded columns V..Vp-1 come from padding rows of wte and are
 not tokens: they take no part in the softmax, their probability is 0 and they receive
 no gradient.

 Vocabulary tiling (--vocab-tile): the same loss and gradient without the (B,T,Vp) logits.
 The trainer computes the logits one tile of columns [v0, v0 + w) at a time, (B,T,w), and
 folds each tile into a running state per row (online softmax):
   max_new = max(max, max of the tile's real columns)
   sum_new = sum * exp(max - max_new) + sum over the tile of exp(x - max_new)
 and picks up the target's logit when it falls in the tile; after the last tile
   loss = max + log(sum) - x[target]        (= -log softmax(x)[target])
 The backward recomputes each tile's logits and turns them in place into
   dlogits = dloss * (exp(x - max) / sum - [v == target])   (0 on padding columns).
 The row statistics are fp32; each tile's own sum is accumulated in double (as
 softmax_forward's), so the tiled sum carries one fp32 rounding per tile.
*/
#ifndef LLMC_CLASSIFIER_H
#define LLMC_CLASSIFIER_H

#include <math.h>    // expf, logf, exp; INFINITY: a row's max before its first tile
#include <stddef.h>  // size_t for offsets that may pass 2^31

// probs (B,T,Vp) = softmax over the first V columns of logits (B,T,Vp); probs[V..Vp) = 0
static inline void softmax_forward(float* probs, const float* logits, int B, int T, int V, int Vp) {
    int N = B * T;
    #pragma omp parallel for
    for (int i = 0; i < N; i++) {
        const float* x = logits + (size_t)i * Vp;
        float* p = probs + (size_t)i * Vp;
        // subtract the max so every expf is <= 1: no overflow
        float maxval = x[0];
        for (int v = 1; v < V; v++) {
            if (x[v] > maxval) { maxval = x[v]; }
        }
        // the sum runs over ~50k terms: accumulate it in double so the normalization
        // does not drift (it costs nothing next to the expf calls)
        double sum = 0.0;
        for (int v = 0; v < V; v++) {
            float e = expf(x[v] - maxval);
            p[v] = e;
            sum += e;
        }
        float inv = (float)(1.0 / sum);  // sum >= 1 (the max term is exp(0))
        for (int v = 0; v < V; v++) { p[v] *= inv; }
        for (int v = V; v < Vp; v++) { p[v] = 0.0f; }
    }
}

// losses (B,T) = -log probs[b,t,targets[b,t]]; targets (B,T) must lie in [0, V)
static inline void crossentropy_forward(float* losses, const float* probs, const int* targets,
                                        int B, int T, int Vp) {
    int N = B * T;
    #pragma omp parallel for
    for (int i = 0; i < N; i++) {
        losses[i] = -logf(probs[(size_t)i * Vp + targets[i]]);
    }
}

// fused backward of softmax + cross-entropy, given dlosses (B,T):
//   dlogits[b,t,v] += (probs[b,t,v] - [v == target]) * dlosses[b,t]   for v < V
// (the softmax Jacobian and the -1/p of the log cancel to this simple form).
// Padded columns v >= V are left untouched: their gradient is 0.
static inline void crossentropy_softmax_backward(float* dlogits, const float* dlosses, const float* probs,
                                                 const int* targets, int B, int T, int V, int Vp) {
    int N = B * T;
    #pragma omp parallel for
    for (int i = 0; i < N; i++) {
        float* dx = dlogits + (size_t)i * Vp;
        const float* p = probs + (size_t)i * Vp;
        float dl = dlosses[i];
        int target = targets[i];
        for (int v = 0; v < V; v++) {
            float indicator = v == target ? 1.0f : 0.0f;
            dx[v] += (p[v] - indicator) * dl;
        }
    }
}

// ----------------------------------------------------------------------------
// vocabulary tiles

// Folds the tile logits (B,T,w), the columns [v0, v0 + w) of the vocabulary, into each
// row's online softmax state row_max, row_sum (B,T), which the first tile (v0 == 0)
// starts; target_logit (B,T) gets logits[target] from the tile that holds it. Columns
// >= V are padding and take no part. targets (B,T) in [0, V).
static inline void classifier_tile_stats(float* row_max, float* row_sum, float* target_logit, const float* logits,
                                         const int* targets, int B, int T, int v0, int w, int V) {
    int N = B * T;
    int nreal = V - v0 < w ? V - v0 : w;  // the tile's real columns; <= 0: all padding
    #pragma omp parallel for
    for (int i = 0; i < N; i++) {
        const float* x = logits + (size_t)i * w;
        if (v0 == 0) {
            row_max[i] = -INFINITY;
            row_sum[i] = 0.0f;
        }
        if (nreal <= 0) { continue; }
        float maxval = row_max[i];
        for (int v = 0; v < nreal; v++) {
            if (x[v] > maxval) { maxval = x[v]; }
        }
        // the sum so far was of exp(x - row_max): rescale it to the new max (0 before the first tile)
        double sum = row_max[i] == -INFINITY ? 0.0 : (double)row_sum[i] * exp((double)row_max[i] - maxval);
        for (int v = 0; v < nreal; v++) { sum += expf(x[v] - maxval); }
        row_max[i] = maxval;
        row_sum[i] = (float)sum;
        int t = targets[i] - v0;
        if (t >= 0 && t < nreal) { target_logit[i] = x[t]; }
    }
}

// losses (B,T) = max + log(sum) - logit[target], from the state after the last tile
static inline void classifier_tile_losses(float* losses, const float* row_max, const float* row_sum,
                                          const float* target_logit, int B, int T) {
    int N = B * T;
    for (int i = 0; i < N; i++) { losses[i] = row_max[i] + logf(row_sum[i]) - target_logit[i]; }
}

// The tile logits (B,T,w) of columns [v0, v0 + w), recomputed by the backward, become in
// place dlogits = dlosses * (softmax - [v == target]) from the final row_max, row_sum;
// padding columns (>= V) get 0.
static inline void classifier_tile_backward(float* logits, const float* dlosses, const float* row_max,
                                            const float* row_sum, const int* targets, int B, int T, int v0, int w, int V) {
    int N = B * T;
    #pragma omp parallel for
    for (int i = 0; i < N; i++) {
        float* x = logits + (size_t)i * w;
        float inv = 1.0f / row_sum[i];
        float dl = dlosses[i];
        int target = targets[i];
        for (int v = 0; v < w; v++) {
            int col = v0 + v;
            float indicator = col == target ? 1.0f : 0.0f;
            x[v] = col < V ? (expf(x[v] - row_max[i]) * inv - indicator) * dl : 0.0f;
        }
    }
}

#endif // LLMC_CLASSIFIER_H
