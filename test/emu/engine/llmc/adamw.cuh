/*
 llmc/adamw.cuh for the emulated device engine (test/test_device_emu.cc): the same
 launchers, computed directly on the host with llmc/adamw.h's functions, because the
 real kernels' fixed 512 x 256-thread norm takes seconds per call as emulated fibers
 (they are tested, emulated, by build/test_kernels2_emu, and on a GPU by
 test/test_kernels2_gpu.cu). Sums of squares in double, rounded to float like the GPU's.
*/
#ifndef LLMC_ADAMW_CUH
#define LLMC_ADAMW_CUH

#include <math.h>                // pow
#include "llmc/cuda_common.cuh"  // floatX, CEIL_DIV
#include "llmc/adamw.h"          // adamw_param_step, adamw_grad_scale

#define GLOBAL_NORM_SCRATCH_FLOATS 512

template <typename Tg>
static inline void adamw_update_cuda(floatX* params, float* master, const Tg* grads, float* m, float* v,
                                     size_t n, float lr, float beta1, float beta2, float eps,
                                     float weight_decay, float grad_scale, int t, unsigned int,
                                     cudaStream_t, size_t = 0, const float* scale_dev = NULL) {
    if (scale_dev != NULL) { grad_scale = *scale_dev; }
    float bc1 = (float)(1.0 - pow((double)beta1, t));
    float bc2 = (float)(1.0 - pow((double)beta2, t));
    for (size_t i = 0; i < n; i++) {
        master[i] = adamw_param_step(master[i], to_float(grads[i]) * grad_scale, &m[i], &v[i], lr, beta1, beta2, eps,
                                     weight_decay, bc1, bc2);
        if (params != NULL) { params[i] = master[i]; }
    }
}

template <typename Tg>
static inline void global_norm_squared(float* out, float*, const Tg* grads, size_t n, cudaStream_t) {
    double acc = 0.0;
    for (size_t i = 0; i < n; i++) { acc += (double)to_float(grads[i]) * to_float(grads[i]); }
    out[0] = (float)acc;
}

__global__ void adamw_norm_widen_kernel(double* sumsq, const float* local) { *sumsq = (double)*local; }
__global__ void adamw_grad_scale_kernel(float* scale, float* norm, const double* sumsq, int world, float max_norm) {
    *scale = adamw_grad_scale(*sumsq, world, max_norm, norm);
}

#endif // LLMC_ADAMW_CUH
