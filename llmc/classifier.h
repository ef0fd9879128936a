/*
 The classifier head: softmax over the vocabulary and the cross-entropy loss.
 logits and probs are (B,T,Vp): Vp >= V is the vocabulary padded (e.g. to a multiple of 64
 for faster matmuls). The padded columns V..Vp-1 come from padding rows of wte and are
 not tokens: they take no part in the softmax, their probability is 0 and they receive
 no gradient.
*/
#ifndef LLMC_CLASSIFIER_H
#define LLMC_CLASSIFIER_H

#include <math.h>    // expf, logf
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

#endif // LLMC_CLASSIFIER_H
