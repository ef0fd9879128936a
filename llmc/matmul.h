/*
 Fully connected layer, weights stored (OC, C) row-major like torch.nn.Linear:
   out (B,T,OC) = inp (B,T,C) @ weight^T (C,OC) + bias (OC,)
 All three products go through cblas_sgemm, where the trainer spends most of its time.
 The (B,T) dimensions are flattened into one of BT rows.
*/
#ifndef LLMC_MATMUL_H
#define LLMC_MATMUL_H

#include <stddef.h>  // size_t for offsets that may pass 2^31
#include <cblas.h>   // cblas_sgemm (OpenBLAS)

// columns of dbias owned by one thread in the backward pass
#define MATMUL_CBLOCK 64

// out (B,T,OC) = inp (B,T,C) @ weight^T + bias; bias (OC,) may be NULL
static inline void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                                  int B, int T, int C, int OC) {
    int BT = B * T;
    float beta = 0.0f;
    if (bias != NULL) {
        // preload every row of out with the bias, then let sgemm add the product (beta = 1)
        #pragma omp parallel for
        for (int i = 0; i < BT; i++) {
            float* out_i = out + (size_t)i * OC;
            for (int o = 0; o < OC; o++) { out_i[o] = bias[o]; }
        }
        beta = 1.0f;
    }
    // (BT,OC) = (BT,C) @ (OC,C)^T
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, BT, OC, C,
                1.0f, inp, C, weight, C, beta, out, OC);
}

// given dout (B,T,OC), accumulate:
//   dinp (B,T,C)  += dout @ weight          (skipped when dinp is NULL, e.g. for the first layer's input)
//   dweight (OC,C) += dout^T @ inp
//   dbias (OC,)   += sum over (B,T) of dout (skipped when dbias is NULL)
static inline void matmul_backward(float* dinp, float* dweight, float* dbias,
                                   const float* dout, const float* inp, const float* weight,
                                   int B, int T, int C, int OC) {
    int BT = B * T;
    if (dinp != NULL) {
        // (BT,C) += (BT,OC) @ (OC,C)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, BT, C, OC,
                    1.0f, dout, OC, weight, C, 1.0f, dinp, C);
    }
    // (OC,C) += (BT,OC)^T @ (BT,C)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, BT,
                1.0f, dout, OC, inp, C, 1.0f, dweight, C);
    if (dbias != NULL) {
        // column sums: threads split the columns and walk the rows in order (deterministic)
        int nblocks = (OC + MATMUL_CBLOCK - 1) / MATMUL_CBLOCK;
        #pragma omp parallel for
        for (int blk = 0; blk < nblocks; blk++) {
            int o0 = blk * MATMUL_CBLOCK;
            int o1 = o0 + MATMUL_CBLOCK < OC ? o0 + MATMUL_CBLOCK : OC;
            for (int i = 0; i < BT; i++) {
                const float* dout_i = dout + (size_t)i * OC;
                for (int o = o0; o < o1; o++) { dbias[o] += dout_i[o]; }
            }
        }
    }
}

#endif // LLMC_MATMUL_H
