/*
 Token + position embedding: the first layer of GPT-2.
   out[b,t,:] = wte[inp[b,t], :] + wpe[t, :]
 wte (Vp, C) is the (padded) token table, shared with the classifier; wpe (maxT, C).
*/
#ifndef LLMC_ENCODER_H
#define LLMC_ENCODER_H

#include <stddef.h>  // size_t for offsets that may pass 2^31

// channels handled together by one thread in the backward pass: a run of 64 floats
// (256 bytes, four cache lines) keeps the inner loop contiguous and vectorizable
#define ENCODER_CBLOCK 64

// out (B,T,C) = wte[inp] (B,T,C) + wpe[t] (T,C), broadcast over B
static inline void encoder_forward(float* out, const int* inp, const float* wte, const float* wpe,
                                   int B, int T, int C) {
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            float* out_bt = out + ((size_t)b * T + t) * C;        // (C,)
            const float* wte_ix = wte + (size_t)inp[b * T + t] * C; // (C,) row of the token
            const float* wpe_t = wpe + (size_t)t * C;               // (C,) row of the position
            for (int c = 0; c < C; c++) {
                out_bt[c] = wte_ix[c] + wpe_t[c];
            }
        }
    }
}

// dwte (Vp,C) += scatter of dout rows onto their tokens; dwpe (T,C) += sum over b of dout.
// Several positions can hold the same token, so rows of dwte receive several adds. To stay
// race-free and deterministic without atomics, threads split the CHANNELS: every thread
// walks all (b,t) in the same order but only touches its own block of columns, so each
// dwte element is summed in the fixed order (b,t) = (0,0), (0,1), ... whatever the thread count.
static inline void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* inp,
                                    int B, int T, int C) {
    int nblocks = (C + ENCODER_CBLOCK - 1) / ENCODER_CBLOCK;
    #pragma omp parallel for
    for (int blk = 0; blk < nblocks; blk++) {
        int c0 = blk * ENCODER_CBLOCK;
        int c1 = c0 + ENCODER_CBLOCK < C ? c0 + ENCODER_CBLOCK : C;
        for (int b = 0; b < B; b++) {
            for (int t = 0; t < T; t++) {
                const float* dout_bt = dout + ((size_t)b * T + t) * C;
                float* dwte_ix = dwte + (size_t)inp[b * T + t] * C;
                for (int c = c0; c < c1; c++) {
                    dwte_ix[c] += dout_bt[c];
                }
            }
        }
    }
    // each position t owns its own row of dwpe: parallel over t, sum over b in order
    #pragma omp parallel for
    for (int t = 0; t < T; t++) {
        float* dwpe_t = dwpe + (size_t)t * C;
        for (int b = 0; b < B; b++) {
            const float* dout_bt = dout + ((size_t)b * T + t) * C;
            for (int c = 0; c < C; c++) {
                dwpe_t[c] += dout_bt[c];
            }
        }
    }
}

#endif // LLMC_ENCODER_H
