/*
 zero3/quant.h's int8 blocks on the GPU, for the device engine's quantised collectives
 (qwZ: parameters all-gathered as int8; qgZ: gradients reduce-scattered as int8 in hops,
 summed in fp32 at each hop). The byte layout is quant.h's, one block of up to
 ZERO_QUANT_BLOCK (256) values after the other, each 4 + n_b bytes:

   [ scale: fp32 ][ q: n_b x int8 ]   scale = amax / 127, q = rint(x * (127 / amax)), |q| <= 127

 so a run quantised here and one quantised by the host engine are the same bytes.

 What runs:
   zero_quantize_cuda(x, n, out, s)          x (n,) fp32 or bf16 -> out (zero_quant_bytes(n) bytes)
   zero_dequantize_cuda(in, n, out, s)       in -> out (n,) fp32 or bf16 (rounded to nearest)
   zero_dequantize_add_cuda(in, n, out, s)   in -> out (n,) fp32 += q * scale: qgZ's sum of a hop
 each launched on stream s, each returning 0 or -1 with zero_error (a refused pointer, a
 failed launch). `out` (quantise) and `in` (dequantise) must be 4-byte aligned: every block
 starts at a multiple of 4 + 256 bytes from the run's start, so the scales are then aligned
 too. Every run the engine quantises is (a rank's block of) a unit, n a multiple of 16, so
 the runs of consecutive ranks start aligned when the first does.

 Bit for bit against zero3/quant.h (test/gpu/test_kernels2_gpu.cu checks every case below):
   - quantised bytes, fp32 input: equal. The scale and the reciprocal are IEEE divisions
     (__fdiv_rn: the same with or without nvcc's -prec-div), the product x * inv an IEEE
     multiply (__fmul_rn, though nothing could be fused into it), rintf rounds to nearest
     even as the host's does in its default mode. Subnormals are kept (the Makefile builds
     without -ftz / fast math, which would flush them and change small blocks' bytes).
   - bf16 input: the values widened to fp32 (exactly) and quantised as above, so the bytes
     are quant.h's of the widened floats.
   - a block holding a NaN: quant.h keeps the LAST NaN of the block (its loop replaces amax
     by every NaN it meets) and its division returns that NaN with the quiet bit set, the
     payload kept (x86 and Arm alike); a GPU's division returns a canonical NaN instead. So
     the NaN scale is built from the bits here: |x|'s bits of the last NaN, | 0x00400000.
     An inf (and no NaN): scale = inf, which the division gives on both. q = 0 for both.
   - a block whose 127 / amax overflows (0 < amax < 127 / FLT_MAX, about 3.7e-37): quant.h's
     x * inv is +-inf for every nonzero x (q = +-127) and NaN for x = 0, whose conversion to
     int8 C leaves undefined (x86 and a GPU's cvt both give 0). Here: 0, explicitly.
   - dequantised, out = q * scale: the same single IEEE product, so equal values (a NaN is a
     NaN; its bits are the hardware's); bf16 out: that product rounded to nearest even.
   - out += q * scale: ONE rounding, __fmaf_rn(q, scale, out). The host engine is built with
     -O3 -march=native -std=gnu11, where GCC contracts quant.h's `out += (float)q * scale`
     into an FMA on any CPU that has one (checked on this project's x86 machine: gcc 12
     emits vfmadd for that loop; every x86-64-v3 and Arm64 CPU has FMA): bit-equal to that.
     A host build without FMA (x86-64 baseline, -ffp-contract=off, the emulated tests' g++)
     rounds twice and may differ by one rounding of the sum; the test accepts quant.h's
     result when it is either and counts which.

 Launch shapes:
   - quantise: one WARP per block, 8 warps (8 blocks) per thread block of 256 threads. The
     block's amax is a reduction, and within a warp it is five shuffles in registers: no
     shared memory, no __syncthreads, and every lane then has the scale without a broadcast.
     Lane l takes elements l, l + 32, ..., l + 224 of its block, so each load instruction
     reads 32 consecutive values and each store writes 32 consecutive bytes (coalesced,
     with no alignment asked of x). 8 values per lane is enough work to hide the loads.
   - dequantise: one THREAD per value, one thread block of 256 per quant block: thread i of
     block b reads block b's scale (one load per warp, broadcast) and its own int8. No
     reduction, so no reason for more work per thread.
*/
#ifndef ZERO3_QUANT_CUH
#define ZERO3_QUANT_CUH

#include <stddef.h>              // size_t
#include <stdint.h>              // int8_t; uintptr_t: the alignment check
#include <math.h>                // rintf
#include <cuda_runtime.h>        // cudaStream_t, the launches
#include <cuda_bf16.h>           // __nv_bfloat16 values in and out
#include "zero3/util.h"          // zero_error
#include "zero3/cuda_util.cuh"   // to_float, from_float, CEIL_DIV, zero_cuda
#include "zero3/quant.h"         // ZERO_QUANT_BLOCK, zero_quant_bytes: the format (and the host's reference)

#define ZERO_QUANT_WARPS 8       // quant blocks (warps) per thread block of the quantise kernel

// the bytes of block b of a quantised run: every block before it is a whole one
#define ZERO_QUANT_BLOCK_BYTES (sizeof(float) + ZERO_QUANT_BLOCK)

// The amax reduction's key for |x|'s bits `a` at index i of its block: the largest key is
// quant.h's amax. A NaN's key is above every number's (bit 32 and up: i + 1) and a later
// NaN's above an earlier one's (quant.h keeps the last NaN); numbers compare as their bits,
// which order non-negative floats as their values. A max is commutative: the shuffles may
// combine lanes in any order.
__device__ __forceinline__ unsigned long long zero_quant_key(unsigned int a, int i) {
    return a > 0x7f800000u ? ((unsigned long long)(i + 1) << 32) | a : (unsigned long long)a;
}

// x (n,) -> out: warp w of thread block b quantises block b * ZERO_QUANT_WARPS + w
template <typename T>
__global__ void zero_quantize_kernel(const T* x, size_t n, unsigned char* out) {
    size_t blk = (size_t)blockIdx.x * ZERO_QUANT_WARPS + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    size_t begin = blk * ZERO_QUANT_BLOCK;
    if (begin >= n) { return; }  // (the whole warp: no shuffle waits for it)
    int nb = n - begin < ZERO_QUANT_BLOCK ? (int)(n - begin) : ZERO_QUANT_BLOCK;
    float v[ZERO_QUANT_BLOCK / 32];
    unsigned long long key = 0;  // +0.0's: the amax of nothing
    for (int k = 0; k < ZERO_QUANT_BLOCK / 32; k++) {
        int i = k * 32 + lane;
        v[k] = i < nb ? to_float(x[begin + i]) : 0.0f;
        unsigned long long ki = zero_quant_key(__float_as_uint(v[k]) & 0x7fffffffu, i);  // |x| by its bits
        key = ki > key ? ki : key;
    }
    for (int m = 16; m > 0; m /= 2) {
        unsigned long long other = __shfl_xor_sync(0xffffffffu, key, m);
        key = other > key ? other : key;
    }
    unsigned int abits = (unsigned int)key;
    float amax = __uint_as_float(abits);
    // a NaN: the host's division returns it quietened, payload kept (see the top)
    float scale = abits > 0x7f800000u ? __uint_as_float(abits | 0x00400000u) : __fdiv_rn(amax, 127.0f);
    unsigned char* blk_out = out + blk * ZERO_QUANT_BLOCK_BYTES;
    if (lane == 0) { *(float*)blk_out = scale; }
    int8_t* q = (int8_t*)(blk_out + sizeof(float));
    int flat = scale == 0.0f || (__float_as_uint(scale) & 0x7f800000u) == 0x7f800000u;  // q = 0: zeros, or inf / NaN
    float inv = flat ? 0.0f : __fdiv_rn(127.0f, amax);  // inf when amax < 127 / FLT_MAX (see the top)
    for (int k = 0; k < ZERO_QUANT_BLOCK / 32; k++) {
        int i = k * 32 + lane;
        if (i >= nb) { break; }
        float r = rintf(__fmul_rn(v[k], inv));
        // r is NaN only as 0 * inf (the overflowed inv): quant.h's cast is undefined there, 0 here
        q[i] = flat || r != r ? 0 : (int8_t)(r > 127.0f ? 127.0f : (r < -127.0f ? -127.0f : r));
    }
}

// in -> out (n,), or (add, fp32 only) out += in in one rounding (see the top): thread block b
// dequantises quant block b (ZERO_QUANT_BLOCK threads)
template <typename T, int add>
__global__ void zero_dequantize_kernel(const unsigned char* in, size_t n, T* out) {
    size_t i = (size_t)blockIdx.x * ZERO_QUANT_BLOCK + threadIdx.x;
    if (i >= n) { return; }
    const unsigned char* blk_in = in + (size_t)blockIdx.x * ZERO_QUANT_BLOCK_BYTES;
    float scale = *(const float*)blk_in;
    float q = (float)((const int8_t*)(blk_in + sizeof(float)))[threadIdx.x];
    out[i] = add ? from_float<T>(__fmaf_rn(q, scale, to_float(out[i]))) : from_float<T>(__fmul_rn(q, scale));
}

// a quantised run must start 4-byte aligned (its scales are read and written as floats)
static inline int zero_quant_aligned(const void* p, const char* what) {
    if ((uintptr_t)p % sizeof(float) == 0) { return 0; }
    return zero_error("zero quant: %s %p is not 4-byte aligned", what, p);
}

// x (n,) fp32 or bf16 -> out (zero_quant_bytes(n) bytes), on stream s
template <typename T>
static int zero_quantize_cuda(const T* x, size_t n, unsigned char* out, cudaStream_t s) {
    if (n == 0) { return 0; }
    if (zero_quant_aligned(out, "the quantised output") != 0) { return -1; }
    size_t blocks = CEIL_DIV(n, (size_t)ZERO_QUANT_BLOCK);
    zero_quantize_kernel<T><<<(unsigned)CEIL_DIV(blocks, (size_t)ZERO_QUANT_WARPS), 32 * ZERO_QUANT_WARPS, 0, s>>>(x, n, out);
    return zero_cuda(cudaGetLastError(), "the quantise kernel");
}

// in (a quantised run of n values) -> out (n,) fp32 or bf16, on stream s
template <typename T>
static int zero_dequantize_cuda(const unsigned char* in, size_t n, T* out, cudaStream_t s) {
    if (n == 0) { return 0; }
    if (zero_quant_aligned(in, "the quantised input") != 0) { return -1; }
    zero_dequantize_kernel<T, 0><<<(unsigned)CEIL_DIV(n, (size_t)ZERO_QUANT_BLOCK), ZERO_QUANT_BLOCK, 0, s>>>(in, n, out);
    return zero_cuda(cudaGetLastError(), "the dequantise kernel");
}

// out (n,) fp32 += the dequantised run in, on stream s
static int zero_dequantize_add_cuda(const unsigned char* in, size_t n, float* out, cudaStream_t s) {
    if (n == 0) { return 0; }
    if (zero_quant_aligned(in, "the quantised input") != 0) { return -1; }
    zero_dequantize_kernel<float, 1><<<(unsigned)CEIL_DIV(n, (size_t)ZERO_QUANT_BLOCK), ZERO_QUANT_BLOCK, 0, s>>>(in, n, out);
    return zero_cuda(cudaGetLastError(), "the dequantise-add kernel");
}

#endif // ZERO3_QUANT_CUH
