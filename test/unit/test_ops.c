/*
 Tests of the CPU building blocks in llmc/ (Criterion).

 Method, for every layer:
 - forward: a plain double-precision reference written here with naive loops, compared
   with the fp32 kernel. Tolerance FWD_RTOL = 1e-5 relative to the magnitude of the
   tensor: fp32 has a unit roundoff of 6e-8, the sums here have at most ~40 terms and the
   transcendental functions (expf, tanhf, logf) are accurate to a few ulp, so the fp32
   error is ~1e-6 of the size of the terms involved; 1e-5 leaves a 10x margin while still
   catching any wrong index, missing term or wrong constant (those give errors ~1e-1).
 - backward: the scalar loss L = sum(out * w), w random and fixed, is evaluated with the
   double reference; central finite differences with h = 1e-6 give dL/dx with truncation
   error ~h^2 * L''' ~ 1e-12 and rounding error ~1e-16 * |L| / h ~ 1e-9. The fp32 backward
   (fed dout = w) must match within BWD_RTOL = 1e-4 relative to the magnitude of the
   gradient tensor: the fp32 gradient itself carries ~1e-6 relative error (a few more
   rounding steps than the forward, and cancellations inside sums such as layernorm's
   and softmax's backward), so 1e-4 has a wide margin and still catches real mistakes.
   The gradient buffers start with random values, so the check also proves that the
   backward ADDS to them; a second call must then add the same amount again.
 Shapes are small and odd (B=2, T=5, C=12, NH=3, V=37, Vp=40, OC=20) so that no
 accidental multiple of a block size hides an edge case.

 Build: make build/test_ops (links the library, build/lib/opt/lib.a)
*/
#include <criterion/criterion.h>  // Test, cr_assert, cr_assert_eq
#include <math.h>                 // fabs, exp, log, tanh, sqrt, cos
#include <string.h>               // memcpy, memcmp, memset, strstr
#include <stdlib.h>               // malloc, free
#include <omp.h>                  // omp_set_num_threads

#include "llmc/rand.h"        // Rng: deterministic test data
#include "llmc/utils.h"       // llmc_errmsg
#include "llmc/encoder.h"     // encoder_forward, encoder_backward
#include "llmc/layernorm.h"   // layernorm_forward, layernorm_backward
#include "llmc/matmul.h"      // matmul_forward, matmul_backward
#include "llmc/blas.h"        // blas_select_kernels, blas_kernels_for, blas_cpu_features, blas_force_kernels
#include "llmc/attention.h"   // attention_forward, attention_backward
#include "llmc/gelu.h"        // gelu_forward, gelu_backward
#include "llmc/residual.h"    // residual_forward, residual_backward
#include "llmc/classifier.h"  // softmax_forward, crossentropy_forward, crossentropy_softmax_backward, the tiles'
#include "zero3/adamw.h"       // adamw_update, grad_norm_squared, adamw_grad_scale
#include "llmc/schedulers.h"  // LRScheduler, lr_scheduler_init, lr_scheduler_get
#include "llmc/outlier.h"     // OutlierDetector: -sl, -sg

#ifndef M_PI  // not in strict ISO C
#define M_PI 3.14159265358979323846
#endif

#define FWD_RTOL 1e-5
#define BWD_RTOL 1e-4
#define FD_H 1e-6

// the shapes used throughout
enum { B = 2, T = 5, C = 12, NH = 3, OC = 20, V = 37, Vp = 40 };

// ----------------------------------------------------------------------------
// helpers

static float* falloc(size_t n) { float* p = malloc((n ? n : 1) * sizeof(float)); cr_assert(p != NULL); return p; }
static double* dalloc(size_t n) { double* p = calloc(n ? n : 1, sizeof(double)); cr_assert(p != NULL); return p; }

static void fill_uniform(Rng* rng, float* x, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) { x[i] = lo + (hi - lo) * rng_float(rng); }
}

static void to_double(double* out, const float* in, size_t n) {
    for (size_t i = 0; i < n; i++) { out[i] = in[i]; }
}

static double max_abs(const double* x, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) { if (fabs(x[i]) > m) { m = fabs(x[i]); } }
    return m;
}

// every got[i] within rtol * (|ref[i]| + max|ref|) of ref[i]: the error of an fp32
// computation scales with the size of the numbers it combines, i.e. with the tensor's
// magnitude, not with the (possibly cancelled, near-zero) element itself
static void expect_close(const char* what, const float* got, const double* ref, size_t n, double rtol) {
    double scale = max_abs(ref, n);
    cr_assert(scale > 0.0 || n == 0, "%s: reference is all zeros, the test is vacuous", what);
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)got[i] - ref[i]);
        double allowed = rtol * (fabs(ref[i]) + scale);
        cr_assert(err <= allowed, "%s[%zu]: got %.9g, expected %.9g (error %.3g > %.3g)",
                  what, i, (double)got[i], ref[i], err, allowed);
    }
}

// a loss evaluated in double from the inputs held in ctx
typedef double (*LossFn)(void* ctx);

// central finite differences of loss with respect to each x[i] (x lives inside ctx)
static void finite_diff(double* grad, double* x, size_t n, LossFn loss, void* ctx) {
    for (size_t i = 0; i < n; i++) {
        double saved = x[i];
        x[i] = saved + FD_H;
        double lp = loss(ctx);
        x[i] = saved - FD_H;
        double lm = loss(ctx);
        x[i] = saved;
        grad[i] = (lp - lm) / (2.0 * FD_H);
    }
}

// the gradient a backward added on top of g0: (got - g0) must match fd
static void expect_grad(const char* what, const float* got, const float* g0, const double* fd, size_t n) {
    float* delta = falloc(n);
    for (size_t i = 0; i < n; i++) { delta[i] = got[i] - g0[i]; }
    expect_close(what, delta, fd, n, BWD_RTOL);
    free(delta);
}

// a second backward call must add the same again: got2 - g0 == 2 (got1 - g0)
static void expect_doubled(const char* what, const float* got2, const float* got1, const float* g0, size_t n) {
    double* twice = dalloc(n);
    for (size_t i = 0; i < n; i++) { twice[i] = 2.0 * ((double)got1[i] - g0[i]); }
    float* delta = falloc(n);
    for (size_t i = 0; i < n; i++) { delta[i] = got2[i] - g0[i]; }
    expect_close(what, delta, twice, n, FWD_RTOL);
    free(delta);
    free(twice);
}

// a gradient buffer filled with random "earlier" gradients g0, and a copy of g0
typedef struct { float* g; float* g0; size_t n; } GradBuf;

static GradBuf gradbuf(Rng* rng, size_t n) {
    GradBuf gb = { falloc(n), falloc(n), n };
    fill_uniform(rng, gb.g0, n, -1.0f, 1.0f);
    memcpy(gb.g, gb.g0, n * sizeof(float));
    return gb;
}
static float* snapshot(const GradBuf* gb) {
    float* s = falloc(gb->n);
    memcpy(s, gb->g, gb->n * sizeof(float));
    return s;
}

// sum(out * w) in double
static double dot_w(const double* out, const double* w, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) { s += out[i] * w[i]; }
    return s;
}

// ----------------------------------------------------------------------------
// encoder

typedef struct { int* inp; double* wte; double* wpe; double* w; double* out; } EncCtx;

static void ref_encoder(double* out, const int* inp, const double* wte, const double* wpe) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++)
                out[(b * T + t) * C + c] = wte[inp[b * T + t] * C + c] + wpe[t * C + c];
}
static double loss_encoder(void* p) {
    EncCtx* x = p;
    ref_encoder(x->out, x->inp, x->wte, x->wpe);
    return dot_w(x->out, x->w, (size_t)B * T * C);
}

Test(encoder, forward_backward) {
    Rng rng; rng_init(&rng, 1);
    size_t nout = (size_t)B * T * C, nwte = (size_t)Vp * C, nwpe = (size_t)T * C;
    // repeated tokens (3 appears three times, 0 twice) exercise the accumulation into dwte rows
    int inp[B * T] = { 3, 0, 3, 7, 36, 0, 12, 3, 5, 39 };
    float* wte = falloc(nwte); fill_uniform(&rng, wte, nwte, -1, 1);
    float* wpe = falloc(nwpe); fill_uniform(&rng, wpe, nwpe, -1, 1);
    float* w = falloc(nout); fill_uniform(&rng, w, nout, -1, 1);
    float* out = falloc(nout);
    encoder_forward(out, inp, wte, wpe, B, T, C);

    EncCtx x = { inp, dalloc(nwte), dalloc(nwpe), dalloc(nout), dalloc(nout) };
    to_double(x.wte, wte, nwte); to_double(x.wpe, wpe, nwpe); to_double(x.w, w, nout);
    ref_encoder(x.out, inp, x.wte, x.wpe);
    expect_close("encoder out", out, x.out, nout, FWD_RTOL);

    GradBuf dwte = gradbuf(&rng, nwte), dwpe = gradbuf(&rng, nwpe);
    encoder_backward(dwte.g, dwpe.g, w, inp, B, T, C);
    double* fd = dalloc(nwte);
    finite_diff(fd, x.wte, nwte, loss_encoder, &x);
    expect_grad("dwte", dwte.g, dwte.g0, fd, nwte);
    finite_diff(fd, x.wpe, nwpe, loss_encoder, &x);
    expect_grad("dwpe", dwpe.g, dwpe.g0, fd, nwpe);

    float* once_wte = snapshot(&dwte); float* once_wpe = snapshot(&dwpe);
    encoder_backward(dwte.g, dwpe.g, w, inp, B, T, C);
    expect_doubled("dwte twice", dwte.g, once_wte, dwte.g0, nwte);
    expect_doubled("dwpe twice", dwpe.g, once_wpe, dwpe.g0, nwpe);
}

// ----------------------------------------------------------------------------
// layernorm

typedef struct { double* inp; double* weight; double* bias; double* w; double* out; double* mean; double* rstd; } LnCtx;

static void ref_layernorm(double* out, double* mean, double* rstd, const double* inp, const double* weight, const double* bias) {
    for (int i = 0; i < B * T; i++) {
        const double* xr = inp + i * C;
        double m = 0.0;
        for (int c = 0; c < C; c++) { m += xr[c]; }
        m /= C;
        double var = 0.0;
        for (int c = 0; c < C; c++) { var += (xr[c] - m) * (xr[c] - m); }
        var /= C;  // biased, as torch
        double s = 1.0 / sqrt(var + 1e-5);
        for (int c = 0; c < C; c++) { out[i * C + c] = (xr[c] - m) * s * weight[c] + bias[c]; }
        mean[i] = m;
        rstd[i] = s;
    }
}
static double loss_layernorm(void* p) {
    LnCtx* x = p;
    ref_layernorm(x->out, x->mean, x->rstd, x->inp, x->weight, x->bias);
    return dot_w(x->out, x->w, (size_t)B * T * C);
}

Test(layernorm, forward_backward) {
    Rng rng; rng_init(&rng, 2);
    size_t n = (size_t)B * T * C;
    float* inp = falloc(n); fill_uniform(&rng, inp, n, -2, 3);  // non-zero mean on purpose
    float* weight = falloc(C); fill_uniform(&rng, weight, C, 0.5f, 1.5f);
    float* bias = falloc(C); fill_uniform(&rng, bias, C, -0.5f, 0.5f);
    float* w = falloc(n); fill_uniform(&rng, w, n, -1, 1);
    float* out = falloc(n); float* mean = falloc(B * T); float* rstd = falloc(B * T);
    layernorm_forward(out, mean, rstd, inp, weight, bias, B, T, C);

    LnCtx x = { dalloc(n), dalloc(C), dalloc(C), dalloc(n), dalloc(n), dalloc(B * T), dalloc(B * T) };
    to_double(x.inp, inp, n); to_double(x.weight, weight, C); to_double(x.bias, bias, C); to_double(x.w, w, n);
    ref_layernorm(x.out, x.mean, x.rstd, x.inp, x.weight, x.bias);
    expect_close("layernorm out", out, x.out, n, FWD_RTOL);
    expect_close("layernorm mean", mean, x.mean, B * T, FWD_RTOL);
    expect_close("layernorm rstd", rstd, x.rstd, B * T, FWD_RTOL);

    GradBuf dinp = gradbuf(&rng, n), dweight = gradbuf(&rng, C), dbias = gradbuf(&rng, C);
    layernorm_backward(dinp.g, dweight.g, dbias.g, w, inp, weight, mean, rstd, B, T, C);
    double* fd = dalloc(n);
    finite_diff(fd, x.inp, n, loss_layernorm, &x);
    expect_grad("layernorm dinp", dinp.g, dinp.g0, fd, n);
    finite_diff(fd, x.weight, C, loss_layernorm, &x);
    expect_grad("layernorm dweight", dweight.g, dweight.g0, fd, C);
    finite_diff(fd, x.bias, C, loss_layernorm, &x);
    expect_grad("layernorm dbias", dbias.g, dbias.g0, fd, C);

    float* o1 = snapshot(&dinp); float* o2 = snapshot(&dweight); float* o3 = snapshot(&dbias);
    layernorm_backward(dinp.g, dweight.g, dbias.g, w, inp, weight, mean, rstd, B, T, C);
    expect_doubled("layernorm dinp twice", dinp.g, o1, dinp.g0, n);
    expect_doubled("layernorm dweight twice", dweight.g, o2, dweight.g0, C);
    expect_doubled("layernorm dbias twice", dbias.g, o3, dbias.g0, C);
}

// ----------------------------------------------------------------------------
// matmul

typedef struct { double* inp; double* weight; double* bias; double* w; double* out; } MmCtx;

static void ref_matmul(double* out, const double* inp, const double* weight, const double* bias) {
    for (int i = 0; i < B * T; i++)
        for (int o = 0; o < OC; o++) {
            double s = bias ? bias[o] : 0.0;
            for (int c = 0; c < C; c++) { s += inp[i * C + c] * weight[o * C + c]; }
            out[i * OC + o] = s;
        }
}
static double loss_matmul(void* p) {
    MmCtx* x = p;
    ref_matmul(x->out, x->inp, x->weight, x->bias);
    return dot_w(x->out, x->w, (size_t)B * T * OC);
}

Test(matmul, forward_backward) {
    char note[256];
    blas_select_kernels(note, sizeof(note));  // the kernels the trainer runs
    Rng rng; rng_init(&rng, 3);
    size_t nin = (size_t)B * T * C, nout = (size_t)B * T * OC, nw = (size_t)OC * C;
    float* inp = falloc(nin); fill_uniform(&rng, inp, nin, -1, 1);
    float* weight = falloc(nw); fill_uniform(&rng, weight, nw, -1, 1);
    float* bias = falloc(OC); fill_uniform(&rng, bias, OC, -1, 1);
    float* w = falloc(nout); fill_uniform(&rng, w, nout, -1, 1);
    float* out = falloc(nout);

    MmCtx x = { dalloc(nin), dalloc(nw), dalloc(OC), dalloc(nout), dalloc(nout) };
    to_double(x.inp, inp, nin); to_double(x.weight, weight, nw); to_double(x.bias, bias, OC); to_double(x.w, w, nout);

    // without bias; out starts as garbage (NaN) to prove it is overwritten, not accumulated
    for (size_t i = 0; i < nout; i++) { out[i] = NAN; }
    matmul_forward(out, inp, weight, NULL, B, T, C, OC);
    ref_matmul(x.out, x.inp, x.weight, NULL);
    expect_close("matmul out (no bias)", out, x.out, nout, FWD_RTOL);
    for (size_t i = 0; i < nout; i++) { out[i] = NAN; }
    matmul_forward(out, inp, weight, bias, B, T, C, OC);
    ref_matmul(x.out, x.inp, x.weight, x.bias);
    expect_close("matmul out", out, x.out, nout, FWD_RTOL);

    GradBuf dinp = gradbuf(&rng, nin), dweight = gradbuf(&rng, nw), dbias = gradbuf(&rng, OC);
    matmul_backward(dinp.g, dweight.g, dbias.g, w, inp, weight, B, T, C, OC);
    double* fd = dalloc(nin > nw ? nin : nw);
    finite_diff(fd, x.inp, nin, loss_matmul, &x);
    expect_grad("matmul dinp", dinp.g, dinp.g0, fd, nin);
    finite_diff(fd, x.weight, nw, loss_matmul, &x);
    expect_grad("matmul dweight", dweight.g, dweight.g0, fd, nw);
    finite_diff(fd, x.bias, OC, loss_matmul, &x);
    expect_grad("matmul dbias", dbias.g, dbias.g0, fd, OC);

    float* o1 = snapshot(&dinp); float* o2 = snapshot(&dweight); float* o3 = snapshot(&dbias);
    matmul_backward(dinp.g, dweight.g, dbias.g, w, inp, weight, B, T, C, OC);
    expect_doubled("matmul dinp twice", dinp.g, o1, dinp.g0, nin);
    expect_doubled("matmul dweight twice", dweight.g, o2, dweight.g0, nw);
    expect_doubled("matmul dbias twice", dbias.g, o3, dbias.g0, OC);

    // dinp = NULL and dbias = NULL are skipped; dweight still gets the same increment
    matmul_backward(NULL, dweight.g, NULL, w, inp, weight, B, T, C, OC);
    double* thrice = dalloc(nw);
    for (size_t i = 0; i < nw; i++) { thrice[i] = 3.0 * ((double)o2[i] - dweight.g0[i]); }
    float* delta = falloc(nw);
    for (size_t i = 0; i < nw; i++) { delta[i] = dweight.g[i] - dweight.g0[i]; }
    expect_close("matmul dweight (NULL dinp, dbias)", delta, thrice, nw, FWD_RTOL);
}

// ----------------------------------------------------------------------------
// OpenBLAS's kernels (llmc/blas.h)

// only OpenBLAS's Prescott fallback is replaced, by the newest set the CPU's features allow
Test(blas, kernels_for) {
    cr_assert_str_eq(blas_kernels_for("Prescott", 1, 1), "SkylakeX");
    cr_assert_str_eq(blas_kernels_for("Prescott", 1, 0), "Haswell");
    cr_assert_null(blas_kernels_for("Prescott", 0, 0));   // an SSE-only CPU: Prescott is right
    cr_assert_null(blas_kernels_for("Haswell", 1, 1));     // OpenBLAS knew the CPU: its choice stands
    cr_assert_null(blas_kernels_for("SkylakeX", 1, 1));
    cr_assert_null(blas_kernels_for("Zen", 1, 0));
    cr_assert_null(blas_kernels_for("Cooperlake", 1, 1));
    cr_assert_null(blas_kernels_for(NULL, 1, 1));
}

// (BT, OC) = (BT, C) @ (OC, C)^T through the trainer's matmul against a double reference,
// at a size where sgemm runs its blocked kernels, not a small-matrix path
static void blas_product_check(void) {
    enum { M = 96, K = 200, N = 72 };
    Rng rng; rng_init(&rng, 11);
    float* a = falloc((size_t)M * K); fill_uniform(&rng, a, (size_t)M * K, -1, 1);
    float* w = falloc((size_t)N * K); fill_uniform(&rng, w, (size_t)N * K, -1, 1);
    float* out = falloc((size_t)M * N);
    double* ref = dalloc((size_t)M * N);
    matmul_forward(out, a, w, NULL, 1, M, K, N);
    for (int i = 0; i < M; i++)
        for (int o = 0; o < N; o++) {
            double acc = 0.0;
            for (int k = 0; k < K; k++) { acc += (double)a[(size_t)i * K + k] * w[(size_t)o * K + k]; }
            ref[(size_t)i * N + o] = acc;
        }
    expect_close("sgemm with the selected kernels", out, ref, (size_t)M * N, FWD_RTOL);
    free(a); free(w); free(out); free(ref);
}

// On any x86-64 CPU: OpenBLAS forced onto its Prescott kernels, as on a CPU it does not
// know, is moved to the set this CPU's features allow (none on an SSE-only CPU), and the
// products it then computes are right
Test(blas, prescott_fallback_replaced) {
    cr_assert(openblas_get_corename != NULL && gotoblas_dynamic_init != NULL && gotoblas_dynamic_quit != NULL,
              "the OpenBLAS linked is not a DYNAMIC_ARCH build (scripts/install_deps.sh installs Debian's, which is)");
    blas_force_kernels("Prescott");
    cr_assert_str_eq(blas_kernels(), "Prescott");
    unsetenv("OPENBLAS_CORETYPE");
    int avx2_fma, avx512;
    blas_cpu_features(&avx2_fma, &avx512);
    const char* want = avx512 ? "SkylakeX" : avx2_fma ? "Haswell" : NULL;  // (the table above)
    char note[256] = "";
    int rc = blas_select_kernels(note, sizeof(note));
    if (want != NULL) {
        cr_assert_eq(rc, 1);
        cr_assert_str_eq(blas_kernels(), want);
        cr_assert_str_eq(getenv("OPENBLAS_CORETYPE"), want);
        cr_assert(strstr(note, "Prescott") != NULL && strstr(note, want) != NULL, "the note names both: %s", note);
    } else {
        cr_assert_eq(rc, 0);
        cr_assert_str_eq(blas_kernels(), "Prescott");
    }
    blas_product_check();
}

// OPENBLAS_CORETYPE is the user's: even Prescott's kernels, asked for, stay
Test(blas, user_choice_kept) {
    blas_force_kernels("Prescott");
    char note[256] = "";
    cr_assert_eq(blas_select_kernels(note, sizeof(note)), 0);
    cr_assert_str_eq(blas_kernels(), "Prescott");
    cr_assert_str_eq(note, "");
    blas_product_check();
}

// ----------------------------------------------------------------------------
// attention

typedef struct { double* qkv; double* w; double* out; } AttCtx;

// the textbook definition, one query at a time; att_out (B,NH,T,T) optional
static void ref_attention(double* out, double* att_out, const double* qkv) {
    int hs = C / NH;
    double scale = 1.0 / sqrt((double)hs);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const double* q = qkv + (b * T + t) * 3 * C + h * hs;
                double score[T], att[T];
                double maxval = -INFINITY;
                for (int t2 = 0; t2 <= t; t2++) {
                    const double* k = qkv + (b * T + t2) * 3 * C + C + h * hs;
                    double s = 0.0;
                    for (int i = 0; i < hs; i++) { s += q[i] * k[i]; }
                    score[t2] = s * scale;
                    if (score[t2] > maxval) { maxval = score[t2]; }
                }
                double sum = 0.0;
                for (int t2 = 0; t2 <= t; t2++) { att[t2] = exp(score[t2] - maxval); sum += att[t2]; }
                for (int t2 = 0; t2 < T; t2++) { att[t2] = t2 <= t ? att[t2] / sum : 0.0; }
                for (int i = 0; i < hs; i++) {
                    double s = 0.0;
                    for (int t2 = 0; t2 <= t; t2++) { s += att[t2] * qkv[(b * T + t2) * 3 * C + 2 * C + h * hs + i]; }
                    out[(b * T + t) * C + h * hs + i] = s;
                }
                if (att_out) {
                    for (int t2 = 0; t2 < T; t2++) { att_out[((b * NH + h) * T + t) * T + t2] = att[t2]; }
                }
            }
}
static double loss_attention(void* p) {
    AttCtx* x = p;
    ref_attention(x->out, NULL, x->qkv);
    return dot_w(x->out, x->w, (size_t)B * T * C);
}

Test(attention, forward_backward) {
    Rng rng; rng_init(&rng, 4);
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, natt = (size_t)B * NH * T * T;
    float* qkv = falloc(nqkv); fill_uniform(&rng, qkv, nqkv, -1.5f, 1.5f);
    float* w = falloc(nout); fill_uniform(&rng, w, nout, -1, 1);
    float* out = falloc(nout); float* preatt = falloc(natt); float* att = falloc(natt);
    // scratch full of NaN: the functions must overwrite, never read, what was there
    for (size_t i = 0; i < natt; i++) { preatt[i] = NAN; att[i] = NAN; }
    attention_forward(out, preatt, att, qkv, B, T, C, NH);

    AttCtx x = { dalloc(nqkv), dalloc(nout), dalloc(nout) };
    to_double(x.qkv, qkv, nqkv); to_double(x.w, w, nout);
    double* ref_att = dalloc(natt);
    ref_attention(x.out, ref_att, x.qkv);
    expect_close("attention out", out, x.out, nout, FWD_RTOL);
    expect_close("attention att", att, ref_att, natt, FWD_RTOL);
    for (int r = 0; r < B * NH * T; r++)
        for (int t2 = r % T + 1; t2 < T; t2++)
            cr_assert(att[(size_t)r * T + t2] == 0.0f, "att above the diagonal must be exactly 0");

    GradBuf dqkv = gradbuf(&rng, nqkv);
    float* dpreatt = falloc(natt); float* datt = falloc(natt);
    for (size_t i = 0; i < natt; i++) { dpreatt[i] = NAN; datt[i] = NAN; }
    attention_backward(dqkv.g, dpreatt, datt, w, qkv, att, B, T, C, NH);
    double* fd = dalloc(nqkv);
    finite_diff(fd, x.qkv, nqkv, loss_attention, &x);
    expect_grad("attention dqkv", dqkv.g, dqkv.g0, fd, nqkv);

    // the second call reuses the scratch as the first one left it: no zeroing needed
    float* once = snapshot(&dqkv);
    attention_backward(dqkv.g, dpreatt, datt, w, qkv, att, B, T, C, NH);
    expect_doubled("attention dqkv twice", dqkv.g, once, dqkv.g0, nqkv);
}

Test(attention, causal) {
    Rng rng; rng_init(&rng, 5);
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, natt = (size_t)B * NH * T * T;
    float* qkv = falloc(nqkv); fill_uniform(&rng, qkv, nqkv, -1.5f, 1.5f);
    float* out1 = falloc(nout); float* out2 = falloc(nout);
    float* preatt = falloc(natt); float* att = falloc(natt);
    attention_forward(out1, preatt, att, qkv, B, T, C, NH);
    // change every q, k and v channel of token t = 3 of sequence 0
    int tf = 3;
    for (int i = 0; i < 3 * C; i++) { qkv[(0 * T + tf) * 3 * C + i] += 10.0f; }
    attention_forward(out2, preatt, att, qkv, B, T, C, NH);
    for (int t = 0; t < tf; t++)
        for (int c = 0; c < C; c++)
            cr_assert(out1[t * C + c] == out2[t * C + c], "output at t=%d changed when a future token changed", t);
    // sanity: the change is seen at and after tf, and never in the other sequence
    int changed = 0;
    for (int t = tf; t < T; t++)
        for (int c = 0; c < C; c++) { changed |= out1[t * C + c] != out2[t * C + c]; }
    cr_assert(changed, "changing token %d had no effect at all", tf);
    cr_assert(memcmp(out1 + T * C, out2 + T * C, T * C * sizeof(float)) == 0, "sequence 1 changed");
}

// ----------------------------------------------------------------------------
// gelu and residual

enum { NE = 61 };  // elementwise tests: an odd count
typedef struct { double* inp; double* w; } GeluCtx;

static double ref_gelu(double x) { return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }
static double loss_gelu(void* p) {
    GeluCtx* x = p;
    double s = 0.0;
    for (int i = 0; i < NE; i++) { s += ref_gelu(x->inp[i]) * x->w[i]; }
    return s;
}

Test(gelu, forward_backward) {
    Rng rng; rng_init(&rng, 6);
    float* inp = falloc(NE); fill_uniform(&rng, inp, NE, -4, 4);  // both tails and the bend
    float* w = falloc(NE); fill_uniform(&rng, w, NE, -1, 1);
    float* out = falloc(NE);
    gelu_forward(out, inp, NE);
    GeluCtx x = { dalloc(NE), dalloc(NE) };
    to_double(x.inp, inp, NE); to_double(x.w, w, NE);
    double ref[NE];
    for (int i = 0; i < NE; i++) { ref[i] = ref_gelu(x.inp[i]); }
    expect_close("gelu out", out, ref, NE, FWD_RTOL);

    GradBuf dinp = gradbuf(&rng, NE);
    gelu_backward(dinp.g, inp, w, NE);
    double fd[NE];
    finite_diff(fd, x.inp, NE, loss_gelu, &x);
    expect_grad("gelu dinp", dinp.g, dinp.g0, fd, NE);
    float* once = snapshot(&dinp);
    gelu_backward(dinp.g, inp, w, NE);
    expect_doubled("gelu dinp twice", dinp.g, once, dinp.g0, NE);
}

Test(gelu, extremes_stay_finite) {
    // far tails: expf(-2u) overflows to inf or underflows to 0; gelu must go to 0 and x,
    // its slope to 0 and 1, with no NaN from inf * 0
    float inp[4] = { -100.0f, -20.0f, 20.0f, 100.0f };
    float out[4], dinp[4] = { 0 }, ones[4] = { 1, 1, 1, 1 };
    gelu_forward(out, inp, 4);
    gelu_backward(dinp, inp, ones, 4);
    for (int i = 0; i < 4; i++) {
        float expect_out = inp[i] > 0 ? inp[i] : 0.0f, expect_slope = inp[i] > 0 ? 1.0f : 0.0f;
        cr_assert(out[i] == expect_out, "gelu(%g) = %g", (double)inp[i], (double)out[i]);
        cr_assert(dinp[i] == expect_slope, "gelu'(%g) = %g", (double)inp[i], (double)dinp[i]);
    }
}

typedef struct { double* a; double* b; double* w; } ResCtx;
static double loss_residual(void* p) {
    ResCtx* x = p;
    double s = 0.0;
    for (int i = 0; i < NE; i++) { s += (x->a[i] + x->b[i]) * x->w[i]; }
    return s;
}

Test(residual, forward_backward) {
    Rng rng; rng_init(&rng, 7);
    float* a = falloc(NE); fill_uniform(&rng, a, NE, -1, 1);
    float* b = falloc(NE); fill_uniform(&rng, b, NE, -1, 1);
    float* w = falloc(NE); fill_uniform(&rng, w, NE, -1, 1);
    float* out = falloc(NE);
    residual_forward(out, a, b, NE);
    ResCtx x = { dalloc(NE), dalloc(NE), dalloc(NE) };
    to_double(x.a, a, NE); to_double(x.b, b, NE); to_double(x.w, w, NE);
    double ref[NE];
    for (int i = 0; i < NE; i++) { ref[i] = x.a[i] + x.b[i]; }
    expect_close("residual out", out, ref, NE, FWD_RTOL);

    GradBuf da = gradbuf(&rng, NE), db = gradbuf(&rng, NE);
    residual_backward(da.g, db.g, w, NE);
    double fd[NE];
    finite_diff(fd, x.a, NE, loss_residual, &x);
    expect_grad("residual dinp1", da.g, da.g0, fd, NE);
    finite_diff(fd, x.b, NE, loss_residual, &x);
    expect_grad("residual dinp2", db.g, db.g0, fd, NE);
    float* o1 = snapshot(&da); float* o2 = snapshot(&db);
    residual_backward(da.g, db.g, w, NE);
    expect_doubled("residual dinp1 twice", da.g, o1, da.g0, NE);
    expect_doubled("residual dinp2 twice", db.g, o2, db.g0, NE);
}

// ----------------------------------------------------------------------------
// classifier: softmax over the real V columns, cross-entropy, fused backward

typedef struct { double* logits; const int* targets; double* dlosses; } ClsCtx;

// probs (B,T,Vp) over the first V columns, 0 beyond; losses (B,T)
static void ref_classifier(double* probs, double* losses, const double* logits, const int* targets) {
    for (int i = 0; i < B * T; i++) {
        const double* x = logits + i * Vp;
        double maxval = x[0];
        for (int v = 1; v < V; v++) { if (x[v] > maxval) { maxval = x[v]; } }
        double sum = 0.0;
        for (int v = 0; v < V; v++) { sum += exp(x[v] - maxval); }
        for (int v = 0; v < Vp; v++) { probs[i * Vp + v] = v < V ? exp(x[v] - maxval) / sum : 0.0; }
        losses[i] = -log(probs[i * Vp + targets[i]]);
    }
}
static double loss_classifier(void* p) {
    ClsCtx* x = p;
    double probs[B * T * Vp], losses[B * T];
    ref_classifier(probs, losses, x->logits, x->targets);
    double s = 0.0;
    for (int i = 0; i < B * T; i++) { s += losses[i] * x->dlosses[i]; }
    return s;
}

Test(classifier, forward_backward) {
    Rng rng; rng_init(&rng, 8);
    size_t n = (size_t)B * T * Vp;
    float* logits = falloc(n); fill_uniform(&rng, logits, n, -3, 3);
    // the padded columns hold large logits: any leak into the softmax would show
    for (int i = 0; i < B * T; i++)
        for (int v = V; v < Vp; v++) { logits[i * Vp + v] = 50.0f; }
    int targets[B * T] = { 0, 36, 5, 5, 17, 2, 30, 11, 36, 9 };
    float dlosses[B * T];
    fill_uniform(&rng, dlosses, B * T, 0.05f, 0.15f);  // e.g. 1/(B*T) with some spread
    float* probs = falloc(n); float losses[B * T];
    for (size_t i = 0; i < n; i++) { probs[i] = NAN; }
    softmax_forward(probs, logits, B, T, V, Vp);
    crossentropy_forward(losses, probs, targets, B, T, Vp);

    ClsCtx x = { dalloc(n), targets, dalloc(B * T) };
    to_double(x.logits, logits, n); to_double(x.dlosses, dlosses, B * T);
    double* ref_probs = dalloc(n); double ref_losses[B * T];
    ref_classifier(ref_probs, ref_losses, x.logits, targets);
    expect_close("probs", probs, ref_probs, n, FWD_RTOL);
    expect_close("losses", losses, ref_losses, B * T, FWD_RTOL);
    for (int i = 0; i < B * T; i++)
        for (int v = V; v < Vp; v++) { cr_assert(probs[i * Vp + v] == 0.0f, "padded prob (%d,%d) not 0", i, v); }

    GradBuf dlogits = gradbuf(&rng, n);
    crossentropy_softmax_backward(dlogits.g, dlosses, probs, targets, B, T, V, Vp);
    double* fd = dalloc(n);
    finite_diff(fd, x.logits, n, loss_classifier, &x);  // fd is exactly 0 on padded columns
    expect_grad("dlogits", dlogits.g, dlogits.g0, fd, n);
    for (int i = 0; i < B * T; i++)
        for (int v = V; v < Vp; v++)
            cr_assert(dlogits.g[i * Vp + v] == dlogits.g0[i * Vp + v], "padded column (%d,%d) got a gradient", i, v);
    float* once = snapshot(&dlogits);
    crossentropy_softmax_backward(dlogits.g, dlosses, probs, targets, B, T, V, Vp);
    expect_doubled("dlogits twice", dlogits.g, once, dlogits.g0, n);
}

Test(classifier, large_logits_stay_finite) {
    // logits around 1e4 would overflow expf without the max subtraction
    size_t n = (size_t)B * T * Vp;
    float* logits = falloc(n); float* probs = falloc(n);
    for (size_t i = 0; i < n; i++) { logits[i] = 1.0e4f + (float)(i % 7); }
    softmax_forward(probs, logits, B, T, V, Vp);
    for (int i = 0; i < B * T; i++) {
        double s = 0.0;
        for (int v = 0; v < V; v++) { cr_assert(isfinite(probs[i * Vp + v])); s += probs[i * Vp + v]; }
        cr_assert(fabs(s - 1.0) < 1e-5, "row %d sums to %.9g", i, s);
    }
}

// ----------------------------------------------------------------------------
// the classifier in vocabulary tiles (--vocab-tile) against the untiled one: the same
// loss, dlnf and dwte from lnf (B,T,C), the tied wte (Vp,C) and the targets.
//
// Tolerance: FWD_RTOL (1e-5) relative to each tensor's magnitude. Both paths evaluate the
// same fp32 expressions; they differ in (a) the softmax sum, accumulated in double over a
// row untiled but rounded to fp32 once per tile when tiled: at most Vp = 40 roundings of
// 2^-24, 2.4e-6 relative at tile width 1, and (b) sgemm's order over a tile of columns
// rather than all of them, and the per-tile accumulation of dlnf: a few ulp of sums of
// C = 12 or Vp = 40 terms, ~1e-6 of the terms' size. A sum that is not rescaled when the
// max grows, a target picked from the wrong tile or a padding column in the softmax moves
// the loss by 1e-2 .. 1 (checked: the test fails so).

typedef struct { float loss[B * T]; float* dlnf; float* dwte; } ClsResult;

// untiled, as the trainer with --vocab-tile 0: logits (B,T,Vp), probs, losses, dlogits
static void classifier_untiled(ClsResult* out, const float* lnf, const float* wte, const int* targets, const float* dlosses) {
    size_t n = (size_t)B * T * Vp;
    float* logits = falloc(n); float* probs = falloc(n); float* dlogits = falloc(n);
    matmul_forward(logits, lnf, wte, NULL, B, T, C, Vp);
    softmax_forward(probs, logits, B, T, V, Vp);
    crossentropy_forward(out->loss, probs, targets, B, T, Vp);
    memset(dlogits, 0, n * sizeof(float));
    crossentropy_softmax_backward(dlogits, dlosses, probs, targets, B, T, V, Vp);
    matmul_backward(out->dlnf, out->dwte, NULL, dlogits, lnf, wte, B, T, C, Vp);
    free(logits); free(probs); free(dlogits);
}

// tiled, as the trainer's loops with --vocab-tile Vt: one (B,T,Vt) buffer; the backward
// starts from the last tile, whose logits the forward left in it
static void classifier_tiled(ClsResult* out, const float* lnf, const float* wte, const int* targets, const float* dlosses, int Vt) {
    float* logits = falloc((size_t)B * T * (Vt < Vp ? Vt : Vp));
    float row_max[B * T], row_sum[B * T], target_logit[B * T];
    for (int v0 = 0; v0 < Vp; v0 += Vt) {
        int w = Vp - v0 < Vt ? Vp - v0 : Vt;
        matmul_forward(logits, lnf, wte + (size_t)v0 * C, NULL, B, T, C, w);
        classifier_tile_stats(row_max, row_sum, target_logit, logits, targets, B, T, v0, w, V);
    }
    classifier_tile_losses(out->loss, row_max, row_sum, target_logit, B, T);
    int last = (Vp - 1) / Vt * Vt;
    for (int v0 = last; v0 >= 0; v0 -= Vt) {
        int w = Vp - v0 < Vt ? Vp - v0 : Vt;
        if (v0 != last) { matmul_forward(logits, lnf, wte + (size_t)v0 * C, NULL, B, T, C, w); }
        classifier_tile_backward(logits, dlosses, row_max, row_sum, targets, B, T, v0, w, V);
        matmul_backward(out->dlnf, out->dwte + (size_t)v0 * C, NULL, logits, lnf, wte + (size_t)v0 * C, B, T, C, w);
    }
    free(logits);
}

Test(classifier, tiled_equals_untiled) {
    Rng rng; rng_init(&rng, 12);
    size_t nlnf = (size_t)B * T * C, nwte = (size_t)Vp * C;
    float* lnf = falloc(nlnf); fill_uniform(&rng, lnf, nlnf, -1.0f, 1.0f);
    float* wte = falloc(nwte); fill_uniform(&rng, wte, nwte, -1.0f, 1.0f);
    // padding rows give large logits: any leak into the softmax would show
    for (size_t i = (size_t)V * C; i < nwte; i++) { wte[i] = 4.0f; }
    int targets[B * T] = { 0, 36, 5, 5, 17, 2, 30, 11, 36, 9 };  // both ends of the real columns
    float dlosses[B * T];
    fill_uniform(&rng, dlosses, B * T, 0.05f, 0.15f);
    float* g0_lnf = falloc(nlnf); fill_uniform(&rng, g0_lnf, nlnf, -1.0f, 1.0f);
    float* g0_wte = falloc(nwte); fill_uniform(&rng, g0_wte, nwte, -1.0f, 1.0f);

    ClsResult ref = { {0}, falloc(nlnf), falloc(nwte) };
    memcpy(ref.dlnf, g0_lnf, nlnf * sizeof(float)); memcpy(ref.dwte, g0_wte, nwte * sizeof(float));
    classifier_untiled(&ref, lnf, wte, targets, dlosses);
    double ref_loss[B * T]; double* ref_dlnf = dalloc(nlnf); double* ref_dwte = dalloc(nwte);
    to_double(ref_loss, ref.loss, B * T); to_double(ref_dlnf, ref.dlnf, nlnf); to_double(ref_dwte, ref.dwte, nwte);

    // widths dividing Vp = 40 (8, 40) and not (1, 3, 7, 16: last tiles of padding only, or
    // mixed), and wider than Vp (64: one tile)
    const int tiles[] = { 1, 3, 7, 8, 16, 40, 64 };
    for (size_t k = 0; k < sizeof(tiles) / sizeof(tiles[0]); k++) {
        char what[64];
        ClsResult got = { {0}, falloc(nlnf), falloc(nwte) };
        memcpy(got.dlnf, g0_lnf, nlnf * sizeof(float)); memcpy(got.dwte, g0_wte, nwte * sizeof(float));
        classifier_tiled(&got, lnf, wte, targets, dlosses, tiles[k]);
        snprintf(what, sizeof(what), "losses, tile %d", tiles[k]);
        expect_close(what, got.loss, ref_loss, B * T, FWD_RTOL);
        snprintf(what, sizeof(what), "dlnf, tile %d", tiles[k]);
        expect_close(what, got.dlnf, ref_dlnf, nlnf, FWD_RTOL);
        snprintf(what, sizeof(what), "dwte, tile %d", tiles[k]);
        expect_close(what, got.dwte, ref_dwte, nwte, FWD_RTOL);
        for (size_t i = (size_t)V * C; i < nwte; i++) {
            cr_assert(got.dwte[i] == g0_wte[i], "tile %d: padding row %zu of dwte got a gradient", tiles[k], i / C);
        }
        free(got.dlnf); free(got.dwte);
    }
    free(lnf); free(wte); free(g0_lnf); free(g0_wte); free(ref.dlnf); free(ref.dwte); free(ref_dlnf); free(ref_dwte);
}

// ----------------------------------------------------------------------------
// optimizer

Test(adamw, matches_scalar_reference_for_three_steps) {
    Rng rng; rng_init(&rng, 9);
    enum { N = 1003 };
    float lr = 1e-2f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, wd = 0.1f, gscale = 0.5f;
    float* p = falloc(N); float* m = falloc(N); float* v = falloc(N); float* g = falloc(N);
    fill_uniform(&rng, p, N, -1, 1);
    memset(m, 0, N * sizeof(float)); memset(v, 0, N * sizeof(float));
    double* rp = dalloc(N); double* rm = dalloc(N); double* rv = dalloc(N);
    to_double(rp, p, N);
    for (int t = 1; t <= 3; t++) {
        fill_uniform(&rng, g, N, -2, 2);  // new gradients each step
        adamw_update(p, g, m, v, N, lr, beta1, beta2, eps, wd, gscale, t);
        // torch.optim.AdamW, one parameter at a time, in double
        for (int i = 0; i < N; i++) {
            double gi = (double)g[i] * gscale;
            rp[i] -= (double)lr * wd * rp[i];
            rm[i] = beta1 * rm[i] + (1.0 - beta1) * gi;
            rv[i] = beta2 * rv[i] + (1.0 - beta2) * gi * gi;
            double mhat = rm[i] / (1.0 - pow(beta1, t));
            double vhat = rv[i] / (1.0 - pow(beta2, t));
            rp[i] -= (double)lr * mhat / (sqrt(vhat) + eps);
        }
        expect_close("adamw params", p, rp, N, FWD_RTOL);
        expect_close("adamw m", m, rm, N, FWD_RTOL);
        expect_close("adamw v", v, rv, N, FWD_RTOL);
    }
}

Test(adamw, grad_norm_squared_exact) {
    // values k/8 with small integers k: every square and every partial sum is exactly
    // representable in double, so the result must equal the integer sum exactly
    size_t sizes[] = { 0, 1, 7, 255, 256, 257, 100003 };
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        size_t n = sizes[s];
        float* g = falloc(n);
        long long sumk2 = 0;
        for (size_t i = 0; i < n; i++) {
            int k = (int)(i % 33) - 16;
            g[i] = (float)k / 8.0f;
            sumk2 += (long long)k * k;
        }
        double got = grad_norm_squared(g, n);
        cr_assert(got == (double)sumk2 / 64.0, "n=%zu: got %.17g, expected %.17g", n, got, (double)sumk2 / 64.0);
        free(g);
    }
}

Test(adamw, grad_norm_squared_thread_invariant) {
    Rng rng; rng_init(&rng, 10);
    size_t n = 1000007;
    float* g = falloc(n); fill_uniform(&rng, g, n, -1, 1);
    omp_set_num_threads(1);
    double s1 = grad_norm_squared(g, n);
    omp_set_num_threads(2);
    double s2 = grad_norm_squared(g, n);
    omp_set_num_threads(3);
    double s3 = grad_norm_squared(g, n);
    cr_assert(memcmp(&s1, &s2, sizeof(double)) == 0 && memcmp(&s1, &s3, sizeof(double)) == 0,
              "1/2/3 threads: %.17g %.17g %.17g", s1, s2, s3);
    // and it is the sum of squares: compare with a plain serial sum (order differs: ~1e-12)
    double ref = 0.0;
    for (size_t i = 0; i < n; i++) { ref += (double)g[i] * g[i]; }
    cr_assert(fabs(s1 - ref) <= 1e-12 * ref, "got %.17g, serial %.17g", s1, ref);
}

// the gradient scale of a step: clipping on the mean gradient's norm, 1/world folded in
static float grad_scale_of(double norm_of_mean, int world, float max_norm, float* norm) {
    double sum_norm = norm_of_mean * world;  // the norm of the gradients summed over ranks
    return adamw_grad_scale(sum_norm * sum_norm, world, max_norm, norm);
}

Test(adamw, grad_scale_clipping) {
    float norm = 0.0f;
    for (int world = 1; world <= 4; world *= 2) {
        float w = (float)world;
        cr_assert(grad_scale_of(2.0, world, 1.0f, &norm) == 0.5f / w, "world %d", world);
        cr_assert(norm == 2.0f);                                           // the norm before clipping
        cr_assert(grad_scale_of(0.5, world, 1.0f, &norm) == 1.0f / w);    // below the threshold: untouched
        cr_assert(norm == 0.5f);
        cr_assert(grad_scale_of(1.0, world, 1.0f, &norm) == 1.0f / w);    // at the threshold: untouched
        cr_assert(grad_scale_of(100.0, world, 0.0f, &norm) == 1.0f / w);  // max_norm 0: clipping off
        cr_assert(grad_scale_of(100.0, world, -1.0f, &norm) == 1.0f / w);
        cr_assert(fabsf(grad_scale_of(3.0, world, 1.0f, &norm) - 1.0f / (3.0f * w)) < 1e-7f);
    }
    // three ranks: the mean's norm is the sum's over 3
    cr_assert(fabsf(adamw_grad_scale(36.0, 3, 1.0f, &norm) - 0.5f / 3.0f) < 1e-8f);
    cr_assert(norm == 2.0f);
    cr_assert(adamw_grad_scale(0.0, 2, 1.0f, &norm) == 0.5f);  // zero gradient: no division by its norm
    cr_assert(norm == 0.0f);
}

// ----------------------------------------------------------------------------
// learning-rate schedules

static int close_lr(float got, double expect) { return fabs(got - expect) <= 1e-6 * fabs(expect) + 1e-12; }

Test(schedulers, known_points) {
    LRScheduler s;
    // lr 1e-3, 10 warmup steps, 110 total, lr_min = 1e-4
    cr_assert_eq(lr_scheduler_init(&s, "cosine", 1e-3f, 10, 110, 0.1f), 0);
    cr_assert(close_lr(lr_scheduler_get(&s, 0), 1e-4));     // warmup: lr * 1/10
    cr_assert(close_lr(lr_scheduler_get(&s, 4), 5e-4));     // lr * 5/10
    cr_assert(close_lr(lr_scheduler_get(&s, 9), 1e-3));     // last warmup step reaches lr
    cr_assert(close_lr(lr_scheduler_get(&s, 10), 1e-3));    // decay ratio 0
    cr_assert(close_lr(lr_scheduler_get(&s, 60), 5.5e-4)); // ratio 1/2: halfway between lr and lr_min
    double r = 99.0 / 100.0;                                 // last step: ratio 99/100
    cr_assert(close_lr(lr_scheduler_get(&s, 109), 1e-4 + 0.5 * (1 + cos(M_PI * r)) * 9e-4));
    cr_assert(close_lr(lr_scheduler_get(&s, 110), 1e-4));   // ratio 1: lr_min
    cr_assert(close_lr(lr_scheduler_get(&s, 500), 1e-4));   // beyond: stays at lr_min
    float prev = lr_scheduler_get(&s, 10);
    for (int step = 11; step <= 110; step++) {                // monotone decay
        float cur = lr_scheduler_get(&s, step);
        cr_assert(cur <= prev, "cosine rose at step %d", step);
        prev = cur;
    }

    cr_assert_eq(lr_scheduler_init(&s, "linear", 1e-3f, 10, 110, 0.1f), 0);
    cr_assert(close_lr(lr_scheduler_get(&s, 4), 5e-4));
    cr_assert(close_lr(lr_scheduler_get(&s, 10), 1e-3));
    cr_assert(close_lr(lr_scheduler_get(&s, 35), 1e-3 - 0.25 * 9e-4));  // a quarter of the way
    cr_assert(close_lr(lr_scheduler_get(&s, 60), 5.5e-4));
    cr_assert(close_lr(lr_scheduler_get(&s, 110), 1e-4));

    cr_assert_eq(lr_scheduler_init(&s, "constant", 1e-3f, 10, 110, 0.1f), 0);
    cr_assert(close_lr(lr_scheduler_get(&s, 4), 5e-4));    // warmup applies to constant too
    cr_assert(close_lr(lr_scheduler_get(&s, 10), 1e-3));
    cr_assert(close_lr(lr_scheduler_get(&s, 109), 1e-3));

    // wsd (llm.c's): warm-up, stable to floor(0.8 * 110) = 88, then 1 - sqrt over the last 22 steps
    cr_assert_eq(lr_scheduler_init(&s, "wsd", 1e-3f, 10, 110, 0.1f), 0);
    cr_assert(close_lr(lr_scheduler_get(&s, 4), 5e-4));
    cr_assert(close_lr(lr_scheduler_get(&s, 10), 1e-3));
    cr_assert(close_lr(lr_scheduler_get(&s, 87), 1e-3));     // the last stable step
    cr_assert(close_lr(lr_scheduler_get(&s, 88), 1e-3));     // r = 0
    cr_assert(close_lr(lr_scheduler_get(&s, 93), 1e-4 + (1 - sqrt(5.0 / 22.0)) * 9e-4));
    cr_assert(close_lr(lr_scheduler_get(&s, 99), 1e-4 + (1 - sqrt(0.5)) * 9e-4));
    cr_assert(close_lr(lr_scheduler_get(&s, 110), 1e-4));    // r = 1: lr_min
    cr_assert(close_lr(lr_scheduler_get(&s, 300), 1e-4));

    // no warmup: the first step already trains at lr
    cr_assert_eq(lr_scheduler_init(&s, "cosine", 1e-3f, 0, 100, 0.0f), 0);
    cr_assert(close_lr(lr_scheduler_get(&s, 0), 1e-3));
    cr_assert(close_lr(lr_scheduler_get(&s, 50), 5e-4));
}

// llm.c's detector: NaN until the window is full, then the z-score of the window with the
// new value in it (two passes in double here); the norm's limit is where that z-score
// crosses k, none past (n - 1) / sqrt(n)
Test(outlier, z_scores_and_the_limit) {
    OutlierDetector d;
    outlier_init(&d);
    double vals[300];
    for (int i = 0; i < 300; i++) { vals[i] = 1.0 + 0.1 * sin(0.37 * i) + 0.02 * (i % 7); }
    for (int i = 0; i < 300; i++) {
        if (i >= OUTLIER_WINDOW) {
            double k = 1.5, lim = outlier_limit(&d, k);
            cr_assert(lim > 0.0);
            cr_assert(fabs(outlier_z_if(&d, lim) - k) < 1e-9, "z at the limit %g", outlier_z_if(&d, lim));
            cr_assert(outlier_z_if(&d, lim * (1 - 1e-6)) < k && outlier_z_if(&d, lim * (1 + 1e-6)) > k);
            double bound = (OUTLIER_WINDOW - 1) / sqrt((double)OUTLIER_WINDOW);
            cr_assert_eq(outlier_limit(&d, bound + 1e-9), 0.0, "no value reaches the bound");
        } else {
            cr_assert_eq(outlier_limit(&d, 1.0), 0.0, "the window is not full");
        }
        double z = outlier_update(&d, vals[i]);
        if (i < OUTLIER_WINDOW) { cr_assert(isnan(z)); continue; }
        double mean = 0.0, sq = 0.0;
        for (int j = i - OUTLIER_WINDOW + 1; j <= i; j++) { mean += vals[j]; }
        mean /= OUTLIER_WINDOW;
        for (int j = i - OUTLIER_WINDOW + 1; j <= i; j++) { sq += (vals[j] - mean) * (vals[j] - mean); }
        double want = (vals[i] - mean) / sqrt(sq / OUTLIER_WINDOW);
        cr_assert(fabs(z - want) < 1e-9 * (1 + fabs(want)), "step %d: z %g, want %g", i, z, want);
    }
}

Test(schedulers, bad_type) {
    LRScheduler s;
    cr_assert_eq(lr_scheduler_init(&s, "exponential", 1e-3f, 10, 100, 0.1f), -1);
    const char* msg = llmc_errmsg();
    cr_assert(strstr(msg, "exponential") != NULL, "message does not name the bad type: %s", msg);
    cr_assert(strstr(msg, "cosine") && strstr(msg, "linear") && strstr(msg, "constant") && strstr(msg, "wsd"),
              "message does not list the accepted types: %s", msg);
    cr_assert_eq(lr_scheduler_init(&s, "cosine", 1e-3f, -1, 100, 0.1f), -1);
}
