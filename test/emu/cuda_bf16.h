/*
 cuda_bf16.h on the CPU (see cuda_runtime.h here): __nv_bfloat16 as its 16 bits, with the
 conversions the kernels use. Rounding from float is to nearest, ties to even, NaN kept
 a NaN: what __float2bfloat16_rn does.
*/
#ifndef EMU_CUDA_BF16_H
#define EMU_CUDA_BF16_H

#include <string.h>   // memcpy

struct __nv_bfloat16_raw { unsigned short x; };

static inline unsigned short emu_bf16_round(float f) {
    unsigned int u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) { return (unsigned short)((u >> 16) | 0x0040u); }  // NaN stays NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}

struct __nv_bfloat16 {
    unsigned short x;
    __nv_bfloat16() = default;
    __nv_bfloat16(float f) : x(emu_bf16_round(f)) {}
    __nv_bfloat16(__nv_bfloat16_raw r) : x(r.x) {}
    operator float() const { unsigned int u = (unsigned int)x << 16; float f; memcpy(&f, &u, 4); return f; }
    operator __nv_bfloat16_raw() const { return __nv_bfloat16_raw{x}; }
};

static inline float __bfloat162float(__nv_bfloat16 b) { return (float)b; }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
static inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }

#endif // EMU_CUDA_BF16_H
