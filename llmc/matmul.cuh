/*
 Fully connected layer on the GPU through cuBLASLt, weights stored (OC, C) row-major as
 in llmc/matmul.h (torch.nn.Linear):
   forward:  out (BT,OC) = inp (BT,C) @ weight^T (C,OC) + bias (OC,)   [optionally then GELU]
   backward: dinp (BT,C) (=|+=) dout (BT,OC) @ weight (OC,C)          [optionally * gelu'(pre_gelu)]
             dweight (OC,C) += dout^T (OC,BT) @ inp (BT,C)
             dbias (OC,)    += column sums of dout (deterministic: 16-byte row blocks, then a fixed tree; no atomics)
 Inputs and outputs are floatX (bf16, or fp32 with -DENABLE_FP32); every product
 accumulates in fp32 (CUBLAS_COMPUTE_32F: true fp32, no TF32, in the fp32 build).

 Layout. cuBLASLt is column-major. A row-major (R, K) matrix with leading dimension K is,
 byte for byte, the column-major (K, R) matrix with leading dimension K: its transpose.
 So every row-major product Y = X @ W is computed as the column-major Y^T = W^T @ X^T,
 where each ^T costs nothing (it is the same memory read the other way). The three
 products, written as column-major D (m,n) = op(A) (m,k) @ op(B) (k,n):
   forward  out^T (OC,BT)  = [weight: col-major (C,OC), op T] @ [inp:  col-major (C,BT), op N]
   dinp     dinp^T (C,BT)  = [weight: col-major (C,OC), op N] @ [dout: col-major (OC,BT), op N]
   dweight  dweight^T(C,OC)= [inp:    col-major (C,BT), op N] @ [dout: col-major (OC,BT), op T]
 In the forward, D's rows are the OC output features, so the epilogue's bias vector
 (one value per row of D) is exactly bias (OC,), broadcast over the BT columns.

 GELU. The forward can apply GELU after the product: out = gelu(inp @ weight^T + bias), the
 pre-activation written to pre_gelu (BT,OC) for the backward. cuBLASLt's GELU epilogue
 does not document its formula (the tanh or the erf form, evaluated how precisely), so:
 - bf16 (MATMUL_GELU_EPILOGUE 1): fused into the epilogue (CUBLASLT_EPILOGUE_GELU_AUX_BIAS,
   the pre-activation as its aux output), which saves a pass over (BT,OC). Another GELU
   than GPT-2's tanh form (the erf form is at most 1.8e-4 |x| away; a hardware tanh
   approximation ~2^-11 relative) stays inside the bf16 rounding (up to 2^-8 relative) of
   every activation that the bf16 tests' tolerances are made of.
 - fp32 (MATMUL_GELU_EPILOGUE 0): the BIAS epilogue writes the pre-activation to pre_gelu,
   then llmc/gelu.cuh's gelu_forward computes out = gelu(pre_gelu) with exactly the formula
   of llmc/gelu.h, the CPU trainer's gelu_forward: the fp32 build is the one tested within
   fp32 rounding of the CPU trainer and of PyTorch, which another GELU fails on its own (the
   erf form moves the test model's gradient norm 70 times PyTorch's tolerance). It is also
   the kernel -r 1 recomputes the GELU with, so -r 0 and -r 1 see the same bits. The price
   is one more pass over (BT,OC).
 test/emu/cublasLt.h's stand-in epilogue deliberately computes the erf form, so that the
 emulated tests cannot pass through the epilogue happening to equal llmc/gelu.h.
 In the backward, pre_gelu != NULL means "the input of this matmul was gelu(pre_gelu)", so
 dinp = (dout @ weight) * gelu'(pre_gelu). By default that is a separate elementwise kernel
 (llmc/gelu.cuh's gelu_backward_inplace) with exactly the formula of llmc/gelu.h in both
 builds, for the same reason: the epilogue's GELU derivative is not documented precisely,
 and a separate kernel can be checked against the CPU. The price is one extra pass over
 dinp (read, pre_gelu read, written: 3 x BT x C elements) and, in bf16, one extra rounding
 (dinp is rounded to bf16 before the multiply). gelu_fusion 2 (llm.c's -ge 2, the bf16
 build only) moves it into the DGELU epilogue instead, the derivative of the forward's
 epilogue GELU applied to the fp32 product before its one rounding: no pass, and the same
 GELU forward and backward, at the price of a formula no test here can pin down.

 Alignment. cuBLASLt's heuristic assumes every matrix 256-byte aligned unless the
 preference says otherwise (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_{A,B,C,D}_BYTES, default
 256), and an algorithm chosen under that assumption may fail or misread a matrix that is
 less aligned. The ZeRO engines hand out tensors inside unit buffers, at their offsets
 in the unit (e.g. a block's qkv weight after its two layernorm vectors, 4C bytes in at
 bf16: 128 bytes past a 256-byte boundary at C = 96), so each call tells the heuristic the
 alignment its pointers really have: the largest power of two dividing the address, at
 most 256. The algorithm it picks, and with it the order of the sums and the bits of the
 result, depends on those alignments: every unit starts on 256 bytes in every buffer of
 both engines at every stage (zero3/plan.h), so a tensor's alignment is its offset's in
 the unit, the same at every stage, and a run at stage 3 computes the products of a run
 at stage 0 bit for bit (test/emu/cublasLt.h's algorithms sum in orders of their own, so
 the emulated tests see it).

 Algorithm cache. The heuristic is a search on the host, and a step makes the same few
 products over and over (per layer shape, direction and alignment). Its answer depends only on the description of the problem: shapes,
 transposes, leading dimensions, epilogue, whether C is read (beta != 0), the four
 alignments and the workspace, so it is kept in a small table keyed by exactly those
 (matmul_algo_lookup). Descriptors are still created per call (a few microseconds).

 Tuning (--matmul-tune N, off by default). The heuristic's first answer is a guess from a
 model of the GPU; with tuning on, each new key asks it for up to N candidates and times
 each (a warm-up and MATMUL_TUNE_RUNS runs, CUDA events, the host waiting) before the call
 keeps the fastest: a product that overwrites D (beta 0) is timed on D itself, each run
 writing the same D, and the call then runs the choice once more; one that accumulates is
 timed on a scratch D when D and no aux output fits MATMUL_TUNE_SCRATCH_BYTES (the real D
 must be added to once), else keeps the first. The choice comes from timings, so two runs
 may choose differently and differ in their bits: runs that must repeat each other's bits
 (the stage comparisons) keep tuning off. The ranks agree on rank 0's choices after the
 first step (matmul_algo_table, matmul_algo_adopt): the trainer broadcasts its table.
*/
#ifndef LLMC_MATMUL_CUH
#define LLMC_MATMUL_CUH

#include <stdint.h>         // uintptr_t for alignments, int64_t and uint32_t for cuBLASLt attributes
#include <stdio.h>          // fprintf for the error messages
#include <stdlib.h>         // exit
#include <string.h>         // memcmp, memset: the algorithm cache's keys
#include <cublasLt.h>       // cublasLtMatmul and its descriptors
#include "llmc/cuda_common.cuh"  // floatX, cudaCheck, cublasCheck, to_float/from_float, CEIL_DIV, xpack, partials_add
#include "llmc/gelu.cuh"         // gelu_forward (the fp32 build's GELU after the product), gelu_backward_inplace

// cuBLASLt workspace: 32 MiB is what NVIDIA recommends for Hopper (some kernels, e.g. with
// split-K, need it; with less the heuristic just picks other kernels)
#define CUBLASLT_WORKSPACE_BYTES ((size_t)32 << 20)

// cuBLASLt's name for floatX
#if defined(ENABLE_FP32)
#define CUBLASLT_FLOATX CUDA_R_32F
#else
#define CUBLASLT_FLOATX CUDA_R_16BF
#endif

// dbias reduction: the BT rows are cut into row blocks (at most this many, and rows of at
// least MATMUL_DBIAS_MIN_ROWS each: their count depends on BT alone, whatever the GPU),
// each summed by thread blocks into dbias_scratch, then the row blocks' sums are added per
// column by a fixed tree (partials_add). The result depends only on (BT, OC), never on
// scheduling or the GPU: deterministic.
#define MATMUL_DBIAS_ROW_BLOCKS 128
#define MATMUL_DBIAS_MIN_ROWS 64
// size in floats of the dbias_scratch buffer that matmul_backward needs for a given OC
#define MATMUL_DBIAS_SCRATCH_FLOATS(OC) ((size_t)MATMUL_DBIAS_ROW_BLOCKS * (size_t)(OC))
// threads of a dbias block: 32 packs of columns (one warp wide: 512 contiguous bytes of a
// row at 16 bytes a lane) x 8 rows
#define MATMUL_DBIAS_TX 32
#define MATMUL_DBIAS_TY 8

// the forward's GELU: cuBLASLt's epilogue (bf16), or the BIAS epilogue and then
// llmc/gelu.cuh's kernel with llmc/gelu.h's formula (fp32); see GELU above
#if defined(ENABLE_FP32)
#define MATMUL_GELU_EPILOGUE 0
#else
#define MATMUL_GELU_EPILOGUE 1
#endif

// --matmul-tune: at most this many candidates a key, each timed over this many runs after a
// warm-up; a product that accumulates is timed on a scratch D of at most this many bytes
#define MATMUL_TUNE_MAX 8
#define MATMUL_TUNE_RUNS 3
#define MATMUL_TUNE_SCRATCH_BYTES ((size_t)128 << 20)  // (d12's classifier dweight, 77 MB, fits)

// the algorithm cache: slots, and how far a key's search goes from its hash slot
#define MATMUL_ALGO_CACHE_SLOTS 256
#define MATMUL_ALGO_CACHE_PROBES 8

// ----------------------------------------------------------------------------
// the algorithm cache

// what the heuristic's answer depends on (every field a whole int64, so that keys compare
// and hash as plain memory, without padding)
typedef struct {
    int64_t m, n, k, trans_a, trans_b, lda, ldb, ldd, ldaux;
    int64_t epilogue, beta_zero;
    int64_t align_a, align_b, align_c, align_d;   // bytes, powers of two up to 256
    int64_t workspace_bytes;
} MatmulAlgoKey;

typedef struct {
    int used;
    MatmulAlgoKey key;
    cublasLtMatmulAlgo_t algo;
} MatmulAlgoSlot;

// One table per process, filled by the host thread that issues the matmuls (the trainer
// has one; the table is not locked). Cleared with the handle (cublaslt_init, cublaslt_free):
// an algorithm belongs to the library and device it was chosen on.
static MatmulAlgoSlot matmul_algo_cache[MATMUL_ALGO_CACHE_SLOTS];
// lookups and heuristic calls so far (the tests read them)
static long matmul_algo_lookups = 0;
static long matmul_heuristic_calls = 0;
// tuning so far: keys timed, of them those whose fastest was not the heuristic's first,
// and the milliseconds spent timing (the trainer prints them)
static long matmul_tuned_keys = 0;
static long matmul_tune_changed = 0;
static double matmul_tune_ms = 0.0;

static inline void matmul_algo_cache_clear(void) { memset(matmul_algo_cache, 0, sizeof(matmul_algo_cache)); }

// the largest power of two dividing p's address, at most 256: the alignment cuBLASLt may assume
static inline int64_t matmul_alignment(const void* p) {
    uintptr_t a = (uintptr_t)p;
    int64_t align = 256;
    while (align > 1 && (a & (uintptr_t)(align - 1)) != 0) { align >>= 1; }
    return align;
}

// FNV-1a over the key's bytes
static inline size_t matmul_algo_hash(const MatmulAlgoKey* key) {
    const unsigned char* b = (const unsigned char*)key;
    uint64_t h = 14695981039346656037ULL;
    for (size_t i = 0; i < sizeof(*key); i++) { h = (h ^ b[i]) * 1099511628211ULL; }
    return (size_t)(h % MATMUL_ALGO_CACHE_SLOTS);
}

// The slot of `key`: its own (hit: *hit = 1), else a free one within the probe distance,
// else the hash slot, whose key is evicted (*hit = 0: the caller fills the slot).
static inline MatmulAlgoSlot* matmul_algo_lookup(const MatmulAlgoKey* key, int* hit) {
    matmul_algo_lookups++;
    size_t h = matmul_algo_hash(key);
    MatmulAlgoSlot* free_slot = NULL;
    for (int p = 0; p < MATMUL_ALGO_CACHE_PROBES; p++) {
        MatmulAlgoSlot* slot = &matmul_algo_cache[(h + p) % MATMUL_ALGO_CACHE_SLOTS];
        if (slot->used && memcmp(&slot->key, key, sizeof(*key)) == 0) { *hit = 1; return slot; }
        if (!slot->used && free_slot == NULL) { free_slot = slot; }
    }
    *hit = 0;
    return free_slot != NULL ? free_slot : &matmul_algo_cache[h];
}

// The table of chosen algorithms as bytes, for the ranks to agree on one rank's choices
// (an algorithm is plain data, valid in every process on the same GPU and library)
static inline void* matmul_algo_table(void) { return matmul_algo_cache; }
static inline size_t matmul_algo_table_bytes(void) { return sizeof(matmul_algo_cache); }

// takes another process's table (matmul_algo_table's bytes): each of its keys gets its
// algorithm here, ours replaced where we had chosen another; returns how many changed
static inline int matmul_algo_adopt(const void* table) {
    const MatmulAlgoSlot* other = (const MatmulAlgoSlot*)table;
    int changed = 0;
    for (int i = 0; i < MATMUL_ALGO_CACHE_SLOTS; i++) {
        if (!other[i].used) { continue; }
        int hit = 0;
        MatmulAlgoSlot* slot = matmul_algo_lookup(&other[i].key, &hit);
        changed += !hit || memcmp(&slot->algo, &other[i].algo, sizeof(slot->algo)) != 0;
        *slot = other[i];
    }
    return changed;
}

// ----------------------------------------------------------------------------
// handle and workspace

// What every cuBLASLt product needs besides its operands, passed as one: the handle, its
// workspace and the stream the product (and the kernels around it) is queued on.
typedef struct {
    cublasLtHandle_t lt;
    void* workspace;
    size_t workspace_bytes;   // CUBLASLT_WORKSPACE_BYTES
    cudaStream_t stream;
    int tune;                 // candidates timed a new key (--matmul-tune); 0 or 1: the heuristic's first
    void* tune_scratch;       // MATMUL_TUNE_SCRATCH_BYTES while tuning, else NULL
} MatmulCtx;

// creates the cuBLASLt handle and its workspace, for work on stream s
static inline void cublaslt_init(MatmulCtx* ctx, cudaStream_t s) {
    cublasCheck(cublasLtCreate(&ctx->lt));
    matmul_algo_cache_clear();
    ctx->workspace_bytes = CUBLASLT_WORKSPACE_BYTES;
    cudaCheck(cudaMalloc(&ctx->workspace, ctx->workspace_bytes));
    ctx->stream = s;
    ctx->tune = 0;
    ctx->tune_scratch = NULL;
}

// tuning on (candidates > 1, at most MATMUL_TUNE_MAX) with the scratch it times accumulating
// products on (MATMUL_TUNE_SCRATCH_BYTES of the GPU's memory), or off (candidates <= 1) and the
// scratch freed; returns the scratch's bytes held now
static inline size_t cublaslt_tune(MatmulCtx* ctx, int candidates) {
    ctx->tune = candidates > MATMUL_TUNE_MAX ? MATMUL_TUNE_MAX : candidates;
    if (ctx->tune > 1 && ctx->tune_scratch == NULL) { cudaCheck(cudaMalloc(&ctx->tune_scratch, MATMUL_TUNE_SCRATCH_BYTES)); }
    if (ctx->tune <= 1 && ctx->tune_scratch != NULL) {
        cudaCheck(cudaFree(ctx->tune_scratch));
        ctx->tune_scratch = NULL;
    }
    return ctx->tune_scratch != NULL ? MATMUL_TUNE_SCRATCH_BYTES : 0;
}

static inline void cublaslt_free(MatmulCtx* ctx) {
    matmul_algo_cache_clear();
    if (ctx->tune_scratch != NULL) { cudaCheck(cudaFree(ctx->tune_scratch)); }
    cudaCheck(cudaFree(ctx->workspace));
    cublasCheck(cublasLtDestroy(ctx->lt));
}

// ----------------------------------------------------------------------------
// kernels

// the row blocks of dbias for BT rows (from BT alone: determinism)
static inline int matmul_dbias_row_blocks(int BT) {
    int n = CEIL_DIV(BT, MATMUL_DBIAS_MIN_ROWS);
    return n < 1 ? 1 : n > MATMUL_DBIAS_ROW_BLOCKS ? MATMUL_DBIAS_ROW_BLOCKS : n;
}

// pass 1 of dbias. grid (CEIL_DIV(OC, 32 * X128), row blocks), block (32, 8). partial
// (row blocks, OC) [blockIdx.y, o] = sum of dout (BT,OC) [r, o] over the rows r of row block
// blockIdx.y. Thread (tx, ty) loads a pack of X128 columns (16 bytes: matmul_backward's
// checks hold dout 16-byte aligned and OC a multiple of 16 bytes) of rows ty, ty + 8, ...
// and adds them in order; then the 8 thread rows are added in order through shared memory,
// a thread a column.
__global__ void matmul_dbias_partial_kernel(float* partial, const floatX* dout, int BT, int OC) {
    const int P = X128;
    __shared__ float sums[MATMUL_DBIAS_TY][MATMUL_DBIAS_TX * P];
    int tx = threadIdx.x, ty = threadIdx.y;
    int o0 = blockIdx.x * MATMUL_DBIAS_TX * P;  // the block's first column
    int rows_per_block = CEIL_DIV(BT, (int)gridDim.y);
    int r0 = blockIdx.y * rows_per_block;
    int r1 = min(BT, r0 + rows_per_block);
    float acc[P];
#pragma unroll
    for (int j = 0; j < P; j++) { acc[j] = 0.0f; }
    if (o0 + tx * P < OC) {
        for (int r = r0 + ty; r < r1; r += MATMUL_DBIAS_TY) {
            xpack<P> v = load_pack<P>(dout + (size_t)r * OC + o0 + tx * P);
#pragma unroll
            for (int j = 0; j < P; j++) { acc[j] += to_float(v.v[j]); }
        }
    }
#pragma unroll
    for (int j = 0; j < P; j++) { sums[ty][tx * P + j] = acc[j]; }
    __syncthreads();
    for (int q = ty * MATMUL_DBIAS_TX + tx; q < MATMUL_DBIAS_TX * P; q += MATMUL_DBIAS_TX * MATMUL_DBIAS_TY) {
        if (o0 + q < OC) {  // column o0 + q: its 8 thread rows in order
            float total = 0.0f;
            for (int y = 0; y < MATMUL_DBIAS_TY; y++) { total += sums[y][q]; }
            partial[(size_t)blockIdx.y * OC + o0 + q] = total;
        }
    }
}

// ----------------------------------------------------------------------------
// checks: cuBLASLt wants 16-byte aligned pointers and leading dimensions that are a multiple
// of 16 bytes for its fast (tensor core) kernels; rather than silently falling back or
// failing in the heuristic with a bare status code, say what is wrong

static inline void matmul_check_aligned(const void* p, const char* what, const char* fn) {
    if (((uintptr_t)p & 15u) != 0) {
        fprintf(stderr, "error: %s: %s = %p is not 16-byte aligned (cuBLASLt needs 16 bytes)\n", fn, what, p);
        exit(EXIT_FAILURE);
    }
}

static inline void matmul_check_ld(int ld, const char* what, const char* fn) {
    if (ld <= 0 || ((size_t)ld * sizeof(floatX)) % 16 != 0) {
        fprintf(stderr, "error: %s: %s = %d: rows of %zu bytes are not a multiple of 16 bytes "
                        "(cuBLASLt alignment; pad the dimension to a multiple of %zu)\n",
                fn, what, ld, (size_t)ld * sizeof(floatX), 16 / sizeof(floatX));
        exit(EXIT_FAILURE);
    }
}

// ----------------------------------------------------------------------------
// tuning (--matmul-tune; see the top of the file)

// one product as matmul_cublaslt describes it, for its candidates' timing
typedef struct {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    const void *a, *b;
    void* d;
    float beta;
    int has_aux;          // an aux output (GELU_AUX): written by every run
    size_t d_bytes;       // D's extent, ldd x n elements
} MatmulTuneCall;

// The index of the fastest of the n candidates for the product, each run once to warm up and
// then MATMUL_TUNE_RUNS times between two events; a candidate the library refuses is never
// the fastest. Where the product cannot be run again without changing what it leaves (it
// accumulates, and D does not fit the scratch or it writes an aux output), 0.
static inline int matmul_tune_pick(const MatmulCtx* ctx, const MatmulTuneCall* c,
                                   const cublasLtMatmulHeuristicResult_t* cand, int n) {
    void* out = c->d;  // beta 0: D is written whole by every run, the call's last one the choice's
    if (c->beta != 0.0f) {
        if (c->has_aux || ctx->tune_scratch == NULL || c->d_bytes > MATMUL_TUNE_SCRATCH_BYTES) { return 0; }
        out = ctx->tune_scratch;  // (its content does not matter to the timing)
    }
    cudaEvent_t t0, t1;
    cudaCheck(cudaEventCreate(&t0));
    cudaCheck(cudaEventCreate(&t1));
    float alpha = 1.0f, best_ms = 0.0f, total_ms = 0.0f;
    int best = -1;
    for (int i = 0; i < n; i++) {
        int ok = 1;
        for (int r = 0; r <= MATMUL_TUNE_RUNS && ok; r++) {  // run 0 warms up
            if (r == 1) { cudaCheck(cudaEventRecord(t0, ctx->stream)); }
            ok = cublasLtMatmul(ctx->lt, c->desc, &alpha, c->a, c->la, c->b, c->lb, &c->beta, out, c->ld, out, c->ld,
                                &cand[i].algo, ctx->workspace, ctx->workspace_bytes, ctx->stream) == CUBLAS_STATUS_SUCCESS;
        }
        cudaCheck(cudaEventRecord(t1, ctx->stream));
        cudaCheck(cudaEventSynchronize(t1));
        float ms = 0.0f;
        if (ok) { cudaCheck(cudaEventElapsedTime(&ms, t0, t1)); }
        total_ms += ms;
        if (ok && (best < 0 || ms < best_ms)) { best = i; best_ms = ms; }
    }
    cudaCheck(cudaEventDestroy(t0));
    cudaCheck(cudaEventDestroy(t1));
    matmul_tuned_keys++;
    matmul_tune_changed += best > 0;
    matmul_tune_ms += total_ms;
    return best > 0 ? best : 0;
}

// ----------------------------------------------------------------------------
// one cuBLASLt call, column-major:
//   D (m,n) [ld ldd] = op(A) (m,k) [stored with ld lda] @ op(B) (k,n) [ld ldb] + beta * D
// with the given epilogue (bias: (m,) per row of D; aux: (m,n) [ld ldaux], written by
// GELU_AUX, read by DGELU).
// Descriptors are created and destroyed on each call: a few microseconds of CPU time,
// small next to the GEMMs of a GPT-2 layer. The algorithm comes from the cache, or from
// the heuristic told the pointers' real alignments (see the top of the file).
static inline void matmul_cublaslt(floatX* d, const floatX* a, const floatX* b, int m, int n, int k,
                                   int trans_a, int trans_b, int lda, int ldb, int ldd, float beta,
                                   cublasLtEpilogue_t epilogue, const floatX* bias, floatX* aux, int ldaux,
                                   const MatmulCtx* ctx, const char* fn) {
    cublasLtHandle_t lt = ctx->lt;
    size_t workspace_bytes = ctx->workspace_bytes;
    cublasLtMatmulDesc_t desc;
    cublasCheck(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));  // fp32 accumulate, fp32 alpha/beta
    cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    if (bias != NULL) {
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    }
    if (aux != NULL) {
        int64_t ld64 = ldaux;
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld64, sizeof(ld64)));
    }
    // layouts describe the matrices as stored, before op(): A is (k,m) when transposed
    cublasLtMatrixLayout_t la, lb, ld;
    cublasCheck(cublasLtMatrixLayoutCreate(&la, CUBLASLT_FLOATX, trans_a ? k : m, trans_a ? m : k, lda));
    cublasCheck(cublasLtMatrixLayoutCreate(&lb, CUBLASLT_FLOATX, trans_b ? n : k, trans_b ? k : n, ldb));
    cublasCheck(cublasLtMatrixLayoutCreate(&ld, CUBLASLT_FLOATX, m, n, ldd));

    // C = D: one pointer, one alignment for both
    MatmulAlgoKey key;
    memset(&key, 0, sizeof(key));
    key.m = m; key.n = n; key.k = k; key.trans_a = trans_a; key.trans_b = trans_b;
    key.lda = lda; key.ldb = ldb; key.ldd = ldd; key.ldaux = aux != NULL ? ldaux : 0;
    key.epilogue = (int64_t)epilogue; key.beta_zero = beta == 0.0f;
    key.align_a = matmul_alignment(a); key.align_b = matmul_alignment(b);
    key.align_c = matmul_alignment(d); key.align_d = matmul_alignment(d);
    key.workspace_bytes = (int64_t)workspace_bytes;
    int hit = 0;
    MatmulAlgoSlot* slot = matmul_algo_lookup(&key, &hit);
    if (!hit) {
        cublasLtMatmulPreference_t pref;
        cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
        uint64_t ws = workspace_bytes;
        cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
        const struct { cublasLtMatmulPreferenceAttributes_t attr; int64_t bytes; } aligns[4] = {
            { CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_a }, { CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_b },
            { CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c }, { CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_d },
        };
        for (int i = 0; i < 4; i++) {
            uint32_t bytes = (uint32_t)aligns[i].bytes;
            cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, aligns[i].attr, &bytes, sizeof(bytes)));
        }
        cublasLtMatmulHeuristicResult_t heur[MATMUL_TUNE_MAX];
        int found = 0;
        matmul_heuristic_calls++;
        cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld, pref, ctx->tune > 1 ? ctx->tune : 1, heur,
                                                           &found);
        cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
        if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
            fprintf(stderr, "error: %s: cuBLASLt found no algorithm (status %d) for m=%d n=%d k=%d trans_a=%d trans_b=%d "
                            "epilogue=%d alignments A %d B %d D %d bytes\n", fn, (int)st, m, n, k, trans_a, trans_b,
                    (int)epilogue, (int)key.align_a, (int)key.align_b, (int)key.align_d);
            exit(EXIT_FAILURE);
        }
        MatmulTuneCall call = {desc, la, lb, ld, a, b, d, beta, aux != NULL, (size_t)ldd * n * sizeof(floatX)};
        int pick = found > 1 ? matmul_tune_pick(ctx, &call, heur, found) : 0;
        slot->used = 1;
        slot->key = key;
        slot->algo = heur[pick].algo;
    }
    float alpha = 1.0f;
    // C = D: beta = 1 accumulates into D, beta = 0 overwrites it (C is then not read)
    cublasCheck(cublasLtMatmul(lt, desc, &alpha, a, la, b, lb, &beta, d, ld, d, ld,
                               &slot->algo, ctx->workspace, workspace_bytes, ctx->stream));
    cublasCheck(cublasLtMatrixLayoutDestroy(la));
    cublasCheck(cublasLtMatrixLayoutDestroy(lb));
    cublasCheck(cublasLtMatrixLayoutDestroy(ld));
    cublasCheck(cublasLtMatmulDescDestroy(desc));
}

// ----------------------------------------------------------------------------
// host launchers

// out (BT,OC) = inp (BT,C) @ weight^T (C,OC) + bias (OC,), overwritten; bias may be NULL.
// gelu_fusion != 0: out = gelu(...) and, when pre_gelu != NULL, pre_gelu (BT,OC) gets the
// pre-activation (what matmul_backward needs): in the epilogue in bf16, by llmc/gelu.cuh's
// kernel after the product in fp32 (see GELU at the top). C and OC must be multiples of 16
// bytes of floatX.
static inline void matmul_forward(floatX* out, const floatX* inp, const floatX* weight, const floatX* bias,
                                  int BT, int C, int OC, floatX* pre_gelu, int gelu_fusion, const MatmulCtx* ctx) {
    cudaStream_t s = ctx->stream;
    const char* fn = "matmul_forward";
    matmul_check_aligned(out, "out", fn);
    matmul_check_aligned(inp, "inp", fn);
    matmul_check_aligned(weight, "weight", fn);
    if (bias != NULL) { matmul_check_aligned(bias, "bias", fn); }
    matmul_check_ld(C, "C", fn);
    matmul_check_ld(OC, "OC", fn);
    cublasLtEpilogue_t epilogue = bias != NULL ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    floatX* aux = NULL;
    floatX* d = out;  // what the product and its epilogue write
    int gelu_kernel = gelu_fusion && !MATMUL_GELU_EPILOGUE;
    if (gelu_fusion && pre_gelu != NULL) { matmul_check_aligned(pre_gelu, "pre_gelu", fn); }
    if (gelu_kernel) {
        // fp32: the product + bias into pre_gelu (or into out, GELU then in place), GELU below
        if (pre_gelu != NULL) { d = pre_gelu; }
    } else if (gelu_fusion) {
        if (pre_gelu != NULL) {
            // cuBLASLt documents the GELU aux leading dimension as a multiple of 8 elements
            if (OC % 8 != 0) {
                fprintf(stderr, "error: %s: GELU fusion with pre_gelu needs OC %% 8 == 0 (got OC=%d)\n", fn, OC);
                exit(EXIT_FAILURE);
            }
            aux = pre_gelu;
            epilogue = bias != NULL ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
        } else {
            epilogue = bias != NULL ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
        }
    }
    // d^T (OC,BT) = weight (stored col-major (C,OC), op T) @ inp (stored col-major (C,BT), op N)
    matmul_cublaslt(d, weight, inp, OC, BT, C, 1, 0, C, C, OC, 0.0f,
                    epilogue, bias, aux, OC, ctx, fn);
    // out (BT,OC) = gelu(d), the formula of llmc/gelu.h (out may be d: elementwise)
    if (gelu_kernel) { gelu_forward(out, d, (size_t)BT * OC, s); }
}

// given dout (BT,OC):
//   dinp (BT,C)    = dout @ weight    (accumulate_dinp == 0: overwritten)
//                 += dout @ weight    (accumulate_dinp != 0)
//                  skipped when dinp is NULL (e.g. nothing upstream needs it);
//                  when pre_gelu (BT,C) != NULL the input was gelu(pre_gelu) and
//                  dinp = (dout @ weight) * gelu'(pre_gelu) (overwrite only: accumulate_dinp
//                  must be 0 then, as the fused GELU output has no other consumer): by
//                  llmc/gelu.cuh's kernel, or with gelu_fusion 2 in the bf16 build by the
//                  DGELU epilogue (see the top)
//   dweight (OC,C) += dout^T @ inp    (always accumulated, beta = 1, like llmc/matmul.h)
//   dbias (OC,)    += column sums of dout (skipped when dbias is NULL; otherwise
//                  dbias_scratch must hold MATMUL_DBIAS_SCRATCH_FLOATS(OC) floats)
// Everything is queued on stream s; dbias_scratch is in use until those kernels finish.
static inline void matmul_backward(floatX* dinp, floatX* dweight, floatX* dbias,
                                   const floatX* dout, const floatX* inp, const floatX* weight,
                                   float* dbias_scratch, int BT, int C, int OC,
                                   const floatX* pre_gelu, int accumulate_dinp, int gelu_fusion, const MatmulCtx* ctx) {
    cudaStream_t s = ctx->stream;
    const char* fn = "matmul_backward";
    matmul_check_aligned(dweight, "dweight", fn);
    matmul_check_aligned(dout, "dout", fn);
    matmul_check_aligned(inp, "inp", fn);
    matmul_check_aligned(weight, "weight", fn);
    matmul_check_ld(C, "C", fn);
    matmul_check_ld(OC, "OC", fn);
    if (dinp != NULL) {
        matmul_check_aligned(dinp, "dinp", fn);
        if (pre_gelu != NULL && accumulate_dinp) {
            fprintf(stderr, "error: %s: pre_gelu with accumulate_dinp is not supported "
                            "(the GELU derivative would scale the old dinp too)\n", fn);
            exit(EXIT_FAILURE);
        }
        // dinp^T (C,BT) = weight (stored col-major (C,OC), op N) @ dout (stored col-major (OC,BT), op N),
        // times gelu'(pre_gelu) in the epilogue (pre_gelu^T (C,BT), ld C, as the forward wrote it) or after
        int dgelu = pre_gelu != NULL && gelu_fusion >= 2 && MATMUL_GELU_EPILOGUE;
        if (dgelu) { matmul_check_aligned(pre_gelu, "pre_gelu", fn); }
        matmul_cublaslt(dinp, weight, dout, C, BT, OC, 0, 0, C, OC, C, accumulate_dinp ? 1.0f : 0.0f,
                        dgelu ? CUBLASLT_EPILOGUE_DGELU : CUBLASLT_EPILOGUE_DEFAULT, NULL, dgelu ? (floatX*)pre_gelu : NULL,
                        dgelu ? C : 0, ctx, fn);
        if (pre_gelu != NULL && !dgelu) { gelu_backward_inplace(dinp, pre_gelu, (size_t)BT * C, s); }
    }
    // dweight^T (C,OC) += inp (stored col-major (C,BT), op N) @ dout (stored col-major (OC,BT), op T)
    matmul_cublaslt(dweight, inp, dout, C, OC, BT, 0, 1, C, OC, C, 1.0f,
                    CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL, 0, ctx, fn);
    if (dbias != NULL) {
        if (dbias_scratch == NULL) {
            fprintf(stderr, "error: %s: dbias needs dbias_scratch (MATMUL_DBIAS_SCRATCH_FLOATS(OC) floats)\n", fn);
            exit(EXIT_FAILURE);
        }
        int nrb = matmul_dbias_row_blocks(BT);
        dim3 block(MATMUL_DBIAS_TX, MATMUL_DBIAS_TY);
        matmul_dbias_partial_kernel<<<dim3(CEIL_DIV(OC, MATMUL_DBIAS_TX * X128), nrb), block, 0, s>>>(dbias_scratch, dout, BT, OC);
        cudaCheck(cudaGetLastError());
        partials_add(dbias, NULL, dbias_scratch, nrb, OC, s);  // the row blocks added per column, in a fixed order
    }
}

#endif // LLMC_MATMUL_CUH
