/*
 Residual connection: out = inp1 + inp2, elementwise over N floats.
 The gradient flows unchanged into both branches.
*/
#ifndef LLMC_RESIDUAL_H
#define LLMC_RESIDUAL_H

// out (N,) = inp1 (N,) + inp2 (N,)
static inline void residual_forward(float* out, const float* inp1, const float* inp2, int N) {
    #pragma omp parallel for simd
    for (int i = 0; i < N; i++) {
        out[i] = inp1[i] + inp2[i];
    }
}

// dinp1 (N,) += dout, dinp2 (N,) += dout
static inline void residual_backward(float* dinp1, float* dinp2, const float* dout, int N) {
    #pragma omp parallel for simd
    for (int i = 0; i < N; i++) {
        dinp1[i] += dout[i];
        dinp2[i] += dout[i];
    }
}

#endif // LLMC_RESIDUAL_H
