/*
 Speed of zero3/cpu_adam.h's cpu_adam_step next to the machine's memory bandwidth.

 1. cpu_adam_step on n parameters (fp32 master, fp32 grads, no out), all threads,
    `iters` timed calls after one warm-up call; the best call counts. Bytes: 28 per
    parameter (read p, g, m, v = 16, write p, m, v = 12); every written line was read
    first, so this is also what the memory actually moves.
 2. A STREAM-style triad a[i] = b[i] + s * c[i] in double over arrays of the same
    footprint order (3 x 8 B x n_triad, far larger than L3), same threads, best of
    `iters`. STREAM's convention: 24 bytes per element (two 8-byte reads, one 8-byte
    write); the write-allocate read of a[] that the hardware also does is NOT counted,
    as in STREAM.
 The arrays are first touched by the same static OpenMP schedule that uses them.

 usage: bench_cpu_adam [n_params] [iters]     (defaults 100000000 and 5)
 prints: cpu_adam: isa=... threads=... n=... best_ms=... mparam_per_s=... gbps=...
         triad: n=... best_ms=... triad_gbps=...
 build: make build/bench_cpu_adam (-O3 -march=native -fopenmp)
*/
#include <stdio.h>            // printf
#include <stdlib.h>           // strtoull, aligned_alloc, free
#include <omp.h>              // omp_get_wtime, omp_get_max_threads
#include "llmc/utils.h"       // llmcCheck: exit with the library's message on failure
#include "zero3/cpu_adam.h"   // the code under test

// 64-byte aligned, size rounded up to a multiple of 64 as aligned_alloc wants
static void* alloc64(size_t bytes) {
    void* p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (p == NULL) { fprintf(stderr, "out of memory (%zu bytes)\n", bytes); exit(EXIT_FAILURE); }
    return p;
}

int main(int argc, char** argv) {
    size_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 100000000ull;
    int iters = argc > 2 ? atoi(argv[2]) : 5;
    if (n == 0 || iters < 1) { fprintf(stderr, "usage: %s [n_params > 0] [iters >= 1]\n", argv[0]); return 1; }
    int threads = omp_get_max_threads();

    // ---- AdamW
    float* p = alloc64(n * sizeof(float));
    float* g = alloc64(n * sizeof(float));
    float* m = alloc64(n * sizeof(float));
    float* v = alloc64(n * sizeof(float));
    // first touch with the update's own split (pages land where they are used); values
    // in a realistic range, cheap to generate
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        uint32_t h = (uint32_t)i * 2654435761u;
        p[i] = (float)(h >> 8) * (1.0f / 16777216.0f) - 0.5f;
        g[i] = ((float)((h >> 4) & 0xffff) - 32768.0f) * 1e-6f;
        m[i] = 0.0f;
        v[i] = 0.0f;
    }
    CpuAdamParams hp = { 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1 };
    llmcCheck(cpu_adam_step(p, g, CPU_ADAM_FP32, m, v, n, &hp, NULL, CPU_ADAM_FP32));  // warm-up
    double best = 1e30;
    for (int it = 0; it < iters; it++) {
        hp.t = it + 2;
        double t0 = omp_get_wtime();
        llmcCheck(cpu_adam_step(p, g, CPU_ADAM_FP32, m, v, n, &hp, NULL, CPU_ADAM_FP32));
        double dt = omp_get_wtime() - t0;
        if (dt < best) { best = dt; }
    }
    // keep the result alive (and sane) so nothing is optimized away
    double chk = 0.0;
    for (size_t i = 0; i < n; i += 4096) { chk += p[i]; }
    // read_gbps: the read share alone (16 B/param), to compare with the triad's real reads
    printf("cpu_adam: isa=%s threads=%d n=%zu best_ms=%.2f mparam_per_s=%.1f gbps=%.2f read_gbps=%.2f (checksum %.6g)\n",
           cpu_adam_isa(), threads, n, best * 1e3, n / best / 1e6, 28.0 * n / best / 1e9, 16.0 * n / best / 1e9, chk);
    free(p); free(g); free(m); free(v);

    // ---- STREAM triad in double; 2^25 elements = 256 MiB per array, 24x a 32 MiB L3
    size_t nt = (size_t)1 << 25;
    double* a = alloc64(nt * sizeof(double));
    double* b = alloc64(nt * sizeof(double));
    double* c = alloc64(nt * sizeof(double));
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < nt; i++) { a[i] = 0.0; b[i] = 1.0; c[i] = 2.0; }
    const double s = 3.0;
    double tbest = 1e30;
    for (int it = 0; it < iters + 5; it++) {  // the triad is short: a few more tries
        double t0 = omp_get_wtime();
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < nt; i++) { a[i] = b[i] + s * c[i]; }
        double dt = omp_get_wtime() - t0;
        if (dt < tbest) { tbest = dt; }
    }
    // besides STREAM's 24 B: what the memory really moves (32 B with a[]'s write-allocate),
    // of which 24 B are reads (b, c and the write-allocate of a)
    printf("triad: n=%zu best_ms=%.2f triad_gbps=%.2f actual_gbps=%.2f read_gbps=%.2f (check %g)\n", nt, tbest * 1e3,
           24.0 * nt / tbest / 1e9, 32.0 * nt / tbest / 1e9, 24.0 * nt / tbest / 1e9, a[nt / 2]);
    free(a); free(b); free(c);
    return 0;
}
