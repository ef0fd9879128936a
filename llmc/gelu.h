/*
 GELU activation, tanh approximation (as GPT-2 and torch's approximate="tanh"):
   gelu(x) = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
 Computed through the identity 0.5 (1 + tanh(u)) = sigmoid(2u) = 1 / (1 + exp(-2u)):
 - the same function, but expf is several times faster than tanhf in glibc, and
 - more accurate for negative x, where 1 + tanh(u) cancels to a few bits while
   1 / (1 + exp(-2u)) keeps full relative precision (exp(-2u) -> inf gives exactly 0).
*/
#ifndef LLMC_GELU_H
#define LLMC_GELU_H

#include <math.h>  // expf

#define GELU_SCALE 0.7978845608028654f  // sqrt(2/pi)
#define GELU_CUBIC 0.044715f

// out (N,) = gelu(inp) (N,)
static inline void gelu_forward(float* out, const float* inp, int N) {
    #pragma omp parallel for
    for (int i = 0; i < N; i++) {
        float x = inp[i];
        float u = GELU_SCALE * (x + GELU_CUBIC * x * x * x);
        float s = 1.0f / (1.0f + expf(-2.0f * u));  // = 0.5 (1 + tanh u)
        out[i] = x * s;
    }
}

// dinp (N,) += gelu'(inp) * dout. With s = sigmoid(2u) = 0.5 (1 + tanh u):
//   gelu'(x) = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) du/dx
//            = s + 2 x s (1 - s) du/dx,          du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2)
// (1 - tanh^2 u = (1 - tanh u)(1 + tanh u) = 2 (1 - s) * 2 s)
static inline void gelu_backward(float* dinp, const float* inp, const float* dout, int N) {
    #pragma omp parallel for
    for (int i = 0; i < N; i++) {
        float x = inp[i];
        float u = GELU_SCALE * (x + GELU_CUBIC * x * x * x);
        float s = 1.0f / (1.0f + expf(-2.0f * u));
        float du_dx = GELU_SCALE * (1.0f + 3.0f * GELU_CUBIC * x * x);
        float grad = s + 2.0f * x * s * (1.0f - s) * du_dx;
        dinp[i] += grad * dout[i];
    }
}

#endif // LLMC_GELU_H
