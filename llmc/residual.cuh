/*
 Residual connection on the GPU (CUDA twin of llmc/residual.h): out = inp1 + inp2,
 elementwise over N values, fp32 add, one rounding to floatX.
 The gradient flows unchanged into both branches (residual_backward, accumulating).
*/
#ifndef LLMC_RESIDUAL_CUH
#define LLMC_RESIDUAL_CUH

#include <stddef.h>                // size_t for element counts that may pass 2^31
#include "llmc/cuda_common.cuh"    // floatX, to_float/from_float, cudaCheck, CEIL_DIV

// out (N,) = inp1 (N,) + inp2 (N,); out may alias either input (elementwise)
__global__ void residual_forward_kernel(floatX* out, const floatX* inp1, const floatX* inp2, size_t N) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) { return; }
    out[i] = from_float<floatX>(to_float(inp1[i]) + to_float(inp2[i]));
}

// dinp1 (N,) += dout, dinp2 (N,) += dout
__global__ void residual_backward_kernel(floatX* dinp1, floatX* dinp2, const floatX* dout, size_t N) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) { return; }
    float d = to_float(dout[i]);
    dinp1[i] = from_float<floatX>(to_float(dinp1[i]) + d);
    dinp2[i] = from_float<floatX>(to_float(dinp2[i]) + d);
}

// out (N,) = inp1 + inp2
static inline void residual_forward(floatX* out, const floatX* inp1, const floatX* inp2, size_t N, cudaStream_t s) {
    const int block = 256;
    residual_forward_kernel<<<(unsigned int)CEIL_DIV(N, (size_t)block), block, 0, s>>>(out, inp1, inp2, N);
    cudaCheck(cudaGetLastError());
}

// dinp1 (N,) += dout, dinp2 (N,) += dout. ACCUMULATES (as the CPU); dinp1 != dinp2.
static inline void residual_backward(floatX* dinp1, floatX* dinp2, const floatX* dout, size_t N, cudaStream_t s) {
    const int block = 256;
    residual_backward_kernel<<<(unsigned int)CEIL_DIV(N, (size_t)block), block, 0, s>>>(dinp1, dinp2, dout, N);
    cudaCheck(cudaGetLastError());
}

#endif // LLMC_RESIDUAL_CUH
