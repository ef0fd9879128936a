/*
 The tensor cores' warp-level operations (sm_80 and later), as the attention kernels use
 them (llmc/attention_tc.cuh): one inline function each, PTX on a GPU; built by a host
 compiler (test/emu's CPU emulation, which defines the emu_* functions called below) the
 same operation in C++, from the same per-lane fragments.

   mma_bf16_16816(d, a, b)          d (16x8 fp32) += a (16x16 bf16) b (16x8 bf16), one warp
   ldmatrix_x4(r, p), _x4_trans     four 8x8 matrices of 16-bit elements from shared memory
   ldmatrix_x2(r, p), _x2_trans     two of them
   cp_async_16(dst, src, valid)     16 bytes global -> shared, asynchronously (zeros if !valid)
   cp_async_commit()                the copies issued since the last commit make a group
   cp_async_wait<N>()               wait until at most N of this thread's groups are pending

 [Note: fragment layouts] (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point
 type"). With g = lane / 4 and t = lane % 4, each 32-bit register holds two bf16, the lower
 index in the low half:
   A (16x16, row major):  a[0] = A[g][2t, 2t+1]     a[1] = A[g+8][2t, 2t+1]
                          a[2] = A[g][2t+8, 2t+9]   a[3] = A[g+8][2t+8, 2t+9]
   B (16x8, "col"):       b[0] = B[2t, 2t+1][g]     b[1] = B[2t+8, 2t+9][g]
   C, D (16x8 fp32):      d[0], d[1] = C[g][2t, 2t+1]    d[2], d[3] = C[g+8][2t, 2t+1]
 ldmatrix: lanes 8i..8i+7 give the row addresses (16 bytes, 16-byte aligned) of matrix i's
 rows 0..7; lane receives r[i] = M_i[g][2t, 2t+1], or with .trans M_i[2t, 2t+1][g]. So
 the fragments of a row-major tile X in shared memory are:
   A from X's rows (x4): lanes 0-7 rows 0-7 at column c, 8-15 rows 8-15 at c, 16-23 rows
     0-7 at c+8, 24-31 rows 8-15 at c+8                          (a[0..3] above)
   B = X^T from X's rows (B[k][n] = X[n][k], k along X's row): x2 with lanes 0-7 at column
     c and 8-15 at c+8 of rows n0..n0+7                          (b[0], b[1])
   B = X from X's rows (B[k][n] = X[k][n], k down X's columns): x2.trans with lanes 0-7
     at rows k0..k0+7 and 8-15 at rows k0+8..k0+15, column n0
 and the accumulator of S = A B, read as the A operand of a next product P B' (P over the
 same 16 rows, k along S's columns), is, for k-step kk over columns 16kk..16kk+15:
   a[0] = pack(d_{2kk}[0], d_{2kk}[1])     a[1] = pack(d_{2kk}[2], d_{2kk}[3])
   a[2] = pack(d_{2kk+1}[0], d_{2kk+1}[1]) a[3] = pack(d_{2kk+1}[2], d_{2kk+1}[3])
 (d_n: the accumulator of S's columns 8n..8n+7), with no data crossing lanes.
*/
#ifndef LLMC_MMA_CUH
#define LLMC_MMA_CUH

#include <stdint.h>                // uint32_t
#include <string.h>                // memcpy: a bf16's bits
#include "llmc/cuda_common.cuh"    // __nv_bfloat16, __float2bfloat16_rn

// two floats as a bf16x2 register: lo in the low half (rounded to nearest even)
__device__ __forceinline__ uint32_t mma_pack_bf16(float lo, float hi) {
    __nv_bfloat16 l = __float2bfloat16_rn(lo), h = __float2bfloat16_rn(hi);
    uint16_t lb, hb;
    memcpy(&lb, &l, 2);
    memcpy(&hb, &h, 2);
    return (uint32_t)lb | ((uint32_t)hb << 16);
}

#if defined(__CUDACC__)

__device__ __forceinline__ void mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void* row) {
    uint32_t s = (uint32_t)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s) : "memory");
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], const void* row) {
    uint32_t s = (uint32_t)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s) : "memory");
}
__device__ __forceinline__ void ldmatrix_x2(uint32_t r[2], const void* row) {
    uint32_t s = (uint32_t)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(s) : "memory");
}
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t r[2], const void* row) {
    uint32_t s = (uint32_t)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(s) : "memory");
}
// (with valid false no byte of src is read: it need only be a global address)
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
    uint32_t s = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit(void) { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait(void) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

#else  // a host compiler: test/emu (cuda_runtime.h) emulates the warp's operations

__device__ __forceinline__ void mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2]) { emu_mma_bf16_16816(d, a, b); }
__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void* row) { emu_ldmatrix(r, 4, 0, row); }
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], const void* row) { emu_ldmatrix(r, 4, 1, row); }
__device__ __forceinline__ void ldmatrix_x2(uint32_t r[2], const void* row) { emu_ldmatrix(r, 2, 0, row); }
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t r[2], const void* row) { emu_ldmatrix(r, 2, 1, row); }
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) { emu_cp_async(dst, src, 16, valid); }
__device__ __forceinline__ void cp_async_commit(void) { emu_cp_async_commit(); }
template <int N> __device__ __forceinline__ void cp_async_wait(void) { emu_cp_async_wait(N); }

#endif

#endif // LLMC_MMA_CUH
