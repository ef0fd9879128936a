/*
 The optimizer: AdamW as torch.optim.AdamW, plus the global gradient norm for clipping.
 Per parameter, at 1-based step t, with g = grad * grad_scale:
   p -= lr * weight_decay * p                    (decoupled weight decay, on the old p)
   m  = beta1 m + (1 - beta1) g
   v  = beta2 v + (1 - beta2) g^2
   p -= lr * mhat / (sqrt(vhat) + eps),  mhat = m / (1 - beta1^t),  vhat = v / (1 - beta2^t)
 The caller picks which tensors get weight_decay (GPT-2 convention: matrices yes, biases
 and layernorm parameters no) by calling adamw_update per group.
 adamw_update is the plain scalar reference: the host engine runs the SIMD
 zero3/cpu_adam.h, which the tests hold to this within a few ulps, and the device engine
 zero3/adamw.cuh, which evaluates adamw_param_step itself. The optimizer lives in zero3/
 because the engines run it on the shards they own.
*/
#ifndef ZERO3_ADAMW_H
#define ZERO3_ADAMW_H

#include <math.h>    // sqrtf, sqrt, pow
#include <stddef.h>  // size_t

#ifdef __cplusplus
extern "C" {
#endif

// one parameter's step, shared with the GPU's kernel (zero3/adamw.cuh) so that both
// evaluate the same expressions in the same order: g is the scaled gradient, m and v
// are updated in place, the new parameter is returned. bc1 = 1 - beta1^t, bc2 = 1 - beta2^t.
#ifdef __CUDACC__
#define ADAMW_HOST_DEVICE __host__ __device__
#else
#define ADAMW_HOST_DEVICE
#endif
static inline ADAMW_HOST_DEVICE float adamw_param_step(float p, float g, float* m, float* v, float lr, float beta1,
                                                       float beta2, float eps, float weight_decay, float bc1, float bc2) {
    float mi = beta1 * *m + (1.0f - beta1) * g;
    float vi = beta2 * *v + (1.0f - beta2) * g * g;
    *m = mi;
    *v = vi;
    float mhat = mi / bc1;
    float vhat = vi / bc2;
    p -= lr * weight_decay * p;
    p -= lr * mhat / (sqrtf(vhat) + eps);
    return p;
}

// params, m, v (n,) updated in place from grads (n,); m and v start at zero at t = 1
void adamw_update(float* params, const float* grads, float* m, float* v, size_t n,
                                float lr, float beta1, float beta2, float eps,
                                float weight_decay, float grad_scale, int t);

// the sum is cut into this many fixed blocks whatever the thread count; each block is
// summed by one thread in a fixed order and the block sums are added in index order, so
// the result is bitwise the same for 1, 2 or 64 threads
#define GRAD_NORM_BLOCKS 256

// sum of grads[i]^2 over i < n, in double; deterministic regardless of thread count
double grad_norm_squared(const float* grads, size_t n);

// The step's gradient scale, from sumsq, the squared norm of the gradients summed over
// `world` ranks (the mean gradient is the sum / world): clipping to max_norm when the mean
// gradient's norm exceeds it (clipping on, max_norm > 0), with the 1/world of the mean
// folded in. *norm gets that norm, before clipping. One function for the host engine and
// the GPU's adamw_grad_scale_kernel, so both round alike (double sqrt and division are
// correctly rounded on both).
static inline ADAMW_HOST_DEVICE float adamw_grad_scale(double sumsq, int world, float max_norm, float* norm) {
    double n = sqrt(sumsq) / world;
    *norm = (float)n;
    double clip = (max_norm > 0.0f && n > (double)max_norm) ? (double)max_norm / n : 1.0;
    return (float)(clip / world);
}

#ifdef __cplusplus
}
#endif

#endif // ZERO3_ADAMW_H
