/*
 GELU, tanh approximation, on the GPU (CUDA twin of llmc/gelu.h, same formula):
   gelu(x) = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
 computed as x * sigmoid(2u) = x / (1 + exp(-2u)), the same identity as the CPU code (it
 keeps full relative precision for negative x, where 1 + tanh(u) cancels). expf is the
 accurate one (no --use_fast_math), so fp32 results match the CPU to a few ulp.
 Math in fp32; loads/stores in floatX.
*/
#ifndef LLMC_GELU_CUH
#define LLMC_GELU_CUH

#include <math.h>                  // expf
#include <stddef.h>                // size_t for element counts that may pass 2^31
#include "llmc/cuda_common.cuh"    // floatX, to_float/from_float, cudaCheck, CEIL_DIV

#ifndef GELU_SCALE
#define GELU_SCALE 0.7978845608028654f  // sqrt(2/pi), same as llmc/gelu.h
#endif
#ifndef GELU_CUBIC
#define GELU_CUBIC 0.044715f
#endif

// out (N,) = gelu(inp) (N,); one thread per element. out may alias inp (elementwise).
__global__ void gelu_forward_kernel(floatX* out, const floatX* inp, size_t N) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) { return; }
    float x = to_float(inp[i]);
    float u = GELU_SCALE * (x + GELU_CUBIC * x * x * x);
    float s = 1.0f / (1.0f + expf(-2.0f * u));  // = 0.5 (1 + tanh u)
    out[i] = from_float<floatX>(x * s);
}

// dinp (N,) += gelu'(inp) * dout; with s = sigmoid(2u):
//   gelu'(x) = s + 2 x s (1 - s) du/dx,   du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2)
__global__ void gelu_backward_kernel(floatX* dinp, const floatX* inp, const floatX* dout, size_t N) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) { return; }
    float x = to_float(inp[i]);
    float u = GELU_SCALE * (x + GELU_CUBIC * x * x * x);
    float s = 1.0f / (1.0f + expf(-2.0f * u));
    float du_dx = GELU_SCALE * (1.0f + 3.0f * GELU_CUBIC * x * x);
    float grad = s + 2.0f * x * s * (1.0f - s) * du_dx;
    dinp[i] = from_float<floatX>(to_float(dinp[i]) + grad * to_float(dout[i]));
}

// out (N,) = gelu(inp) (N,)
static inline void gelu_forward(floatX* out, const floatX* inp, size_t N, cudaStream_t s) {
    const int block = 256;
    gelu_forward_kernel<<<(unsigned int)CEIL_DIV(N, (size_t)block), block, 0, s>>>(out, inp, N);
    cudaCheck(cudaGetLastError());
}

// dinp (N,) += gelu'(inp) * dout (N,). ACCUMULATES (as the CPU). dinp must NOT alias dout:
// in place (llm.c style, dinp == dout) it would compute dout + gelu' * dout, not the gradient.
static inline void gelu_backward(floatX* dinp, const floatX* inp, const floatX* dout, size_t N, cudaStream_t s) {
    const int block = 256;
    gelu_backward_kernel<<<(unsigned int)CEIL_DIV(N, (size_t)block), block, 0, s>>>(dinp, inp, dout, N);
    cudaCheck(cudaGetLastError());
}

#endif // LLMC_GELU_CUH
