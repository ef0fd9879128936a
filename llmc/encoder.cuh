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
 A frequent token makes a long run of equal entries (every position the same token: one
 run of B*T), and summing a run on one thread per channel would serialise the pass on it.
 So the sorted entries are cut into fixed chunks of ENCODER_WTE_CHUNK entries, each chunk
 summed by its own threads (one per channel), and a run is cut where it crosses a chunk
 boundary:
   pass 1 (one thread per (chunk, channel)): walks its chunk's entries in order, summing
     each piece of a run that lies in the chunk, in fp32. A run that starts and ends in the
     chunk is added into dwte at once; the piece of a longer run goes to the chunk's
     partials: its "tail" slot (the piece that starts a run and leaves the chunk at its
     end) or its "head" slot (the piece that continues a run from the chunks before).
   pass 2 (one thread per (chunk, channel), only where a run starts in the chunk and
     leaves it): adds that run's tail partial, then the head partials of the chunks after,
     in chunk order, and adds the total into dwte once.
 Every token's sum is added into dwte by exactly one thread, in an order fixed by the
 inputs alone (entries in position order within a piece, pieces in chunk order), so the
 result is bitwise reproducible run to run; no atomics. The longest serial sum is
 ENCODER_WTE_CHUNK entries in pass 1 and B*T / ENCODER_WTE_CHUNK partials in pass 2.
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

// sorted entries per chunk of the wte pass (see the top of the file): a run longer than this
// is summed by several chunks' threads in parallel
#define ENCODER_WTE_CHUNK 64
// a chunk's two partial slots (C floats each): the piece of a run continued from the chunks
// before, and the piece that starts a run and continues into the chunks after
#define ENCODER_WTE_HEAD 0
#define ENCODER_WTE_TAIL 1

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

// pass 1 of dwte (Vp,C) += grouped sums. grid: x over the chunks of ENCODER_WTE_CHUNK sorted
// entries (x, because gridDim.y is limited to 65535 and N / chunk can exceed it), y over
// channel tiles. sorted_tok (N,) token ids in increasing order; sorted_pos (N,) their flat
// positions (b*T+t), increasing within a run of equal tokens (the radix sort is stable).
// partials (nchunks, 2, C): a chunk's head and tail slots (see the top of the file); a slot
// is written only when the chunk has such a piece.
__global__ void encoder_backward_wte_chunk_kernel(floatX* dwte, float* partials, const floatX* dout,
                                                  const int* sorted_tok, const int* sorted_pos,
                                                  int N, int C) {
    int chunk = blockIdx.x;
    int c = blockIdx.y * blockDim.x + threadIdx.x;       // channel
    if (c >= C) { return; }
    int lo = chunk * ENCODER_WTE_CHUNK;
    int hi = min(N, lo + ENCODER_WTE_CHUNK);
    int start = lo;                                      // the current piece: entries [start, j)
    float sum = 0.0f;
    for (int j = lo; j < hi; j++) {
        sum += to_float(dout[(size_t)sorted_pos[j] * C + c]);
        if (j + 1 < hi && sorted_tok[j + 1] == sorted_tok[j]) { continue; }  // the piece goes on
        int tok = sorted_tok[j];
        int starts_run = start == 0 || sorted_tok[start - 1] != tok;
        int ends_run = j + 1 == N || sorted_tok[j + 1] != tok;
        if (starts_run && ends_run) {                    // the whole run: straight into dwte
            size_t o = (size_t)tok * C + c;
            dwte[o] = from_float<floatX>(to_float(dwte[o]) + sum);
        } else {                                         // a piece of a run that crosses chunks
            int slot = starts_run ? ENCODER_WTE_TAIL : ENCODER_WTE_HEAD;
            partials[((size_t)chunk * 2 + slot) * C + c] = sum;
        }
        sum = 0.0f;
        start = j + 1;
    }
}

// pass 2: for each chunk where a run starts and continues past the chunk's end, that run's
// tail partial plus the head partials of the chunks it covers after, in chunk order, added
// into dwte once. Same grid as pass 1.
__global__ void encoder_backward_wte_combine_kernel(floatX* dwte, const float* partials, const int* sorted_tok,
                                                    int N, int C) {
    int chunk = blockIdx.x;
    int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) { return; }
    int lo = chunk * ENCODER_WTE_CHUNK;
    int last = min(N, lo + ENCODER_WTE_CHUNK) - 1;       // the chunk's last entry
    int tok = sorted_tok[last];
    if (last + 1 == N || sorted_tok[last + 1] != tok) { return; }        // no run leaves the chunk
    if (lo > 0 && sorted_tok[lo - 1] == tok && sorted_tok[lo] == tok) { return; }  // it started before
    float sum = partials[((size_t)chunk * 2 + ENCODER_WTE_TAIL) * C + c];
    int nchunks = CEIL_DIV(N, ENCODER_WTE_CHUNK);
    for (int k = chunk + 1; k < nchunks && sorted_tok[k * ENCODER_WTE_CHUNK] == tok; k++) {
        sum += partials[((size_t)k * 2 + ENCODER_WTE_HEAD) * C + c];
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

// chunks of the wte pass for N = B*T sorted entries
static inline int encoder_wte_num_chunks(int N) { return CEIL_DIV(N, ENCODER_WTE_CHUNK); }

// Layout of the backward scratch (all in one buffer, allocated once by the caller):
//   [0, N)        int  sorted token ids          (N = B*T)
//   [N, 2N)       int  positions 0..N-1 (sort input)
//   [2N, 3N)      int  positions sorted by token
//   then, at a 256-byte aligned offset, the wte pass's partials: (nchunks, 2, C) floats
//   then, at a 256-byte aligned offset, cub's radix-sort temporary storage.
static inline size_t encoder_scratch_partials_offset(int N) {
    return CEIL_DIV((size_t)3 * N * sizeof(int), (size_t)256) * 256;
}
static inline size_t encoder_scratch_cub_offset(int N, int C) {
    size_t partials = (size_t)encoder_wte_num_chunks(N) * 2 * C * sizeof(float);
    return encoder_scratch_partials_offset(N) + CEIL_DIV(partials, (size_t)256) * 256;
}
// the wte pass's partials inside a scratch buffer: (nchunks, 2, C) floats
static inline float* encoder_scratch_partials(void* scratch, int N) {
    return (float*)((char*)scratch + encoder_scratch_partials_offset(N));
}

// bytes of cub temporary storage for sorting N (int key, int value) pairs on all 32 key bits
// (host-only query: no kernel runs, no synchronization)
static inline size_t encoder_cub_temp_bytes(int N) {
    size_t temp_bytes = 0;
    cudaCheck(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, (const int*)nullptr, (int*)nullptr,
                                              (const int*)nullptr, (int*)nullptr, N, 0, 32, (cudaStream_t)0));
    return temp_bytes;
}

// size in bytes of the `scratch` buffer encoder_backward needs for a (B,T) micro-batch of
// C channels: 3*B*T ints and 2*C floats per chunk of ENCODER_WTE_CHUNK entries, each
// rounded up to 256 bytes, plus cub's temporary storage (a few KB to a few hundred KB for
// typical B*T). Allocate it once for the largest B*T used.
static inline size_t encoder_backward_scratch_bytes(int B, int T, int C) {
    int N = B * T;
    return encoder_scratch_cub_offset(N, C) + encoder_cub_temp_bytes(N);
}

// dwte (Vp,C) +=, dwpe (maxT,C) += (rows 0..T-1), from dout (B,T,C) and inp (B,T) on the device.
// ACCUMULATES into dwte and dwpe (as the CPU version). Deterministic (see the top of the file).
// scratch: device buffer of at least encoder_backward_scratch_bytes(B, T, C) bytes; its content
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
    float* partials = encoder_scratch_partials(scratch, N);
    void* cub_temp = (char*)scratch + encoder_scratch_cub_offset(N, C);
    size_t cub_bytes = encoder_cub_temp_bytes(N);
    encoder_iota_kernel<<<CEIL_DIV(N, block), block, 0, s>>>(positions, N);
    cudaCheck(cudaGetLastError());
    cudaCheck(cub::DeviceRadixSort::SortPairs(cub_temp, cub_bytes, inp, sorted_tok, positions, sorted_pos,
                                              N, 0, 32, s));

    // one thread per (chunk, channel): the pieces of runs in each chunk, then the runs
    // that cross chunks from their partials
    dim3 grid((unsigned int)encoder_wte_num_chunks(N), (unsigned int)CEIL_DIV(C, block));
    encoder_backward_wte_chunk_kernel<<<grid, block, 0, s>>>(dwte, partials, dout, sorted_tok, sorted_pos, N, C);
    cudaCheck(cudaGetLastError());
    encoder_backward_wte_combine_kernel<<<grid, block, 0, s>>>(dwte, partials, sorted_tok, N, C);
    cudaCheck(cudaGetLastError());
}

// Convenience overload with the scratch-free signature: takes the scratch from the
// stream-ordered allocator (cudaMallocAsync/cudaFreeAsync on s: no device synchronization;
// after the first call the default memory pool normally serves it without a driver call).
// Prefer the explicit-scratch version in the training loop (fixed memory, no allocator).
static inline void encoder_backward(floatX* dwte, floatX* dwpe, const floatX* dout, const int* inp,
                                    int B, int T, int C, cudaStream_t s) {
    void* scratch = nullptr;
    cudaCheck(cudaMallocAsync(&scratch, encoder_backward_scratch_bytes(B, T, C), s));
    encoder_backward(dwte, dwpe, scratch, dout, inp, B, T, C, s);
    cudaCheck(cudaFreeAsync(scratch, s));
}

#endif // LLMC_ENCODER_CUH
