/*
 The trainer's two attention paths timed on the GPU, at shapes given on the command line:
 --attention flash (attention_flash_forward/_backward: the tensor-core kernels in this bf16
 build, llmc/attention_tc.cuh) and --attention cublas (attention_forward/_backward, which
 keep the (B, NH, T, T) matrix), each forward and backward on random bf16 inputs, the median
 of ITERS timed runs after 3 warm-ups (CUDA events), inputs rotated among 3 sets:

    build/bench_attention [ITERS] B:NH:T:HS ...      (default: 20 64:12:1024:64 8:32:2048:80)

 FLOPs are the causal ones, dev/bench_torch_sdpa.py's convention (forward 2 * 2 * B NH T^2 hs
 / 2, backward 2.5 times that), so the two programs' TFLOP/s compare as speeds; the flash
 backward does more products than that (its separate dq kernel recomputes S and dP: 7 where
 FlashAttention-2 does 5), which the figure counts as lost speed. A path whose memory does not
 fit (the cuBLAS path's T x T matrices) says so. One line per shape and path:

    attention B=64 NH=12 T=1024 hs=64 path=flash fwd_ms=... bwd_ms=... fwd_tflops=... bwd_tflops=... fwd_bwd_tflops=...

 scripts/bench_attention.sh runs it beside PyTorch's scaled_dot_product_attention. Exit 2
 without a GPU; 1 on a usage error.
*/
#include <stdio.h>                 // printf
#include <stdlib.h>                // atoi
#include <string.h>                // strchr
#include <vector>                  // the host's random inputs
#include <algorithm>               // std::sort: the median
#include "llmc/cuda_common.cuh"    // floatX, cudaCheck
#include "llmc/attention_flash.cuh" // attention_flash_forward/_backward, attention_use_flash; attention.cuh's cuBLAS path

struct Shape { int B, NH, T, hs; };

// n random floatX in [-1, 1) on the device
static floatX* bench_random(size_t n, unsigned seed) {
    std::vector<floatX> h(n);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        h[i] = (floatX)((float)(seed >> 8) / 8388608.0f - 1.0f);
    }
    floatX* d = NULL;
    cudaCheck(cudaMalloc(&d, n * sizeof(floatX)));
    cudaCheck(cudaMemcpy(d, h.data(), n * sizeof(floatX), cudaMemcpyHostToDevice));
    return d;
}

// median milliseconds of fn(set) over iters runs after 3 warm-ups, set = the run's input set
template <typename F>
static float bench_median(int iters, F fn) {
    cudaEvent_t a, b;
    cudaCheck(cudaEventCreate(&a));
    cudaCheck(cudaEventCreate(&b));
    std::vector<float> ms;
    for (int i = 0; i < iters + 3; i++) {
        cudaCheck(cudaEventRecord(a));
        fn(i % 3);
        cudaCheck(cudaEventRecord(b));
        cudaCheck(cudaEventSynchronize(b));
        float t = 0.0f;
        cudaCheck(cudaEventElapsedTime(&t, a, b));
        if (i >= 3) { ms.push_back(t); }
    }
    cudaCheck(cudaEventDestroy(a));
    cudaCheck(cudaEventDestroy(b));
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

static void bench_report(const Shape& s, const char* path, float fwd, float fwd_bwd) {
    double f = 2.0 * 2.0 * s.B * s.NH * (double)s.T * s.T * s.hs / 2.0, bwd = fwd_bwd - fwd;
    printf("attention B=%d NH=%d T=%d hs=%d path=%s fwd_ms=%.4g bwd_ms=%.4g fwd_tflops=%.4g bwd_tflops=%.4g fwd_bwd_tflops=%.4g\n",
           s.B, s.NH, s.T, s.hs, path, fwd, bwd, f / (fwd * 1e-3) / 1e12, 2.5 * f / (bwd * 1e-3) / 1e12,
           3.5 * f / (fwd_bwd * 1e-3) / 1e12);
}

static void bench_shape(const Shape& s, int iters, cublasHandle_t cublas) {
    int C = s.NH * s.hs;
    size_t BTC = (size_t)s.B * s.T * C, BHT = (size_t)s.B * s.NH * s.T, BHTT = BHT * s.T;
    floatX *qkv[3], *dout[3];
    for (int k = 0; k < 3; k++) { qkv[k] = bench_random(3 * BTC, 17u + k); dout[k] = bench_random(BTC, 91u + k); }
    floatX *out, *dqkv;
    cudaCheck(cudaMalloc(&out, BTC * sizeof(floatX)));
    cudaCheck(cudaMalloc(&dqkv, 3 * BTC * sizeof(floatX)));
    cudaCheck(cudaMemset(dqkv, 0, 3 * BTC * sizeof(floatX)));
    if (attention_use_flash(s.T, s.hs)) {
        float *lse, *scratch;
        cudaCheck(cudaMalloc(&lse, attention_flash_lse_floats(s.B, s.NH, s.T) * sizeof(float)));
        cudaCheck(cudaMalloc(&scratch, attention_flash_backward_scratch_floats(s.B, s.NH, s.T) * sizeof(float)));
        float fwd = bench_median(iters, [&](int k) { attention_flash_forward(out, lse, qkv[k], s.B, s.T, C, s.NH, 0); });
        float both = bench_median(iters, [&](int k) {
            attention_flash_forward(out, lse, qkv[k], s.B, s.T, C, s.NH, 0);
            attention_flash_backward(dqkv, scratch, dout[k], qkv[k], out, lse, s.B, s.T, C, s.NH, 0);
        });
        bench_report(s, "flash", fwd, both);
        cudaCheck(cudaFree(lse));
        cudaCheck(cudaFree(scratch));
    } else {
        printf("attention B=%d NH=%d T=%d hs=%d path=flash unavailable: head size %d\n", s.B, s.NH, s.T, s.hs, s.hs);
    }
    size_t free_b = 0, total_b = 0;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    size_t need = (2 * BHTT + 3 * BTC * 2 + attention_backward_scratch_elems(s.B, s.T, C)) * sizeof(floatX);
    if (need > free_b * 0.9) {
        printf("attention B=%d NH=%d T=%d hs=%d path=cublas unavailable: its T x T matrices need %.1f GiB, %.1f free\n",
               s.B, s.NH, s.T, s.hs, need / 1073741824.0, free_b / 1073741824.0);
    } else {
        floatX *qkvr, *att, *dqkvr, *datt, *scratch;
        cudaCheck(cudaMalloc(&qkvr, 3 * BTC * sizeof(floatX)));
        cudaCheck(cudaMalloc(&att, BHTT * sizeof(floatX)));
        cudaCheck(cudaMalloc(&dqkvr, 3 * BTC * sizeof(floatX)));
        cudaCheck(cudaMalloc(&datt, BHTT * sizeof(floatX)));
        cudaCheck(cudaMalloc(&scratch, attention_backward_scratch_elems(s.B, s.T, C) * sizeof(floatX)));
        float fwd = bench_median(iters, [&](int k) { attention_forward(out, qkvr, att, qkv[k], s.B, s.T, C, s.NH, cublas, 0); });
        float both = bench_median(iters, [&](int k) {
            attention_forward(out, qkvr, att, qkv[k], s.B, s.T, C, s.NH, cublas, 0);
            attention_backward(dqkv, dqkvr, datt, scratch, dout[k], qkvr, att, s.B, s.T, C, s.NH, cublas, 0);
        });
        bench_report(s, "cublas", fwd, both);
        cudaCheck(cudaFree(qkvr)); cudaCheck(cudaFree(att)); cudaCheck(cudaFree(dqkvr));
        cudaCheck(cudaFree(datt)); cudaCheck(cudaFree(scratch));
    }
    for (int k = 0; k < 3; k++) { cudaCheck(cudaFree(qkv[k])); cudaCheck(cudaFree(dout[k])); }
    cudaCheck(cudaFree(out));
    cudaCheck(cudaFree(dqkv));
}

int main(int argc, char** argv) {
    int iters = 20, first = 1;
    if (argc > 1 && strchr(argv[1], ':') == NULL) { iters = atoi(argv[1]); first = 2; }
    std::vector<Shape> shapes;
    for (int i = first; i < argc; i++) {
        Shape s;
        if (sscanf(argv[i], "%d:%d:%d:%d", &s.B, &s.NH, &s.T, &s.hs) != 4 || s.B < 1 || s.NH < 1 || s.T < 1 || s.hs < 1) {
            fprintf(stderr, "usage: %s [ITERS] B:NH:T:HS ...  (%s is not B:NH:T:HS)\n", argv[0], argv[i]);
            return 1;
        }
        shapes.push_back(s);
    }
    if (iters < 1) { fprintf(stderr, "usage: %s [ITERS >= 1] B:NH:T:HS ...\n", argv[0]); return 1; }
    if (shapes.empty()) { shapes = {{64, 12, 1024, 64}, {8, 32, 2048, 80}}; }
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) { fprintf(stderr, "bench_attention: no CUDA device\n"); return 2; }
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, 0));
    printf("bench_attention: %s, %s, %d timed runs a figure (median)\n", prop.name, PRECISION_MODE, iters);
    cublasHandle_t cublas;
    cublasCheck(cublasCreate(&cublas));
    for (const Shape& s : shapes) { bench_shape(s, iters, cublas); }
    cublasCheck(cublasDestroy(cublas));
    return 0;
}
