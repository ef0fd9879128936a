/*
 The optimizer on the GPU: AdamW on fp32 master weights, the squared global gradient
 norm, and the clipping factor computed on the GPU (so the step needs no host round
 trip). Same math as zero3/adamw.h (its adamw_param_step, per parameter), with
 g = grad * grad_scale:
   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
   p -= lr * weight_decay * p;   p -= lr * mhat / (sqrt(vhat) + eps)
 on the fp32 master copy; the compute copy (floatX) is then refreshed from the master:
 - fp32 build: a plain copy;
 - bf16 build: STOCHASTIC ROUNDING to one of the two bf16 neighbours of the master value,
   rounding up with probability (distance to the lower neighbour) / (gap): unbiased on
   average, so small updates that round-to-nearest would always drop still move the
   compute weights in expectation. The random bits come from a counter-based hash of
   (seed, t, index): no RNG state, a rerun with the same seed gives the same bits, and the
   result does not depend on the launch configuration.
*/
#ifndef ZERO3_ADAMW_CUH
#define ZERO3_ADAMW_CUH

#include <stddef.h>         // size_t
#include <math.h>           // pow for the bias corrections (host); isnan, isfinite, NAN: a skipped step
#include "zero3/cuda_util.cuh"  // floatX, zero_cuda, to_float, CEIL_DIV
#include "zero3/adamw.h"      // adamw_param_step, adamw_grad_scale: the CPU reference's own

#define ADAMW_THREADS 256
// grid-stride kernels: enough blocks to fill any current GPU, capped so huge n loops
#define ADAMW_MAX_BLOCKS 8192

// global_norm_squared: a FIXED grid (independent of the GPU) so the summation order, hence
// the bits of the result, depend only on n. scratch must hold GLOBAL_NORM_BLOCKS doubles.
#define GLOBAL_NORM_BLOCKS 512
#define GLOBAL_NORM_THREADS 256
#define GLOBAL_NORM_SCRATCH_DOUBLES GLOBAL_NORM_BLOCKS

// ----------------------------------------------------------------------------
// stochastic rounding

// 32-bit integer mixer (xorshift-multiply rounds; every input bit affects every output bit)
__device__ __forceinline__ unsigned int adamw_mix32(unsigned int x) {
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

// random 32 bits for element i of a call with (seed, t): counter-based, stateless
__device__ __forceinline__ unsigned int adamw_random_bits(unsigned int seed, unsigned int t, size_t i) {
    unsigned int h = adamw_mix32(seed ^ adamw_mix32(t + 0x9e3779b9u));
    h = adamw_mix32(h ^ (unsigned int)i);
    h = adamw_mix32(h ^ (unsigned int)(i >> 32) ^ 0x85ebca6bu);
    return h;
}

// bf16 is the upper 16 bits of an fp32. Adding a uniform 16-bit random number to the lower
// 16 bits and truncating rounds the magnitude up with probability low16 / 65536, i.e.
// exactly the distance to the lower neighbour over the gap: unbiased. It works on the
// magnitude (sign-magnitude format), so it is unbiased for negative values too; a carry
// into the exponent is the correct next value. Inf and NaN are left to the normal rounding
// (adding to a NaN's mantissa could carry into the sign bit).
__device__ __forceinline__ __nv_bfloat16 bf16_stochastic_round(float x, unsigned int random) {
    unsigned int bits = __float_as_uint(x);
    if ((bits & 0x7f800000u) == 0x7f800000u) { return __float2bfloat16_rn(x); }
    bits = (bits + (random & 0xffffu)) & 0xffff0000u;
    __nv_bfloat16_raw raw;
    raw.x = (unsigned short)(bits >> 16);
    return __nv_bfloat16(raw);
}

// the compute copy: plain in fp32, stochastically rounded in bf16
__device__ __forceinline__ void adamw_store_param(float* p, float x, unsigned int) { *p = x; }
__device__ __forceinline__ void adamw_store_param(__nv_bfloat16* p, float x, unsigned int random) {
    *p = bf16_stochastic_round(x, random);
}

// ----------------------------------------------------------------------------
// kernels

// params (n,) floatX may be NULL; master, m, v (n,) fp32 in place; grads (n,) floatX, or
// fp32 (the ZeRO stage 2-3 accumulators). bc1 = 1 - beta1^t, bc2 = 1 - beta2^t, computed
// once on the host in double as in adamw.h. The gradient scale is grad_scale, or, when
// scale_dev is not NULL, scale_dev[0] (computed on the GPU: adamw_grad_scale_kernel).
template <typename Tg>
__global__ void adamw_kernel(floatX* params, float* master, const Tg* grads, float* m, float* v,
                             size_t n, float lr, float beta1, float beta2, float eps,
                             float weight_decay, float grad_scale, const float* scale_dev, float bc1, float bc2,
                             unsigned int seed, unsigned int t, size_t index_base) {
    if (scale_dev != NULL) { grad_scale = *scale_dev; }
    if (isnan(grad_scale)) { return; }  // a skipped step (adamw_skip_kernel): nothing changes
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float p = adamw_param_step(master[i], to_float(grads[i]) * grad_scale, &m[i], &v[i], lr, beta1, beta2, eps,
                                   weight_decay, bc1, bc2);
        master[i] = p;
        if (params != NULL) { adamw_store_param(&params[i], p, adamw_random_bits(seed, t, index_base + i)); }
    }
}

// sum over the 32 lanes in double (fixed butterfly order: deterministic)
__device__ __forceinline__ double adamw_warp_sum_double(double x) {
    for (int offset = 16; offset > 0; offset >>= 1) { x += __shfl_xor_sync(0xffffffffu, x, offset); }
    return x;
}

// sum of the 32 warps' values of a block of up to 1024 threads; the result in thread 0
__device__ __forceinline__ double adamw_block_sum_double(double x) {
    __shared__ double warp_sums[32];
    int lane = threadIdx.x % 32;
    int warp = threadIdx.x / 32;
    x = adamw_warp_sum_double(x);
    if (lane == 0) { warp_sums[warp] = x; }
    __syncthreads();
    if (warp == 0) {
        x = lane < (int)(blockDim.x / 32) ? warp_sums[lane] : 0.0;
        x = adamw_warp_sum_double(x);
    }
    return x;
}

// pass 1: grid (GLOBAL_NORM_BLOCKS,), block (GLOBAL_NORM_THREADS,).
// partial[b] = sum of grads[i]^2 over the elements i of block b's grid-stride loop. Squares
// and sums in double, like grad_norm_squared in adamw.h (each square is then exact), and
// nothing rounded to float on the way.
// [Note: the GPU's norm and the host's agree] With the optimizer offloaded, the norm is the
// GPU's (this sum) or, with the gradients summed on the host (parameter offload, NVMe), the
// host's (grad_norm_squared, unit by unit): two orders of one double sum, a few double ulps
// apart. The scale and the norm are rounded to float from them (adamw_grad_scale), so the
// two tiers take the same step unless a float rounding boundary falls within those ulps
// (about 1e-9 of steps). Float partials (as before 2026-11-27) moved the sum by 1e-7 and
// changed the clipped scale's last bit in one step of four on an H100.
template <typename Tg>
__global__ void global_norm_partial_kernel(double* partial, const Tg* grads, size_t n) {
    double acc = 0.0;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        double g = (double)to_float(grads[i]);
        acc += g * g;
    }
    acc = adamw_block_sum_double(acc);
    if (threadIdx.x == 0) { partial[blockIdx.x] = acc; }
}

// pass 2: one block of GLOBAL_NORM_THREADS threads; out[0] = sum of the partials (nblocks,)
__global__ void global_norm_final_kernel(double* out, const double* partial, int nblocks) {
    double acc = 0.0;
    for (int b = threadIdx.x; b < nblocks; b += blockDim.x) { acc += partial[b]; }
    acc = adamw_block_sum_double(acc);
    if (threadIdx.x == 0) { out[0] = acc; }
}

// one thread: AdamW's gradient scale and the norm of the mean gradient from the squared
// norm summed over `world` ranks, with adamw.h's adamw_grad_scale (the host engine's)
__global__ void adamw_grad_scale_kernel(float* scale, float* norm, const double* sumsq, int world, float max_norm) {
    *scale = adamw_grad_scale(*sumsq, world, max_norm, norm);
}

// one thread, after adamw_grad_scale_kernel: a step to skip (zero3/zero.h's ZeroStep: the
// caller's skip, a norm that is not finite, or one above skip_above > 0) gets a NaN scale, on which adamw_kernel
// returns at once, so the decision stays on the GPU and the host does not wait for it
__global__ void adamw_skip_kernel(float* scale, const float* norm, int skip, float skip_above) {
    if (skip || !isfinite(*norm) || (skip_above > 0.0f && *norm > skip_above)) { *scale = NAN; }
}

// ----------------------------------------------------------------------------
// host launchers

// one AdamW step t (1-based) on n parameters; see the header comment. The rounding bits of
// element i come from (seed, t, index_base + i): calls over different parts of one model
// pass the parts' offsets in the model as index_base (and one seed), so that an element
// draws the same bits however the model is split into calls (tensors, ZeRO shards).
// scale_dev: the gradient scale on the GPU, read instead of grad_scale (see adamw_kernel).
// Returns 0, or -1 with zero_errmsg() when the launch failed.
template <typename Tg>
static inline int adamw_update_cuda(floatX* params, float* master, const Tg* grads, float* m, float* v,
                                     size_t n, float lr, float beta1, float beta2, float eps,
                                     float weight_decay, float grad_scale, int t, unsigned int seed,
                                     cudaStream_t s, size_t index_base = 0, const float* scale_dev = NULL) {
    if (n == 0) { return 0; }
    // as in adamw.h: in double, beta2^t stays close to 1 for many steps
    float bc1 = (float)(1.0 - pow((double)beta1, t));
    float bc2 = (float)(1.0 - pow((double)beta2, t));
    size_t blocks = CEIL_DIV(n, (size_t)ADAMW_THREADS);
    if (blocks > ADAMW_MAX_BLOCKS) { blocks = ADAMW_MAX_BLOCKS; }
    adamw_kernel<Tg><<<(unsigned)blocks, ADAMW_THREADS, 0, s>>>(params, master, grads, m, v, n, lr, beta1, beta2, eps,
                                                            weight_decay, grad_scale, scale_dev, bc1, bc2, seed, (unsigned int)t, index_base);
    return zero_cuda(cudaGetLastError(), "the AdamW kernel");
}

// out[0] (device) = sum of grads[i]^2 over i < n; deterministic (bitwise, for a given n).
// scratch (device) must hold GLOBAL_NORM_SCRATCH_DOUBLES doubles and is in use until the
// kernels on stream s finish. The norm of several tensors needs them in one buffer (or
// the caller adds the squares of separate calls). Returns 0, or -1 as adamw_update_cuda.
template <typename Tg>
static inline int global_norm_squared(double* out, double* scratch, const Tg* grads, size_t n, cudaStream_t s) {
    global_norm_partial_kernel<Tg><<<GLOBAL_NORM_BLOCKS, GLOBAL_NORM_THREADS, 0, s>>>(scratch, grads, n);
    if (zero_cuda(cudaGetLastError(), "the norm's first kernel") != 0) { return -1; }
    global_norm_final_kernel<<<1, GLOBAL_NORM_THREADS, 0, s>>>(out, scratch, GLOBAL_NORM_BLOCKS);
    return zero_cuda(cudaGetLastError(), "the norm's second kernel");
}

#endif // ZERO3_ADAMW_CUH
