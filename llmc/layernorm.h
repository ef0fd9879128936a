/*
 LayerNorm over the last dimension, as torch.nn.LayerNorm(C, eps=1e-5):
   mean = sum_c x_c / C,  var = sum_c (x_c - mean)^2 / C  (biased),  rstd = 1/sqrt(var + eps)
   out_c = (x_c - mean) * rstd * weight_c + bias_c
 mean and rstd of each row are saved so the backward pass does not recompute them.
*/
#ifndef LLMC_LAYERNORM_H
#define LLMC_LAYERNORM_H

#include <math.h>    // sqrtf
#include <stddef.h>  // size_t for offsets that may pass 2^31

#define LAYERNORM_EPS 1e-5f
// columns of dweight/dbias owned by one thread in the backward pass (see below)
#define LAYERNORM_CBLOCK 64

// out (B,T,C), mean (B,T), rstd (B,T) <- inp (B,T,C), weight (C,), bias (C,)
static inline void layernorm_forward(float* out, float* mean, float* rstd,
                                     const float* inp, const float* weight, const float* bias,
                                     int B, int T, int C) {
    int N = B * T;
    #pragma omp parallel for
    for (int i = 0; i < N; i++) {
        const float* x = inp + (size_t)i * C;  // (C,) one row
        float* y = out + (size_t)i * C;
        // two passes (mean first, then squared deviations): numerically safer than
        // E[x^2] - E[x]^2, which cancels badly when |mean| >> std
        float m = 0.0f;
        for (int c = 0; c < C; c++) { m += x[c]; }
        m /= C;
        float v = 0.0f;
        for (int c = 0; c < C; c++) { float d = x[c] - m; v += d * d; }
        v /= C;
        float s = 1.0f / sqrtf(v + LAYERNORM_EPS);
        for (int c = 0; c < C; c++) {
            y[c] = (x[c] - m) * s * weight[c] + bias[c];
        }
        mean[i] = m;
        rstd[i] = s;
    }
}

// dinp (B,T,C) += , dweight (C,) += , dbias (C,) += ; from dout (B,T,C).
// With xhat = (x - mean) * rstd and g = weight * dout (gradient w.r.t. xhat):
//   dinp_c   = rstd * (g_c - mean_c'(g) - xhat_c * mean_c'(g * xhat))
//   dweight_c = sum over rows of dout_c * xhat_c,  dbias_c = sum over rows of dout_c
// dinp is per row (parallel over rows). dweight/dbias sum over all rows; to be
// deterministic without atomics, threads split the columns and every thread walks the
// rows in the same order, so the result does not depend on the thread count.
static inline void layernorm_backward(float* dinp, float* dweight, float* dbias,
                                      const float* dout, const float* inp, const float* weight,
                                      const float* mean, const float* rstd,
                                      int B, int T, int C) {
    int N = B * T;
    #pragma omp parallel for
    for (int i = 0; i < N; i++) {
        const float* x = inp + (size_t)i * C;
        const float* dy = dout + (size_t)i * C;
        float* dx = dinp + (size_t)i * C;
        float m = mean[i], s = rstd[i];
        // the two row means the formula needs
        float g_mean = 0.0f, gx_mean = 0.0f;
        for (int c = 0; c < C; c++) {
            float xhat = (x[c] - m) * s;
            float g = weight[c] * dy[c];
            g_mean += g;
            gx_mean += g * xhat;
        }
        g_mean /= C;
        gx_mean /= C;
        for (int c = 0; c < C; c++) {
            float xhat = (x[c] - m) * s;
            float g = weight[c] * dy[c];
            dx[c] += s * (g - g_mean - xhat * gx_mean);
        }
    }
    int nblocks = (C + LAYERNORM_CBLOCK - 1) / LAYERNORM_CBLOCK;
    #pragma omp parallel for
    for (int blk = 0; blk < nblocks; blk++) {
        int c0 = blk * LAYERNORM_CBLOCK;
        int c1 = c0 + LAYERNORM_CBLOCK < C ? c0 + LAYERNORM_CBLOCK : C;
        for (int i = 0; i < N; i++) {
            const float* x = inp + (size_t)i * C;
            const float* dy = dout + (size_t)i * C;
            float m = mean[i], s = rstd[i];
            for (int c = c0; c < c1; c++) {
                float xhat = (x[c] - m) * s;
                dweight[c] += dy[c] * xhat;
                dbias[c] += dy[c];
            }
        }
    }
}

#endif // LLMC_LAYERNORM_H
