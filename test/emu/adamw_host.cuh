/*
 A stand-in for zero3/adamw.cuh, for the emulated device engine (test/emu/test_device_emu.cc
 includes it first, so that device.cuh's own include of zero3/adamw.cuh finds its guard
 already defined and adds nothing). The same launchers, queued on their stream as host work
 (test/emu/cuda_runtime.h's emu_stream_work: ordered and race-checked like a kernel) that
 computes with zero3/adamw.h's functions, because the real kernels' fixed 512 x 256-thread norm
 takes seconds per call as emulated fibers (they are tested, emulated, by
 build/test_kernels2_emu, and on a GPU by test/gpu/test_kernels2_gpu.cu). Sums of squares in
 double, kept in double like the GPU's.
*/
#ifndef ZERO3_ADAMW_CUH
#define ZERO3_ADAMW_CUH

#include <math.h>                // pow, isnan, isfinite, NAN
#include "zero3/cuda_util.cuh"   // floatX, to_float
#include "zero3/adamw.h"         // adamw_param_step, adamw_grad_scale

#define GLOBAL_NORM_SCRATCH_DOUBLES 512

template <typename Tg>
static inline int adamw_update_cuda(floatX* params, float* master, const Tg* grads, float* m, float* v,
                                    size_t n, float lr, float beta1, float beta2, float eps,
                                    float weight_decay, float grad_scale, int t, unsigned int,
                                    cudaStream_t s, size_t = 0, const float* scale_dev = NULL) {
    emu_stream_work(s, "adamw_update_cuda (host stand-in)", [=]() {
        float scale = scale_dev != NULL ? *scale_dev : grad_scale;
        if (isnan(scale)) { return; }  // a skipped step (adamw_skip_kernel)
        float bc1 = (float)(1.0 - pow((double)beta1, t));
        float bc2 = (float)(1.0 - pow((double)beta2, t));
        for (size_t i = 0; i < n; i++) {
            master[i] = adamw_param_step(master[i], to_float(grads[i]) * scale, &m[i], &v[i], lr, beta1, beta2, eps,
                                         weight_decay, bc1, bc2);
            if (params != NULL) { params[i] = master[i]; }
        }
    });
    return 0;
}

template <typename Tg>
static inline int global_norm_squared(double* out, double*, const Tg* grads, size_t n, cudaStream_t s) {
    emu_stream_work(s, "global_norm_squared (host stand-in)", [=]() {
        double acc = 0.0;
        for (size_t i = 0; i < n; i++) { acc += (double)to_float(grads[i]) * to_float(grads[i]); }
        out[0] = acc;
    });
    return 0;
}

__global__ void adamw_grad_scale_kernel(float* scale, float* norm, const double* sumsq, int world, float max_norm) {
    *scale = adamw_grad_scale(*sumsq, world, max_norm, norm);
}
__global__ void adamw_skip_kernel(float* scale, const float* norm, int skip, float skip_above) {
    if (skip || !isfinite(*norm) || (skip_above > 0.0f && *norm > skip_above)) { *scale = NAN; }
}

#endif // ZERO3_ADAMW_CUH
