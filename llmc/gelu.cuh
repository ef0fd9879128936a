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

// gelu(x), and its derivative: with s = sigmoid(2u),
//   gelu'(x) = s + 2 x s (1 - s) du/dx,   du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2)
__device__ __forceinline__ float gelu_value(float x) {
    float u = GELU_SCALE * (x + GELU_CUBIC * x * x * x);
    float s = 1.0f / (1.0f + expf(-2.0f * u));  // sigmoid(2u) = 0.5 (1 + tanh u)
    return x * s;
}

__device__ __forceinline__ float gelu_grad(float x) {
    float u = GELU_SCALE * (x + GELU_CUBIC * x * x * x);
    float s = 1.0f / (1.0f + expf(-2.0f * u));
    float du_dx = GELU_SCALE * (1.0f + 3.0f * GELU_CUBIC * x * x);
    return s + 2.0f * x * s * (1.0f - s) * du_dx;
}

// The elementwise kernels: thread i takes elements [i*N, i*N + N), N = X128 (16 bytes) when
// the count is a multiple of X128 and every pointer 16-byte aligned (xpack_width), else 1.

// out (n,) = gelu(inp) (n,). out may alias inp (elementwise).
template <int N>
__global__ void gelu_forward_kernel(floatX* out, const floatX* inp, size_t n) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * N;
    if (i >= n) { return; }
    xpack<N> x = load_pack<N>(inp + i);
#pragma unroll
    for (int j = 0; j < N; j++) { x.v[j] = from_float<floatX>(gelu_value(to_float(x.v[j]))); }
    store_pack<N>(out + i, x);
}

// dinp (n,) += gelu'(inp) * dout (n,)
template <int N>
__global__ void gelu_backward_kernel(floatX* dinp, const floatX* inp, const floatX* dout, size_t n) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * N;
    if (i >= n) { return; }
    xpack<N> x = load_pack<N>(inp + i), dy = load_pack<N>(dout + i), dx = load_pack<N>(dinp + i);
#pragma unroll
    for (int j = 0; j < N; j++) {
        dx.v[j] = from_float<floatX>(to_float(dx.v[j]) + gelu_grad(to_float(x.v[j])) * to_float(dy.v[j]));
    }
    store_pack<N>(dinp + i, dx);
}

// d (n,) = gelu'(pre) * d (n,), in place: the backward of a matmul whose input was gelu(pre)
template <int N>
__global__ void gelu_backward_inplace_kernel(floatX* d, const floatX* pre, size_t n) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * N;
    if (i >= n) { return; }
    xpack<N> x = load_pack<N>(pre + i), g = load_pack<N>(d + i);
#pragma unroll
    for (int j = 0; j < N; j++) { g.v[j] = from_float<floatX>(gelu_grad(to_float(x.v[j])) * to_float(g.v[j])); }
    store_pack<N>(d + i, g);
}

// out (n,) = gelu(inp) (n,)
static inline void gelu_forward(floatX* out, const floatX* inp, size_t n, cudaStream_t s) {
    const int block = 256;
    if (xpack_width(n, {out, inp}) == X128) {
        gelu_forward_kernel<X128><<<xpack_blocks(n, X128, block), block, 0, s>>>(out, inp, n);
    } else {
        gelu_forward_kernel<1><<<xpack_blocks(n, 1, block), block, 0, s>>>(out, inp, n);
    }
    cudaCheck(cudaGetLastError());
}

// dinp (n,) += gelu'(inp) * dout (n,). ACCUMULATES (as the CPU). dinp must NOT alias dout:
// in place (llm.c style, dinp == dout) it would compute dout + gelu' * dout, not the gradient.
static inline void gelu_backward(floatX* dinp, const floatX* inp, const floatX* dout, size_t n, cudaStream_t s) {
    const int block = 256;
    if (xpack_width(n, {dinp, inp, dout}) == X128) {
        gelu_backward_kernel<X128><<<xpack_blocks(n, X128, block), block, 0, s>>>(dinp, inp, dout, n);
    } else {
        gelu_backward_kernel<1><<<xpack_blocks(n, 1, block), block, 0, s>>>(dinp, inp, dout, n);
    }
    cudaCheck(cudaGetLastError());
}

// d (n,) = gelu'(pre) * d (n,), in place (not accumulating: d holds dout @ weight on entry)
static inline void gelu_backward_inplace(floatX* d, const floatX* pre, size_t n, cudaStream_t s) {
    const int block = 256;
    if (xpack_width(n, {d, pre}) == X128) {
        gelu_backward_inplace_kernel<X128><<<xpack_blocks(n, X128, block), block, 0, s>>>(d, pre, n);
    } else {
        gelu_backward_inplace_kernel<1><<<xpack_blocks(n, 1, block), block, 0, s>>>(d, pre, n);
    }
    cudaCheck(cudaGetLastError());
}

#endif // LLMC_GELU_CUH
