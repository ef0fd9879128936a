/*
 Block-wise int8 quantisation of floats, for the quantised collectives (ZeRO++'s qwZ:
 weights all-gathered as int8; qgZ: gradients reduce-scattered as int8). The reference
 that the CUDA kernels (zero3/quant.cuh) match bit for bit.

 A run of n floats is cut into blocks of ZERO_QUANT_BLOCK (the last one shorter). Each
 block is stored as its scale, a float, then its n_b int8 values:

   scale = max |x| over the block / 127        q = round-to-nearest-even(x / scale)

 so dequantising (q * scale) is off by at most scale / 2 = max|x| / 254 per element: 0.4%
 of the block's largest magnitude. Symmetric (no zero point): weights and gradients are
 centred on zero. A block of zeros has scale 0 and dequantises to zeros exactly. (Computed
 as q = rint(x * (127 / max|x|)). Below max|x| = 127 / FLT_MAX, about 3.7e-37, that factor
 overflows: every nonzero x gets q = +-127, outside the bound above, and a 0 gets 0 * inf =
 NaN, whose cast to int8 C leaves undefined (x86 gives 0, as zero3/quant.cuh does on
 purpose). No block of weights or gradients is that small in practice.)

 Why 256: a scale is 4 bytes, so the overhead is 4/256 = 1.6% on the int8 payload (the
 wire carries 1.016 bytes per element instead of 4); a smaller block would fit the scale
 more tightly to the values near it (GPT-2's weight rows have outliers), a larger one would
 save the last percent. DeepSpeed's ZeRO++ uses blocks of the same order (its qwZ default
 groups a few hundred to a few thousand elements).

 Non-finite input: a block holding an inf or a NaN gets a non-finite scale (a NaN: the
 block's last NaN, quietened, its payload kept) and q = 0, so it dequantises to NaN (0 * inf,
 0 * NaN): a gradient overflow stays visible to the norm, which then skips the step, instead
 of being quantised into a plausible number.

 Layout of a quantised run of n floats: blocks one after the other, each 4 + n_b bytes.
 Every run this engine quantises has n a multiple of 64 (a shard: 256 bytes of floats), so
 every block starts 4-byte aligned when the run does.
*/
#ifndef ZERO3_QUANT_H
#define ZERO3_QUANT_H

#include <stddef.h>   // size_t
#include <stdint.h>   // int8_t
#include <string.h>   // memcpy: the scale is written unaligned-safe
#include <math.h>     // fabsf, rintf, isfinite

#ifdef __cplusplus
extern "C" {
#endif

#define ZERO_QUANT_BLOCK 256

// the bytes of n floats quantised
static inline size_t zero_quant_bytes(size_t n) {
    size_t blocks = (n + ZERO_QUANT_BLOCK - 1) / ZERO_QUANT_BLOCK;
    return blocks * sizeof(float) + n;
}

// x (n floats) -> out (zero_quant_bytes(n) bytes)
void zero_quantize(const float* x, size_t n, unsigned char* out);

// in (a quantised run of n floats) -> out (n floats); add != 0: out += instead of out =
void zero_dequantize(const unsigned char* in, size_t n, float* out, int add);

#ifdef __cplusplus
}
#endif

#endif // ZERO3_QUANT_H
