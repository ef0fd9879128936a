/*
 Token + position embedding on the GPU (CUDA twin of llmc/encoder.h, same math and shapes).
   out[b,t,:] = wte[inp[b,t], :] + wpe[t, :]
 wte (Vp, C) is the (padded) token table, shared with the classifier; wpe (maxT, C).

 Backward, DETERMINISTIC (no floating-point atomics), computed fully on the device:
   dwpe[t,c] += sum over b of dout[b,t,c]          one thread per (t,c), b in order
   dwte[v,c] += sum over {(b,t): inp[b,t] == v} of dout[b,t,c]
 For dwte, several positions may hold the same token. The positions are grouped by token
 with a STABLE device radix sort of (token, position) pairs (cub, part of the CUDA
 toolkit), so each token's positions come out contiguous and in increasing position order.
 Then the first thread of each group of equal tokens sums that group's dout rows in that
 fixed order, in fp32, and adds the sum into dwte once. The order of every addition is
 fixed by the inputs alone, so results are bitwise reproducible run to run.
 Design choice: this needs a device scratch buffer (size from
 encoder_backward_scratch_bytes), hence the extra `scratch` argument of encoder_backward;
 it avoids any host work or host<->device transfer in the middle of the step. An overload
 with the scratch-free signature allocates it stream-ordered (cudaMallocAsync).
*/
#ifndef LLMC_ENCODER_CUH
#define LLMC_ENCODER_CUH

#include <stddef.h>                            // size_t for offsets that may pass 2^31
#include <cub/device/device_radix_sort.cuh>    // cub::DeviceRadixSort (stable, deterministic)
#include "llmc/cuda_common.cuh"                // floatX, to_float/from_float, cudaCheck, CEIL_DIV

// ----------------------------------------------------------------------------
// kernels

// out (B,T,C) = wte[inp] + wpe[t]; one thread per output element, consecutive threads on
// consecutive channels so that the row reads and the write are coalesced
__global__ void encoder_forward_kernel(floatX* out, const int* inp, const floatX* wte,
                                       const floatX* wpe, int B, int T, int C) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t total = (size_t)B * T * C;
    if (idx >= total) { return; }
    int c = (int)(idx % C);
    size_t bt = idx / C;               // flat (b,t)
    int t = (int)(bt % T);
    int ix = inp[bt];                  // token id of this position
    float v = to_float(wte[(size_t)ix * C + c]) + to_float(wpe[(size_t)t * C + c]);
    out[idx] = from_float<floatX>(v);
}

// dwpe (T,C) += sum over b of dout (B,T,C); one thread per (t,c), b summed in order in fp32
__global__ void encoder_backward_wpe_kernel(floatX* dwpe, const floatX* dout, int B, int T, int C) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;  // flat (t,c)
    size_t TC = (size_t)T * C;
    if (idx >= TC) { return; }
    float sum = 0.0f;
    for (int b = 0; b < B; b++) { sum += to_float(dout[(size_t)b * TC + idx]); }
    dwpe[idx] = from_float<floatX>(to_float(dwpe[idx]) + sum);
}

// positions (N,) = 0, 1, ..., N-1: the values that ride along with the token keys in the sort
__global__ void encoder_iota_kernel(int* positions, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) { positions[i] = i; }
}

// dwte (Vp,C) += grouped sums. grid: x over the N sorted entries (x, because gridDim.y is
// limited to 65535 and N = B*T can exceed it), y over channel tiles.
// sorted_tok (N,) token ids in increasing order; sorted_pos (N,) their flat positions (b*T+t),
// increasing within a run of equal tokens (the radix sort is stable).
// Only the entry that starts a run of equal tokens does the work: it walks its run in order.
// Blocks of non-leading entries exit at once (cheap: one compare).
__global__ void encoder_backward_wte_kernel(floatX* dwte, const floatX* dout,
                                            const int* sorted_tok, const int* sorted_pos,
                                            int N, int C) {
    int i = blockIdx.x;                                  // sorted entry
    int c = blockIdx.y * blockDim.x + threadIdx.x;       // channel
    if (c >= C) { return; }
    int tok = sorted_tok[i];
    if (i > 0 && sorted_tok[i - 1] == tok) { return; }   // not the first of its run
    float sum = 0.0f;
    for (int j = i; j < N && sorted_tok[j] == tok; j++) {
        sum += to_float(dout[(size_t)sorted_pos[j] * C + c]);
    }
    size_t o = (size_t)tok * C + c;
    dwte[o] = from_float<floatX>(to_float(dwte[o]) + sum);
}

// ----------------------------------------------------------------------------
// host launchers

// out (B,T,C) <- inp (B,T) token ids on the device, wte (Vp,C), wpe (maxT,C)
static inline void encoder_forward(floatX* out, const int* inp, const floatX* wte, const floatX* wpe,
                                   int B, int T, int C, cudaStream_t s) {
    const int block = 256;
    size_t total = (size_t)B * T * C;
    unsigned int grid = (unsigned int)CEIL_DIV(total, (size_t)block);
    encoder_forward_kernel<<<grid, block, 0, s>>>(out, inp, wte, wpe, B, T, C);
    cudaCheck(cudaGetLastError());
}

// Layout of the backward scratch (all in one buffer, allocated once by the caller):
//   [0, N)        int  sorted token ids          (N = B*T)
//   [N, 2N)       int  positions 0..N-1 (sort input)
//   [2N, 3N)      int  positions sorted by token
//   then, at a 256-byte aligned offset, cub's radix-sort temporary storage.
static inline size_t encoder_scratch_cub_offset(int N) {
    return CEIL_DIV((size_t)3 * N * sizeof(int), (size_t)256) * 256;
}

// bytes of cub temporary storage for sorting N (int key, int value) pairs on all 32 key bits
// (host-only query: no kernel runs, no synchronization)
static inline size_t encoder_cub_temp_bytes(int N) {
    size_t temp_bytes = 0;
    cudaCheck(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, (const int*)nullptr, (int*)nullptr,
                                              (const int*)nullptr, (int*)nullptr, N, 0, 32, (cudaStream_t)0));
    return temp_bytes;
}

// size in bytes of the `scratch` buffer encoder_backward needs for a (B,T) micro-batch:
// 3*B*T ints rounded up to 256 bytes, plus cub's temporary storage (a few KB to a few
// hundred KB for typical B*T). Allocate it once for the largest B*T used.
static inline size_t encoder_backward_scratch_bytes(int B, int T) {
    int N = B * T;
    return encoder_scratch_cub_offset(N) + encoder_cub_temp_bytes(N);
}

// dwte (Vp,C) +=, dwpe (maxT,C) += (rows 0..T-1), from dout (B,T,C) and inp (B,T) on the device.
// ACCUMULATES into dwte and dwpe (as the CPU version). Deterministic (see the top of the file).
// scratch: device buffer of at least encoder_backward_scratch_bytes(B, T) bytes; its content
// on entry does not matter and is garbage on exit. Token ids must be >= 0 (they are).
static inline void encoder_backward(floatX* dwte, floatX* dwpe, void* scratch,
                                    const floatX* dout, const int* inp,
                                    int B, int T, int C, cudaStream_t s) {
    const int block = 256;
    int N = B * T;

    // dwpe: independent of the sort
    size_t TC = (size_t)T * C;
    encoder_backward_wpe_kernel<<<(unsigned int)CEIL_DIV(TC, (size_t)block), block, 0, s>>>(dwpe, dout, B, T, C);
    cudaCheck(cudaGetLastError());

    // group the positions by token: stable sort of (inp[i], i) by inp[i]
    int* sorted_tok = (int*)scratch;        // (N,)
    int* positions = sorted_tok + N;        // (N,)
    int* sorted_pos = positions + N;        // (N,)
    void* cub_temp = (char*)scratch + encoder_scratch_cub_offset(N);
    size_t cub_bytes = encoder_cub_temp_bytes(N);
    encoder_iota_kernel<<<CEIL_DIV(N, block), block, 0, s>>>(positions, N);
    cudaCheck(cudaGetLastError());
    cudaCheck(cub::DeviceRadixSort::SortPairs(cub_temp, cub_bytes, inp, sorted_tok, positions, sorted_pos,
                                              N, 0, 32, s));

    // one thread per (sorted entry, channel); the leader of each run sums the run
    dim3 grid((unsigned int)N, (unsigned int)CEIL_DIV(C, block));
    encoder_backward_wte_kernel<<<grid, block, 0, s>>>(dwte, dout, sorted_tok, sorted_pos, N, C);
    cudaCheck(cudaGetLastError());
}

// Convenience overload with the scratch-free signature: takes the scratch from the
// stream-ordered allocator (cudaMallocAsync/cudaFreeAsync on s: no device synchronization;
// after the first call the default memory pool normally serves it without a driver call).
// Prefer the explicit-scratch version in the training loop (fixed memory, no allocator).
static inline void encoder_backward(floatX* dwte, floatX* dwpe, const floatX* dout, const int* inp,
                                    int B, int T, int C, cudaStream_t s) {
    void* scratch = nullptr;
    cudaCheck(cudaMallocAsync(&scratch, encoder_backward_scratch_bytes(B, T), s));
    encoder_backward(dwte, dwpe, scratch, dout, inp, B, T, C, s);
    cudaCheck(cudaFreeAsync(scratch, s));
}

#endif // LLMC_ENCODER_CUH
