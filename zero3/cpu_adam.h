/*
 CPU AdamW for ZeRO optimizer offload: the update of a rank's host shards.

 With optimizer offload the fp32 master parameters and both Adam moments live in host
 memory and the CPU runs the update after the gradient shard has been copied down. The
 update touches every byte of p, g, m, v once and does ~15 flops per parameter, so it is
 bound by memory bandwidth: the goal is one streaming pass at the speed of a STREAM
 triad. Hence:
 - one fused pass: each vector of p, g, m, v is loaded once, all the math (including
   the optional conversion of the new parameters to bf16 for the device copy) is done in
   registers, and p, m, v (and out) are stored once. No temporaries, no second pass;
 - SIMD: AVX-512F (16 lanes) when the CPU has it, else AVX2+FMA (8 lanes), else scalar.
   The vector code is compiled with GCC target attributes, so a binary built for plain
   x86-64 still carries all three and picks one at run time (__builtin_cpu_supports);
 - OpenMP across cores over fixed tiles of CPU_ADAM_TILE elements (schedule(static):
   each thread gets one contiguous run of tiles, i.e. long streams for the hardware
   prefetcher). A tile is 8 KiB of each fp32 array, ~40 KiB over p, g, m, v and out,
   so a tile's lines sit in L1/L2 between the prefetcher bringing them and the kernel
   writing them back. Tiles are multiples of every vector width, so thread boundaries
   never split a vector, and the only partial vector is at the very end of the array;
 - tails go through the same vector code on a zero-padded copy (no scalar epilogue), so
   every element gets the same arithmetic whatever its position: results are bitwise
   independent of the thread count and of the pointers' alignment.

 The math: torch.optim.AdamW's formula, the same as zero3/adamw.h's adamw_update, with
 g = grad * grad_scale, b1 = beta1, b2 = beta2 and per call (in double, then rounded to
 float): bc1 = 1 - b1^t, bc2 = 1 - b2^t, step = lr / bc1, isb2 = 1 / sqrt(bc2):
   m = fma(b1, m, (1 - b1) g)
   v = fma((1 - b2) g, g, b2 v)
   p = p - (lr wd) p                                 (one fma: fnmadd)
   p = p - step * (m / fma(sqrt(v), isb2, eps))     (one fma: fnmadd)
 Differences from adamw_update, which computes p - lr (m / bc1) / (sqrt(v / bc2) + eps)
 with separately rounded products and sums:
 - fma rounds once where the reference rounds twice (m, v, and both updates of p);
 - the bias corrections are folded into step and isb2 (two divides per element fewer):
   sqrt(v) * isb2 instead of sqrt(v / bc2), and step * m instead of lr * (m / bc1).
   The divide m / denom and the sqrt are IEEE-exact (vdivps, vsqrtps), no rcp/rsqrt.
 Bound (u = 2^-24, the unit roundoff of float), checked by test/unit/test_cpu_adam.c:
   |dm| <= 1.5u (|b1 m0| + |(1-b1) g|)       (m can cancel: relative to its terms)
   |dv| <= 2u v
   denom differs by <= ~4u relative, the update d = step m / denom by <= ~8u relative
   |dp| <= 1u (|p| + |p1|) + 0.5u |lr wd p0| + 8u |d| + step |dm| / denom
 i.e. a few ulps of the terms. The scalar fallback evaluates the same expressions with
 plain * and + (the compiler may contract them to fma under -march=native): same bound.

 bf16 is the upper half of an fp32: rounding to nearest even adds 0x7fff plus the lowest
 kept bit before truncating; a NaN is kept a (quiet) NaN of the same sign instead of
 possibly rounding up into infinity; values past the largest bf16 round to infinity.
*/
#ifndef ZERO3_CPU_ADAM_H
#define ZERO3_CPU_ADAM_H

#include <stddef.h>       // size_t
#include <stdint.h>       // uint16_t, uint32_t, SIZE_MAX: bf16 bits and the overflow check

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { CPU_ADAM_FP32, CPU_ADAM_BF16 } CpuAdamDtype;

// hyperparameters of one call; t is the 1-based step (bias corrections 1 - beta^t)
typedef struct { float lr, beta1, beta2, eps, weight_decay, grad_scale; int t; } CpuAdamParams;

// elements per OpenMP work unit: a multiple of 16 (the widest vector), see the top comment
#define CPU_ADAM_TILE 2048

// ----------------------------------------------------------------------------
// bf16 helpers

// fp32 -> bf16 bits, round to nearest even; NaN stays NaN (quiet bit set, sign kept)
uint16_t cpu_adam_f32_to_bf16(float x);

// bf16 bits -> fp32: exact (the low 16 bits of the fp32 are zero)
float cpu_adam_bf16_to_f32(uint16_t b);

// acc (n,) += g (n,): a reduced gradient shard into its fp32 accumulator, g fp32 or (g_bf16)
// bf16 bits widened exactly. first: acc starts from zero (0 + g: -0 becomes +0, as in an
// accumulator that was zeroed). Threaded over n: the host adds a whole model's gradient a
// step with parameter offload, one element per cycle of one core is seconds at 1.5B
void cpu_adam_grad_add(float* acc, const void* g, int g_bf16, size_t n, int first);

// ----------------------------------------------------------------------------
// per-call constants, the same for every element (see the top comment)

typedef struct {
    float b1, b2, omb1, omb2;  // beta1, beta2, 1 - beta1, 1 - beta2 (float, as adamw_update)
    float gs, lrwd;            // grad_scale, lr * weight_decay
    float step, isb2, eps;     // lr / bc1, 1 / sqrt(bc2), eps
} CpuAdamConsts;

// what to write to out
enum { CPU_ADAM_OUT_NONE = 0, CPU_ADAM_OUT_FP32 = 1, CPU_ADAM_OUT_BF16 = 2 };

// ----------------------------------------------------------------------------
// scalar kernel: the fallback, and the reference order of operations for the vector ones

// ----------------------------------------------------------------------------
// AVX2 + FMA kernel: n must be a multiple of 8 (tails are padded by the caller)

// ----------------------------------------------------------------------------
// AVX-512F kernel: n must be a multiple of 16. Only AVX-512F instructions (no BW/VL/BF16),
// so any AVX-512 CPU runs it.

// ----------------------------------------------------------------------------
// run-time ISA choice

enum { CPU_ADAM_ISA_UNSET = 0, CPU_ADAM_ISA_SCALAR = 1, CPU_ADAM_ISA_AVX2 = 2, CPU_ADAM_ISA_AVX512 = 3 };

// "avx512", "avx2" or "scalar": what cpu_adam_step uses
const char* cpu_adam_isa(void);

// for tests and benchmarks: force "avx512", "avx2" or "scalar" ("auto" or NULL: back to
// the best); -1 if the name is unknown or the CPU cannot run it (the choice is then kept)
int cpu_adam_force_isa(const char* isa);

// ----------------------------------------------------------------------------
// the update

// AdamW over n elements of host shards: master params p (fp32), moments m, v (fp32),
// gradients g in fp32 or bf16 (uint16_t bits), scaled by grad_scale first. If out != NULL
// the updated parameters are also written there in out_dtype (fp32, or bf16 rounded to
// nearest even). out may equal p when out_dtype is fp32; otherwise no array may overlap
// another. Returns 0, or -1 for bad arguments (NULL pointers, n * 4 bytes overflowing,
// t < 1, betas outside [0, 1), unknown dtypes).
int cpu_adam_step(float* p, const void* g, CpuAdamDtype g_dtype, float* m, float* v, size_t n,
                                const CpuAdamParams* hp, void* out, CpuAdamDtype out_dtype);

#ifdef __cplusplus
}
#endif

#endif // ZERO3_CPU_ADAM_H
