// zero3/adamw.c: the implementation (the interface and its notes: zero3/adamw.h)
#include "zero3/adamw.h"  // this module's types and prototypes

void adamw_update(float* params, const float* grads, float* m, float* v, size_t n,
                                float lr, float beta1, float beta2, float eps,
                                float weight_decay, float grad_scale, int t) {
    // the bias corrections are the same for every parameter: once per call, in double
    // (beta2^t stays close to 1 for many steps, where float would lose digits)
    float bc1 = (float)(1.0 - pow((double)beta1, t));
    float bc2 = (float)(1.0 - pow((double)beta2, t));
    #pragma omp parallel for
    for (size_t i = 0; i < n; i++) {
        params[i] = adamw_param_step(params[i], grads[i] * grad_scale, &m[i], &v[i], lr, beta1, beta2, eps,
                                     weight_decay, bc1, bc2);
    }
}

double grad_norm_squared(const float* grads, size_t n) {
    double partial[GRAD_NORM_BLOCKS];
    size_t block = (n + GRAD_NORM_BLOCKS - 1) / GRAD_NORM_BLOCKS;
    #pragma omp parallel for schedule(static)
    for (int blk = 0; blk < GRAD_NORM_BLOCKS; blk++) {
        size_t i0 = (size_t)blk * block;
        size_t i1 = i0 + block < n ? i0 + block : n;
        // four interleaved accumulators: a fixed order (so still deterministic) that does
        // not wait on one add's latency per element
        double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;
        size_t i = i0;
        for (; i + 4 <= i1; i += 4) {
            a0 += (double)grads[i] * grads[i];
            a1 += (double)grads[i + 1] * grads[i + 1];
            a2 += (double)grads[i + 2] * grads[i + 2];
            a3 += (double)grads[i + 3] * grads[i + 3];
        }
        for (; i < i1; i++) { a0 += (double)grads[i] * grads[i]; }
        partial[blk] = (a0 + a1) + (a2 + a3);
    }
    double sum = 0.0;
    for (int blk = 0; blk < GRAD_NORM_BLOCKS; blk++) { sum += partial[blk]; }
    return sum;
}
