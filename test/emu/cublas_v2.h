/*
 cublas_v2.h on the CPU (see cuda_runtime.h here): the handle and cublasGemmStridedBatchedEx
 as the attention's cuBLAS path calls it, queued on the handle's stream with the ranges it
 reads and writes declared to the race checker, fp32 or bf16 operands, fp32 products (OpenBLAS's
 sgemm on fp32 copies), in cuBLAS's column-major convention: C = alpha op(A) op(B) + beta C for each of `batch`
 matrices, op(X) = X or its transpose, element (i, j) of an ld-leading matrix at i + j*ld.
*/
#ifndef EMU_CUBLAS_V2_H
#define EMU_CUBLAS_V2_H

#include <vector>           // fp32 copies of bf16 operands
#include <cblas.h>          // cblas_sgemm: the products themselves (OpenBLAS)
#include "cuda_runtime.h"   // cudaStream_t
#include "cuda_bf16.h"      // __nv_bfloat16

typedef enum { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_INVALID_VALUE = 7, CUBLAS_STATUS_NOT_SUPPORTED = 15 } cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUDA_R_32F = 0, CUDA_R_16BF = 14 } cudaDataType;
typedef enum { CUBLAS_COMPUTE_32F = 68 } cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;
typedef struct EmuCublas { cudaStream_t stream; }* cublasHandle_t;

static inline cublasStatus_t cublasCreate(cublasHandle_t* h) { *h = new EmuCublas{NULL}; return CUBLAS_STATUS_SUCCESS; }
static inline cublasStatus_t cublasDestroy(cublasHandle_t h) { delete h; return CUBLAS_STATUS_SUCCESS; }
static inline cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) { h->stream = s; return CUBLAS_STATUS_SUCCESS; }

static inline float emu_cublas_load(const void* p, cudaDataType t, size_t i) {
    return t == CUDA_R_32F ? ((const float*)p)[i] : (float)((const __nv_bfloat16*)p)[i];
}

// the fp32 values of a column-major (rows, cols) operand with leading dimension ld: the
// matrix itself when it is fp32, else a widened copy in `copy`
static inline const float* emu_cublas_f32(const void* p, cudaDataType t, size_t rows, size_t cols, size_t ld,
                                          std::vector<float>& copy) {
    if (t == CUDA_R_32F) { return (const float*)p; }
    size_t n = cols == 0 ? 0 : (cols - 1) * ld + rows;
    copy.resize(n);
    for (size_t i = 0; i < n; i++) { copy[i] = (float)((const __nv_bfloat16*)p)[i]; }
    return copy.data();
}

// acc (m,n) column-major = op(A) op(B), fp32 products through OpenBLAS's sgemm
static inline void emu_cublas_product(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                      const void* A, cudaDataType at, int lda, const void* B, cudaDataType bt, int ldb,
                                      std::vector<float>& acc) {
    std::vector<float> ca, cb;
    const float* a = emu_cublas_f32(A, at, ta == CUBLAS_OP_N ? m : k, ta == CUBLAS_OP_N ? k : m, lda, ca);
    const float* b = emu_cublas_f32(B, bt, tb == CUBLAS_OP_N ? k : n, tb == CUBLAS_OP_N ? n : k, ldb, cb);
    acc.assign((size_t)m * n, 0.0f);
    if (m == 0 || n == 0 || k == 0) { return; }
    cblas_sgemm(CblasColMajor, ta == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, tb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
                m, n, k, 1.0f, a, lda, b, ldb, 0.0f, acc.data(), m);
}

// the bytes a column-major (rows, cols) operand with leading dimension ld spans, batch
// matrices `stride` elements apart
static inline size_t emu_cublas_span(size_t rows, size_t cols, size_t ld, long long stride, int batch, size_t es) {
    if (rows == 0 || cols == 0 || batch == 0) { return 0; }
    return ((size_t)(batch - 1) * (size_t)stride + (cols - 1) * ld + rows) * es;
}

// queued on the handle's stream; alpha and beta are read at the call (host pointer mode)
static inline cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                                        int m, int n, int k, const void* alpha,
                                                        const void* A, cudaDataType at, int lda, long long sa,
                                                        const void* B, cudaDataType bt, int ldb, long long sb,
                                                        const void* beta, void* C, cudaDataType ct, int ldc, long long sc,
                                                        int batch, cublasComputeType_t, cublasGemmAlgo_t,
                                                        const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    float al = *(const float*)alpha, be = *(const float*)beta;
    size_t es_a = at == CUDA_R_32F ? 4 : 2, es_b = bt == CUDA_R_32F ? 4 : 2, es_c = ct == CUDA_R_32F ? 4 : 2;
    std::vector<EmuAccess> acc = {
        emu_range(A, emu_cublas_span(ta == CUBLAS_OP_N ? m : k, ta == CUBLAS_OP_N ? k : m, lda, sa, batch, es_a), 0),
        emu_range(B, emu_cublas_span(tb == CUBLAS_OP_N ? k : n, tb == CUBLAS_OP_N ? n : k, ldb, sb, batch, es_b), 0),
        emu_range(C, emu_cublas_span(m, n, ldc, sc, batch, es_c), 1)};
    emu_stream_declared(h->stream, "cublasGemmStridedBatchedEx", acc, [=]() {
        std::vector<float> prod;
        for (int b = 0; b < batch; b++) {
            emu_cublas_product(ta, tb, m, n, k, (const char*)A + (size_t)b * sa * es_a, at, lda,
                               (const char*)B + (size_t)b * sb * es_b, bt, ldb, prod);
            for (int j = 0; j < n; j++) {
                for (int i = 0; i < m; i++) {
                    size_t ci = (size_t)b * sc + (size_t)i + (size_t)j * ldc;
                    float out = al * prod[(size_t)i + (size_t)j * m] + (be != 0.0f ? be * emu_cublas_load(C, ct, ci) : 0.0f);  // beta 0: C is not read
                    if (ct == CUDA_R_32F) { ((float*)C)[ci] = out; } else { ((__nv_bfloat16*)C)[ci] = __nv_bfloat16(out); }
                }
            }
        }
    }, file, line);
    return CUBLAS_STATUS_SUCCESS;
}

#endif // EMU_CUBLAS_V2_H
