/*
 cublasLt.h on the CPU (see cuda_runtime.h here): the descriptors and cublasLtMatmul as
 llmc/matmul.cuh uses them, with cuBLASLt's documented meaning, column-major:
   D (m,n) = epilogue(alpha op(A) op(B) + beta C),  C = D here
 op(X) = X or its transpose as TRANSA / TRANSB say, each matrix as its layout describes it
 (rows, columns, leading dimension: element (i, j) at i + j*ld); fp32 products (OpenBLAS's
 sgemm, through cublas_v2.h's emu_cublas_product);
 epilogues: BIAS adds bias[i] to row i; GELU applies a GELU (below); GELU_AUX also writes
 the value before GELU to the aux matrix (leading dimension AUX_LD); DGELU (the backward's,
 llm.c's -ge 2) multiplies the product by the GELU's derivative at the aux matrix's values,
 the erf form's, as the forward's. Outputs are rounded to their type once. The GPU's own
 kernels sum in another order: a test that passes here passes on the GPU only within its
 stated tolerances.
 The GELU epilogue's formula is not documented by cuBLASLt (the tanh or the erf form, and
 how precisely it is evaluated), so this stand-in deliberately does NOT use GPT-2's tanh formula of
 llmc/gelu.h: it uses the erf form, gelu(x) = x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)), which
 differs from the tanh form by up to 4.7e-4 absolute (at x = -2.70) and 1.8e-4 |x|. So a
 test that passes here only because the epilogue happens to equal the CPU's formula cannot
 pass: the fp32 build computes its GELU with its own kernel (llmc/matmul.cuh), and the
 bf16 build's tolerances must cover another GELU.
 Alignment, as documented: the preference's CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_{A,B,C,D}_BYTES
 (default 256) are what the heuristic may assume; the algorithm it returns carries them, and
 cublasLtMatmul refuses (CUBLAS_STATUS_NOT_SUPPORTED) a pointer less aligned than its
 algorithm assumes, where the real library may fail or misread. emu_lt_heuristic_calls
 counts the heuristic's calls (the tests read it).
 Algorithms sum in their own order, as the real ones do. cuBLASLt's heuristic picks its
 kernel from the problem and the alignments it may assume, and kernels of other tilings,
 vector widths or split-K sum the k products in other orders: the same data at other
 alignments gives other bits (each kernel deterministic). Here every distinct tuple of the
 four alignments is its own algorithm (id: their log2s, the digits of a number in base 9;
 a NULL algorithm is the 256-byte one), which splits the k dimension at a point of its
 own, k1 = 1 + hash(id) mod (k - 1), and adds the two fp32 partial products (op(A)'s
 columns [0, k1) times op(B)'s rows [0, k1), then [k1, k)): stricter than any real
 library (which might pick one kernel for 64 and 256 bytes), so that a run which hands
 cuBLASLt a tensor at another alignment than another run shows it in its bits, while one
 algorithm gives the same bits at every call. test_emu checks both.
 Several candidates (llmc/matmul.cuh's tuning): asked for more than one, the heuristic
 returns EMU_LT_CANDIDATES algorithms of its own, ids base + j 9^4 for j = 1, 2, 3 (base the
 alignments' id), each summing in its own order; the first and the third sleep
 EMU_LT_SLOW_MS a call on the stream, so that a tuner which times them must keep the second
 (the real library's first answer is only a guess too).
*/
#ifndef EMU_CUBLASLT_H
#define EMU_CUBLASLT_H

#include <stdint.h>         // int64_t, uint32_t, uintptr_t
#include <math.h>           // erff
#include <string.h>         // memcpy
#include <chrono>           // the slow candidates' sleep
#include <thread>           // std::this_thread::sleep_for
#include "cublas_v2.h"      // cublasStatus_t, cublasOperation_t, cudaDataType, cublasComputeType_t

// (cuBLASLt's values, as every enumerator here: test/emu/test_headers.sh compares them)
typedef enum {
    CUBLASLT_EPILOGUE_DEFAULT = 1, CUBLASLT_EPILOGUE_BIAS = 4, CUBLASLT_EPILOGUE_GELU = 32,
    CUBLASLT_EPILOGUE_GELU_AUX = 160, CUBLASLT_EPILOGUE_GELU_BIAS = 36, CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 164,
    CUBLASLT_EPILOGUE_DGELU = 192
} cublasLtEpilogue_t;
typedef enum {
    CUBLASLT_MATMUL_DESC_TRANSA = 3, CUBLASLT_MATMUL_DESC_TRANSB = 4, CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
    CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12
} cublasLtMatmulDescAttributes_t;
typedef enum {  // cuBLASLt's values
    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8
} cublasLtMatmulPreferenceAttributes_t;

typedef struct EmuLt { int unused; }* cublasLtHandle_t;
typedef struct EmuLtDesc {
    cublasOperation_t ta, tb;
    cublasLtEpilogue_t epilogue;
    const void* bias;
    void* aux;
    int64_t aux_ld;
}* cublasLtMatmulDesc_t;
typedef struct EmuLtLayout { cudaDataType type; uint64_t rows, cols; int64_t ld; }* cublasLtMatrixLayout_t;
typedef struct EmuLtPref { uint64_t workspace; uint32_t min_align[4]; }* cublasLtMatmulPreference_t;  // A, B, C, D
typedef struct { int id; uint32_t min_align[4]; } cublasLtMatmulAlgo_t;  // the alignments it assumes
inline long emu_lt_heuristic_calls = 0;
typedef struct { cublasLtMatmulAlgo_t algo; size_t workspaceSize; cublasStatus_t state; float wavesCount; } cublasLtMatmulHeuristicResult_t;

static inline cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) { *h = new EmuLt(); return CUBLAS_STATUS_SUCCESS; }
static inline cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) { delete h; return CUBLAS_STATUS_SUCCESS; }
static inline cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t, cudaDataType) {
    *d = new EmuLtDesc{CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL, 0};
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) { delete d; return CUBLAS_STATUS_SUCCESS; }
static inline cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a,
                                                            const void* buf, size_t size) {
    switch (a) {
    case CUBLASLT_MATMUL_DESC_TRANSA: if (size != sizeof(d->ta)) { break; } memcpy(&d->ta, buf, size); return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_TRANSB: if (size != sizeof(d->tb)) { break; } memcpy(&d->tb, buf, size); return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: if (size != sizeof(d->epilogue)) { break; } memcpy(&d->epilogue, buf, size); return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: if (size != sizeof(void*)) { break; } memcpy(&d->bias, buf, size); return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: if (size != sizeof(void*)) { break; } memcpy(&d->aux, buf, size); return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: if (size != sizeof(int64_t)) { break; } memcpy(&d->aux_ld, buf, size); return CUBLAS_STATUS_SUCCESS;
    }
    return CUBLAS_STATUS_INVALID_VALUE;
}
static inline cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType t, uint64_t rows, uint64_t cols, int64_t ld) {
    if (ld < (int64_t)rows) { return CUBLAS_STATUS_INVALID_VALUE; }  // column-major: ld >= rows
    *l = new EmuLtLayout{t, rows, cols, ld};
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) { delete l; return CUBLAS_STATUS_SUCCESS; }
static inline cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
    *p = new EmuLtPref{0, {256, 256, 256, 256}};  // the documented defaults: no workspace, 256-byte alignment
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) { delete p; return CUBLAS_STATUS_SUCCESS; }
static inline cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a,
                                                                  const void* buf, size_t size) {
    switch (a) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
        if (size != sizeof(uint64_t)) { break; }
        memcpy(&p->workspace, buf, size);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: {
        uint32_t v;
        if (size != sizeof(uint32_t)) { break; }
        memcpy(&v, buf, size);
        if (v == 0 || (v & (v - 1)) != 0) { break; }  // a power of two
        p->min_align[a - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES] = v;
        return CUBLAS_STATUS_SUCCESS;
    }
    }
    return CUBLAS_STATUS_INVALID_VALUE;
}
// the algorithm of the four alignments (bytes, powers of two): log2 of each, capped at 8
// (256 bytes), the digits of a number in base 9
static inline int emu_lt_algo_id(const uint32_t align[4]) {
    int id = 0;
    for (int i = 0; i < 4; i++) {
        int lg = 0;
        while (lg < 8 && (align[i] >> (lg + 1)) != 0) { lg++; }
        id = id * 9 + lg;
    }
    return id;
}

// where algorithm `id` splits a product's k dimension: 1..k-1 (0: no split, k < 2), a
// hash of the id (splitmix64's finaliser), so that near alignments split far apart
static inline uint64_t emu_lt_split(int id, uint64_t k) {
    if (k < 2) { return 0; }
    uint64_t h = ((uint64_t)id + 1) * 0x9E3779B97F4A7C15ull;
    h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;
    h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
    h ^= h >> 31;
    return 1 + h % (k - 1);
}

// prod (m,n) column-major = op(A) op(B) in algorithm id's order: the fp32 products over
// k's [0, k1) and [k1, k), added (each through emu_cublas_product, OpenBLAS's sgemm)
static inline void emu_lt_product(int id, cublasOperation_t ta, cublasOperation_t tb, uint64_t m, uint64_t n, uint64_t k,
                                  const void* A, cudaDataType at, int64_t lda, const void* B, cudaDataType bt, int64_t ldb,
                                  std::vector<float>& prod) {
    uint64_t k1 = emu_lt_split(id, k);
    emu_cublas_product(ta, tb, (int)m, (int)n, (int)(k1 == 0 ? k : k1), A, at, (int)lda, B, bt, (int)ldb, prod);
    if (k1 == 0) { return; }
    // op(A)'s columns from k1: A's columns (not transposed) or rows (transposed); op(B)'s
    // rows from k1: B's rows or columns
    size_t ea = at == CUDA_R_32F ? 4 : 2, eb = bt == CUDA_R_32F ? 4 : 2;
    const char* a2 = (const char*)A + (ta == CUBLAS_OP_N ? k1 * (uint64_t)lda : k1) * ea;
    const char* b2 = (const char*)B + (tb == CUBLAS_OP_N ? k1 : k1 * (uint64_t)ldb) * eb;
    std::vector<float> rest;
    emu_cublas_product(ta, tb, (int)m, (int)n, (int)(k - k1), a2, at, (int)lda, b2, bt, (int)ldb, rest);
    for (size_t i = 0; i < prod.size(); i++) { prod[i] += rest[i]; }
}

// asked for several: this many candidates, ids apart by 9^4 (past every alignments' id); the
// first and third slow by this many milliseconds a call
#define EMU_LT_CANDIDATES 3
#define EMU_LT_CANDIDATE_STRIDE 6561
#define EMU_LT_SLOW_MS 30

// the algorithm of the preference's alignments (it assumes them, and sums in its order); asked
// for several, EMU_LT_CANDIDATES of their own (see the top)
static inline cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t,
                                                            cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                                            cublasLtMatmulPreference_t pref, int requested,
                                                            cublasLtMatmulHeuristicResult_t* out, int* found) {
    emu_lt_heuristic_calls++;
    if (requested < 1) { return CUBLAS_STATUS_INVALID_VALUE; }
    int n = requested == 1 ? 1 : requested < EMU_LT_CANDIDATES ? requested : EMU_LT_CANDIDATES;
    for (int i = 0; i < n; i++) {
        memset(&out[i], 0, sizeof(out[i]));
        memcpy(out[i].algo.min_align, pref->min_align, sizeof(pref->min_align));
        out[i].algo.id = emu_lt_algo_id(pref->min_align) + (n == 1 ? 0 : (i + 1) * EMU_LT_CANDIDATE_STRIDE);
    }
    *found = n;
    return CUBLAS_STATUS_SUCCESS;
}

static inline void emu_lt_store(void* p, cudaDataType t, size_t i, float v) {
    if (t == CUDA_R_32F) { ((float*)p)[i] = v; } else { ((__nv_bfloat16*)p)[i] = __nv_bfloat16(v); }
}

static inline cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t d, const void* alpha,
                                            const void* A, cublasLtMatrixLayout_t la, const void* B, cublasLtMatrixLayout_t lb,
                                            const void* beta, const void* C, cublasLtMatrixLayout_t lc,
                                            void* D, cublasLtMatrixLayout_t ld, const cublasLtMatmulAlgo_t* algo,
                                            void*, size_t, cudaStream_t stream,
                                            const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    // every matrix at least as aligned as the algorithm assumes (no algorithm: the
    // library's own heuristic, which assumes the default 256 bytes)
    const void* mats[4] = {A, B, C, D};
    for (int i = 0; i < 4; i++) {
        uint32_t need = algo != NULL ? algo->min_align[i] : 256;
        if (need == 0 || (uintptr_t)mats[i] % need != 0) { return CUBLAS_STATUS_NOT_SUPPORTED; }
    }
    uint64_t m = ld->rows, n = ld->cols;
    uint64_t k = d->ta == CUBLAS_OP_N ? la->cols : la->rows;
    // the shapes must agree, as cuBLASLt checks them
    if ((d->ta == CUBLAS_OP_N ? la->rows : la->cols) != m || (d->tb == CUBLAS_OP_N ? lb->rows : lb->cols) != k ||
        (d->tb == CUBLAS_OP_N ? lb->cols : lb->rows) != n || lc->rows != m || lc->cols != n) {
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    int e = d->epilogue;
    int has_bias = e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    int gelu = e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX ||
               e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    int has_aux = e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    int dgelu = e == CUBLASLT_EPILOGUE_DGELU;  // D = product * gelu'(aux): the aux read, the erf form's derivative
    if ((has_bias && d->bias == NULL) || ((has_aux || dgelu) && (d->aux == NULL || d->aux_ld < (int64_t)m))) {
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    // queued on the stream with what it reads and writes; the descriptors are copied (the
    // caller may destroy them at once), alpha and beta read now (host pointer mode)
    float al = *(const float*)alpha, be = *(const float*)beta;
    static const uint32_t default_align[4] = {256, 256, 256, 256};
    int algo_id = algo != NULL ? algo->id : emu_lt_algo_id(default_align);
    EmuLtDesc dd = *d;
    EmuLtLayout a_l = *la, b_l = *lb, c_l = *lc, d_l = *ld;
    auto span = [](const EmuLtLayout& l) { return l.cols == 0 ? 0 : ((l.cols - 1) * (uint64_t)l.ld + l.rows) * (l.type == CUDA_R_32F ? 4 : 2); };
    std::vector<EmuAccess> acc = {emu_range(A, span(a_l), 0), emu_range(B, span(b_l), 0), emu_range(D, span(d_l), 1)};
    if (be != 0.0f) { acc.push_back(emu_range(C, span(c_l), 0)); }
    if (has_bias) { acc.push_back(emu_range(d->bias, m * (ld->type == CUDA_R_32F ? 4 : 2), 0)); }
    if (has_aux || dgelu) {
        acc.push_back(emu_range(d->aux, ((n - 1) * (uint64_t)d->aux_ld + m) * (ld->type == CUDA_R_32F ? 4 : 2), has_aux));
    }
    emu_stream_declared(stream, "cublasLtMatmul", acc, [=]() {
        int j = algo_id / EMU_LT_CANDIDATE_STRIDE;
        if (j == 1 || j == 3) { std::this_thread::sleep_for(std::chrono::milliseconds(EMU_LT_SLOW_MS)); }
        std::vector<float> prod;
        emu_lt_product(algo_id, dd.ta, dd.tb, m, n, k, A, a_l.type, a_l.ld, B, b_l.type, b_l.ld, prod);
        for (uint64_t j = 0; j < n; j++) {
            for (uint64_t i = 0; i < m; i++) {
                float v = al * prod[i + j * m] + (be != 0.0f ? be * emu_cublas_load(C, c_l.type, i + j * (uint64_t)c_l.ld) : 0.0f);
                if (has_bias) { v += emu_cublas_load(dd.bias, d_l.type, i); }
                if (has_aux) { emu_lt_store(dd.aux, d_l.type, i + j * (uint64_t)dd.aux_ld, v); }
                if (gelu) { v = 0.5f * v * (1.0f + erff(v * 0.7071067811865476f)); }  // the erf form, see above
                if (dgelu) {  // d/dx x Phi(x) = Phi(x) + x phi(x)
                    float x = emu_cublas_load(dd.aux, d_l.type, i + j * (uint64_t)dd.aux_ld);
                    v *= 0.5f * (1.0f + erff(x * 0.7071067811865476f)) + x * 0.3989422804014327f * expf(-0.5f * x * x);
                }
                emu_lt_store(D, d_l.type, i + j * (uint64_t)d_l.ld, v);
            }
        }
    }, file, line);
    return CUBLAS_STATUS_SUCCESS;
}

#endif // EMU_CUBLASLT_H
