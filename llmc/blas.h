/*
 OpenBLAS's kernels for this CPU. An OpenBLAS built with DYNAMIC_ARCH (Debian's and most
 distributions') picks its kernels when it loads, from a table of the CPU models it knows.
 A CPU newer than the library is not in that table, and an Intel one then gets the
 library's oldest x86-64 kernels, Prescott's (SSE3): Debian 12's OpenBLAS 0.3.21 on a
 Xeon of model 207 (Emerald Rapids) runs sgemm at 29.5 GFLOP/s a core at the 2.7B
 benchmark's shapes, where its SkylakeX kernels on the same core give 105
 (docs/RESULTS.md). Nothing says so; the trainer is just slow. blas_select_kernels notices that fallback and picks, by what the CPU can run, the
 newest of OpenBLAS's kernel sets that this library has for it:
   AVX-512 (F, CD, BW, DQ, VL)  SkylakeX
   AVX2 and FMA                 Haswell
 Only the Prescott fallback is replaced: a choice OpenBLAS made knowing the CPU stands,
 and so does the user's (OPENBLAS_CORETYPE, which OpenBLAS reads at load time).
 [Note: re-selecting in place] The selection is OpenBLAS's own, gotoblas_dynamic_init
 reading OPENBLAS_CORETYPE, called again after gotoblas_dynamic_quit forgets the first.
 Both are exported by every DYNAMIC_ARCH build (they are how it loads) but are not in its
 headers, so they are weak here: without them (a BLAS built for one CPU, or not OpenBLAS)
 nothing changes. It runs before the program's first product, while nothing else can be
 inside OpenBLAS: the kernel table must not change under a running sgemm.
*/
#ifndef LLMC_BLAS_H
#define LLMC_BLAS_H

#include <stdio.h>   // snprintf
#include <stdlib.h>  // getenv, setenv
#include <string.h>  // strcmp

#ifdef __cplusplus
extern "C" {
#endif
// OpenBLAS's; weak, so that a BLAS without them links and is left alone
char* openblas_get_corename(void) __attribute__((weak));
void gotoblas_dynamic_init(void) __attribute__((weak));
void gotoblas_dynamic_quit(void) __attribute__((weak));
#ifdef __cplusplus
}
#endif

// what this CPU can run: AVX2 with FMA, and AVX-512's F, CD, BW, DQ and VL (SkylakeX's)
static inline void blas_cpu_features(int* avx2_fma, int* avx512) {
    *avx2_fma = *avx512 = 0;
#if defined(__x86_64__)
    __builtin_cpu_init();
    *avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    *avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
              __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
              __builtin_cpu_supports("avx512vl");
#endif
}

// The kernel set to use instead of `chosen` (OpenBLAS's pick) on a CPU with these
// features, or NULL to keep it: only the Prescott fallback is replaced.
static inline const char* blas_kernels_for(const char* chosen, int avx2_fma, int avx512) {
    if (chosen == NULL || strcmp(chosen, "Prescott") != 0) { return NULL; }
    return avx512 ? "SkylakeX" : avx2_fma ? "Haswell" : NULL;
}

// OpenBLAS's kernel set now ("" when the BLAS is not a DYNAMIC_ARCH OpenBLAS)
static inline const char* blas_kernels(void) {
    const char* name = openblas_get_corename != NULL ? openblas_get_corename() : NULL;
    return name != NULL ? name : "";
}

// Makes OpenBLAS select its kernels again, as its load does, with OPENBLAS_CORETYPE=name
static inline void blas_force_kernels(const char* name) {
    setenv("OPENBLAS_CORETYPE", name, 1);  // what gotoblas_dynamic_init reads
    gotoblas_dynamic_quit();
    gotoblas_dynamic_init();
}

// Replaces OpenBLAS's Prescott fallback (above). Returns 1 when it did, writing what it
// did into note (one line for the log), and 0 when it kept OpenBLAS's choice.
static inline int blas_select_kernels(char* note, size_t note_size) {
    if (openblas_get_corename == NULL || gotoblas_dynamic_init == NULL || gotoblas_dynamic_quit == NULL) { return 0; }
    if (getenv("OPENBLAS_CORETYPE") != NULL) { return 0; }  // the user's choice
    int avx2_fma, avx512;
    blas_cpu_features(&avx2_fma, &avx512);
    char before[32];
    snprintf(before, sizeof(before), "%s", blas_kernels());
    const char* want = blas_kernels_for(before, avx2_fma, avx512);
    if (want == NULL) { return 0; }
    blas_force_kernels(want);
    if (strcmp(blas_kernels(), want) != 0) {  // this OpenBLAS lacks them: back to its pick
        blas_force_kernels(before);
        return 0;
    }
    snprintf(note, note_size, "OpenBLAS did not recognise this CPU and chose its %s kernels; using its %s kernels, "
             "which the CPU supports (set OPENBLAS_CORETYPE to choose)", before, want);
    return 1;
}

#endif // LLMC_BLAS_H
