/*
 Causal multi-head self-attention.
 qkv (B,T,3C) holds q, k, v side by side along the last dimension; head h of each is the
 channel range [h*hs, (h+1)*hs), hs = C/NH. For one (b, h), Q, K, V are (T,hs) matrices
 whose rows are 3C floats apart in memory, so they go to sgemm as-is with leading
 dimension 3C, no copies. Likewise the output of head h is the (T,hs) block of out (B,T,C)
 at column h*hs, leading dimension C: writing it there concatenates the heads.

   preatt = Q K^T / sqrt(hs)                  (T,T)  sgemm
   att    = softmax over t2 <= t of preatt     (T,T)  causal: att[t][t2] = 0 exactly for t2 > t
   out    = att V                              (T,hs) sgemm

 The two products are computed in full (T x T) even though the upper triangle is not
 needed: one big sgemm is far faster than T small ones, and exact zeros in att make the
 second product causal by itself.
*/
#ifndef LLMC_ATTENTION_H
#define LLMC_ATTENTION_H

#include <math.h>    // expf, sqrtf
#include <stddef.h>  // size_t for offsets that may pass 2^31
#include <cblas.h>   // cblas_sgemm (OpenBLAS)

// out (B,T,C); preatt, att (B,NH,T,T) written in full (they need no zeroing) and kept for
// backward; qkv (B,T,3C).
// preatt holds the scaled scores Q K^T / sqrt(hs) everywhere, the upper triangle included
// (there it is unmasked and unused); att is 0 above the diagonal.
// The sgemm calls run one after another (OpenBLAS threads each one); only the softmax,
// which is row-independent, is parallelized with OpenMP. No sgemm is called from inside an
// OpenMP region, so the two thread pools never nest.
static inline void attention_forward(float* out, float* preatt, float* att, const float* qkv,
                                     int B, int T, int C, int NH) {
    int hs = C / NH;
    int C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    size_t TT = (size_t)T * T;

    // preatt[b,h] (T,T) = scale * Q (T,hs) @ K^T (hs,T)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const float* q = qkv + (size_t)b * T * C3 + h * hs;      // (T,hs), ld 3C
            const float* k = q + C;                                 // (T,hs), ld 3C
            float* pre = preatt + ((size_t)b * NH + h) * TT;         // (T,T),  ld T
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs,
                        scale, q, C3, k, C3, 0.0f, pre, T);
        }
    }

    // causal softmax, one row (b,h,t) at a time: keys t2 <= t only
    int rows = B * NH * T;
    #pragma omp parallel for
    for (int r = 0; r < rows; r++) {
        int t = r % T;
        const float* pre_row = preatt + (size_t)r * T;  // (T,)
        float* att_row = att + (size_t)r * T;           // (T,)
        float maxval = pre_row[0];
        for (int t2 = 1; t2 <= t; t2++) {
            if (pre_row[t2] > maxval) { maxval = pre_row[t2]; }
        }
        // subtracting the max keeps expf <= 1: no overflow
        float sum = 0.0f;
        for (int t2 = 0; t2 <= t; t2++) {
            float e = expf(pre_row[t2] - maxval);
            att_row[t2] = e;
            sum += e;
        }
        float inv = 1.0f / sum;  // sum >= 1 (the max term is exp(0))
        for (int t2 = 0; t2 <= t; t2++) { att_row[t2] *= inv; }
        for (int t2 = t + 1; t2 < T; t2++) { att_row[t2] = 0.0f; }  // the future: masked
    }

    // out[b,:,h] (T,hs) = att[b,h] (T,T) @ V (T,hs)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const float* v = qkv + (size_t)b * T * C3 + 2 * C + h * hs;  // (T,hs), ld 3C
            const float* a = att + ((size_t)b * NH + h) * TT;             // (T,T),  ld T
            float* o = out + (size_t)b * T * C + h * hs;                  // (T,hs), ld C
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T,
                        1.0f, a, T, v, C3, 0.0f, o, C);
        }
    }
}

// dqkv (B,T,3C) += gradient of the attention given dout (B,T,C).
// dpreatt, datt (B,NH,T,T) are scratch: this function OVERWRITES them completely
// (sgemm with beta = 0 and explicit zeros), so the caller need NOT zero them. After the
// call datt holds dout_h V^T (the gradient w.r.t. att; its upper triangle is computed but
// unused) and dpreatt the gradient w.r.t. the scaled scores (0 above the diagonal).
//   datt    = dout_h (T,hs) @ V^T                                   sgemm
//   dV     += att^T @ dout_h                                       sgemm
//   dpreatt = att * (datt - rowsum(att * datt))  (softmax backward; 0 above the diagonal)
//   dQ     += scale * dpreatt @ K                                  sgemm
//   dK     += scale * dpreatt^T @ Q                                sgemm
static inline void attention_backward(float* dqkv, float* dpreatt, float* datt,
                                      const float* dout, const float* qkv, const float* att,
                                      int B, int T, int C, int NH) {
    int hs = C / NH;
    int C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    size_t TT = (size_t)T * T;

    // backward through out = att @ V
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const float* v = qkv + (size_t)b * T * C3 + 2 * C + h * hs;  // (T,hs), ld 3C
            float* dv = dqkv + (size_t)b * T * C3 + 2 * C + h * hs;       // (T,hs), ld 3C
            const float* a = att + ((size_t)b * NH + h) * TT;             // (T,T)
            float* da = datt + ((size_t)b * NH + h) * TT;                 // (T,T)
            const float* dout_h = dout + (size_t)b * T * C + h * hs;      // (T,hs), ld C
            // datt (T,T) = dout_h (T,hs) @ V^T (hs,T)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs,
                        1.0f, dout_h, C, v, C3, 0.0f, da, T);
            // dV (T,hs) += att^T (T,T) @ dout_h (T,hs)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T,
                        1.0f, a, T, dout_h, C, 1.0f, dv, C3);
        }
    }

    // backward through the causal softmax, row by row:
    //   dpre[t2] = att[t2] * (datt[t2] - sum_j att[j] datt[j]),  t2 <= t
    int rows = B * NH * T;
    #pragma omp parallel for
    for (int r = 0; r < rows; r++) {
        int t = r % T;
        const float* att_row = att + (size_t)r * T;
        const float* datt_row = datt + (size_t)r * T;
        float* dpre_row = dpreatt + (size_t)r * T;
        float dot = 0.0f;
        for (int t2 = 0; t2 <= t; t2++) { dot += att_row[t2] * datt_row[t2]; }
        for (int t2 = 0; t2 <= t; t2++) { dpre_row[t2] = att_row[t2] * (datt_row[t2] - dot); }
        for (int t2 = t + 1; t2 < T; t2++) { dpre_row[t2] = 0.0f; }  // masked: no gradient
    }

    // backward through preatt = scale * Q @ K^T
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const float* q = qkv + (size_t)b * T * C3 + h * hs;  // (T,hs), ld 3C
            const float* k = q + C;
            float* dq = dqkv + (size_t)b * T * C3 + h * hs;
            float* dk = dq + C;
            const float* dpre = dpreatt + ((size_t)b * NH + h) * TT;  // (T,T)
            // dQ (T,hs) += scale * dpre (T,T) @ K (T,hs)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T,
                        scale, dpre, T, k, C3, 1.0f, dq, C3);
            // dK (T,hs) += scale * dpre^T (T,T) @ Q (T,hs)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T,
                        scale, dpre, T, q, C3, 1.0f, dk, C3);
        }
    }
}

#endif // LLMC_ATTENTION_H
