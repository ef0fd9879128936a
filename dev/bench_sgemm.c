/*
 OpenBLAS sgemm throughput at the shapes of a GPT-2 block's matmuls, the yardstick
 for scripts/bench_cpu_trainer.sh: the trainer's achieved GFLOP/s is set next to it.
   usage: bench_sgemm C BT [repeats]     prints "sgemm_gflops=X"
 With the kernels the trainer would use (llmc/blas.h: OpenBLAS's Prescott fallback
 replaced; OPENBLAS_CORETYPE=Prescott shows what that fallback gives). The shapes are the
 forward's four (qkv, attproj, fc, fcproj) on a (BT, C) input, and the backward's two
 products per matmul (dinp and dweight), as the trainer calls them.
*/
#include <stdio.h>   // printf
#include <stdlib.h>  // atoi, malloc
#include <time.h>    // clock_gettime
#include <cblas.h>   // cblas_sgemm
#include "llmc/blas.h"  // blas_select_kernels, blas_kernels: the trainer's choice of kernels

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
    if (argc < 3) { fprintf(stderr, "usage: %s C BT [repeats]\n", argv[0]); return 1; }
    int C = atoi(argv[1]), BT = atoi(argv[2]), reps = argc > 3 ? atoi(argv[3]) : 5;
    if (C <= 0 || BT <= 0 || reps <= 0) { fprintf(stderr, "bench_sgemm: C, BT and repeats must be positive\n"); return 1; }
    char note[256];
    if (blas_select_kernels(note, sizeof(note))) { fprintf(stderr, "note: %s\n", note); }
    int oc[4] = {3 * C, C, 4 * C, C};   // output channels of qkv, attproj, fc, fcproj
    int ic[4] = {C, C, C, 4 * C};       // their input channels
    size_t maxn = (size_t)4 * C * C;
    float* a = malloc((size_t)BT * 4 * C * sizeof(float));
    float* w = malloc(maxn * sizeof(float));
    float* o = malloc((size_t)BT * 4 * C * sizeof(float));
    float* dw = malloc(maxn * sizeof(float));
    if (!a || !w || !o || !dw) { fprintf(stderr, "bench_sgemm: out of memory\n"); return 1; }
    for (size_t i = 0; i < (size_t)BT * 4 * C; i++) { a[i] = (float)(i % 13) * 0.01f; o[i] = 0.0f; }
    for (size_t i = 0; i < maxn; i++) { w[i] = (float)(i % 7) * 0.01f; dw[i] = 0.0f; }
    double flops = 0.0, best = 1e30;
    for (int r = 0; r < reps + 1; r++) {   // the first round warms up and is not counted
        double t0 = now_s();
        flops = 0.0;
        for (int k = 0; k < 4; k++) {
            int N = oc[k], K = ic[k];
            // forward: out (BT, N) = inp (BT, K) @ W^T, W (N, K)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, BT, N, K, 1.0f, a, K, w, K, 0.0f, o, N);
            // backward: dinp (BT, K) += dout (BT, N) @ W ; dW (N, K) += dout^T @ inp
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, BT, K, N, 1.0f, o, N, w, K, 1.0f, a, K);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, N, K, BT, 1.0f, o, N, a, K, 1.0f, dw, K);
            flops += 3.0 * 2.0 * BT * N * K;
        }
        double dt = now_s() - t0;
        if (r > 0 && dt < best) { best = dt; }
    }
    if (*blas_kernels()) { fprintf(stderr, "bench_sgemm: OpenBLAS %s kernels\n", blas_kernels()); }
    printf("sgemm_gflops=%.1f\n", flops / best / 1e9);
    free(a); free(w); free(o); free(dw);
    return 0;
}
