// zero3/quant.c: the implementation (the interface and its notes: zero3/quant.h)
#include "zero3/quant.h"  // this module's types and prototypes

void zero_quantize(const float* x, size_t n, unsigned char* out) {
    for (size_t b = 0; b < n; b += ZERO_QUANT_BLOCK) {
        size_t nb = n - b < ZERO_QUANT_BLOCK ? n - b : ZERO_QUANT_BLOCK;
        float amax = 0.0f;
        for (size_t i = 0; i < nb; i++) {
            float a = fabsf(x[b + i]);
            amax = (a > amax || a != a) ? a : amax;   // a NaN sticks
        }
        float scale = amax / 127.0f;
        memcpy(out, &scale, sizeof(float));
        int8_t* q = (int8_t*)(out + sizeof(float));
        if (scale == 0.0f || !isfinite(scale)) {
            memset(q, 0, nb);
        } else {
            float inv = 127.0f / amax;
            for (size_t i = 0; i < nb; i++) {
                float r = rintf(x[b + i] * inv);       // |r| <= 127 up to rounding of inv
                q[i] = (int8_t)(r > 127.0f ? 127.0f : (r < -127.0f ? -127.0f : r));
            }
        }
        out += sizeof(float) + nb;
    }
}

void zero_dequantize(const unsigned char* in, size_t n, float* out, int add) {
    for (size_t b = 0; b < n; b += ZERO_QUANT_BLOCK) {
        size_t nb = n - b < ZERO_QUANT_BLOCK ? n - b : ZERO_QUANT_BLOCK;
        float scale;
        memcpy(&scale, in, sizeof(float));
        const int8_t* q = (const int8_t*)(in + sizeof(float));
        if (add) {
            for (size_t i = 0; i < nb; i++) { out[b + i] += (float)q[i] * scale; }
        } else {
            for (size_t i = 0; i < nb; i++) { out[b + i] = (float)q[i] * scale; }
        }
        in += sizeof(float) + nb;
    }
}
