/*
 GPU tests of llmc/matmul.cuh, llmc/fused_classifier.cuh (whole rows and vocabulary tiles),
 zero3/adamw.cuh, zero3/quant.cuh and the flash attention of llmc/attention_flash.cuh
 against the CPU references llmc/matmul.h, gelu.h, classifier.h, adamw.h,
 quant.h (bit for bit) and attention.h (the CPU trainer's own code); the flash attention also
 against the cuBLAS path.
 Run by `make test-gpu` on a GPU machine; prints one line per check and ends with
 "N passed, N failed"; exits non-zero on any failure.

 Shapes are small and odd (BT=74, C=96, OC=288, V=211, Vp=256, n=100003) so that no
 multiple of a block or tile size hides an edge case (C and OC stay multiples of 8 because
 cuBLASLt wants 16-byte rows).

 Inputs are generated as floatX values (rounded to bf16 in the bf16 build) and the CPU
 reference gets exactly those values as floats, so the only differences are the GPU's
 rounding, never the input quantization.

 Tolerances (u = 2^-24, the fp32 unit roundoff):
 - matmuls: a K-term fp32 dot product in ANY summation order (cuBLAS tiles, split-K) is
   within (K+2) u * S of the exact value, S = sum of |terms| (+ |bias| or |old value|)
   (the classical gamma_K bound); CPU and GPU each carry that error, so fp32 tol =
   2 (K+2) u * S. bf16: products of bf16 numbers are exact in fp32 and accumulation is fp32,
   but cuBLASLt may keep split-K partials in the output type (bf16) and the output is
   rounded to bf16 (2^-9 relative): tol = ((K+2) 2u + 2^-7) * S.
 - matmul_forward's GELU (llmc/matmul.cuh: cuBLASLt's GELU epilogue in bf16, the BIAS
   epilogue then llmc/gelu.cuh's kernel in fp32), checked twice. Against the CPU's GELU of
   the GPU's own pre_gelu (the GELU alone): fp32, the same formula on both sides, 1e-5 |ref|
   + 1e-6 max |ref| as test_kernels' elementwise ops (CUDA's expf within 2 ulp), which
   another GELU fails (the erf form is up to 4.7e-4 away, and the emulated epilogue is the
   erf form on purpose); bf16, the epilogue's GELU of the unrounded product that pre_gelu
   holds rounded (1.14 * 2^-8 |pre|, |gelu'| <= 1.13), another GELU than GPT-2's tanh form
   (cuBLASLt's is undocumented: 4e-4 |pre|, over twice the erf form's largest gap of 1.8e-4
   |x|, and a hardware tanh approximation's ~2^-11), the output rounded (2^-8 |ref|). End to
   end against the CPU's matmul and GELU: the pre-activation's tolerance times |gelu'| <=
   1.13, plus the same GELU terms.
 - GELU backward: dinp = gelu'(pre) * (dout @ W): 1.13 * the matmul tolerance + 1e-6 |ref|
   (expf differs by a few ulp) + 2^-8 |ref| in bf16 (a second rounding).
 - classifier: inputs are identical in both builds and all math is fp32, so one tolerance:
   loss within 5e-5 + 2e-6 |loss| (GPU expf <= 2 ulp, an fp32 sum of V=211 terms <= 211 u =
   1.3e-5 relative, the CPU sums in double then logs a rounded probability); each dlogit
   within dloss * 4e-5 * p (same relative error on p) + 1e-6 |ref|, + 2^-8 |ref| in bf16
   (output rounding). Padded columns must be exactly 0; write_dlogits=0 must leave the
   logits bit-identical.
 - AdamW: the same fp32 formula on both sides, differing only where nvcc fuses a multiply
   and an add (FMA) and gcc does not: each result is within a few ulp of its terms:
   m, v within 1e-6 * (sum of |terms|); the master within 2^-21 |p| + lr * (1e-6 |update| +
   tol_m / bc1 / (sqrt(vhat) + eps)) (the update's sensitivity to the error in m).
   Compute copy: fp32: bit-equal to the master. bf16: exactly one of the two bf16
   neighbours of the GPU master (stochastic rounding), and UNBIASED: with lr = 0 the master
   stays fixed and the mean over n = 100003 independent roundings of one value x must be
   within 5 sigma of x, sigma = gap * sqrt(f (1 - f) / n) (~1e-5 for x near 1, while
   round-to-nearest would be off by f * gap ~ 2.6e-3); the same for random values, in units
   of each value's gap. Same seed: bit-identical; another seed: different bits.
 - global norm: double sums of exact squares, partials and total kept in double: within
   1e-12 relative of the CPU's double sum in its own order; and bit-identical twice.
 - flash attention: see the comment above test_attention_flash.

 Also built for the CPU emulation (test/emu: build/test_kernels2_emu).

 Build (see the Makefile's test-gpu):
   nvcc -O3 -std=c++17 -arch=sm_90 -I. [-DENABLE_FP32] test/gpu/test_kernels2_gpu.cu -o ... \
        -lcublas -lcublasLt -lopenblas -Xcompiler -fopenmp
*/
#include <stdio.h>     // printf
#include <stdlib.h>    // exit, EXIT_FAILURE
#include <stdint.h>    // uint16_t, uint32_t, uint64_t for bit patterns and the RNG
#include <string.h>    // memcpy, memcmp, memset
#include <math.h>      // fabs, sqrt, ldexp
#include <float.h>     // FLT_MAX
#include <vector>      // host buffers

#include "llmc/matmul.h"             // CPU matmul_forward / matmul_backward (the reference)
#include "llmc/gelu.h"               // CPU gelu_forward / gelu_backward
#include "llmc/classifier.h"         // CPU softmax_forward, crossentropy_forward, crossentropy_softmax_backward
#include "zero3/adamw.h"              // CPU adamw_update, grad_norm_squared
#include "llmc/attention.h"          // CPU attention_forward / attention_backward (full T x T softmax)
#include "llmc/cuda_common.cuh"      // floatX, cudaCheck
#include "llmc/matmul.cuh"           // GPU matmul_forward / matmul_backward, cublaslt_init
#include "llmc/fused_classifier.cuh" // GPU fused_classifier, classifier_tile_forward/_backward
#include "zero3/adamw.cuh"            // GPU adamw_update_cuda, global_norm_squared
#include "zero3/quant.cuh"            // GPU zero_quantize_cuda, zero_dequantize_cuda, _add_cuda; quant.h's zero_quantize
#include "llmc/attention_flash.cuh"  // GPU attention_flash_forward / _backward, and (llmc/attention.cuh) the cuBLAS path
#include "zero3/util.h"     // zero_error, zero_errmsg, zero_now_ms

static const double U = 5.9604644775390625e-08;  // 2^-24

// ----------------------------------------------------------------------------
// host-side floatX <-> float (bit manipulation: independent of which cuda_bf16.h
// conversions are host-callable)

static float bits_to_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t float_to_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

#if defined(ENABLE_FP32)
static const bool IS_BF16 = false;
static float hx2f(floatX x) { return x; }
static floatX hf2x(float f) { return f; }
#else
static const bool IS_BF16 = true;
static float hx2f(floatX x) {
    __nv_bfloat16_raw r = x;
    return bits_to_float((uint32_t)r.x << 16);
}
static floatX hf2x(float f) {  // round to nearest even (finite inputs only here)
    uint32_t u = float_to_bits(f);
    u += 0x7fffu + ((u >> 16) & 1u);
    __nv_bfloat16_raw r;
    r.x = (unsigned short)(u >> 16);
    return floatX(r);
}
#endif

// ----------------------------------------------------------------------------
// deterministic random numbers (xorshift64*)

static uint64_t rng_state = 0x243f6a8885a308d3ull;
static uint32_t rng_u32() {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545f4914f6cdd1dull) >> 32);
}
static float rng_uniform(float lo, float hi) { return lo + (hi - lo) * (float)(rng_u32() >> 8) * (1.0f / 16777216.0f); }

// n random floatX in [lo, hi); f gets the same values as floats
static std::vector<floatX> rand_x(size_t n, float lo, float hi, std::vector<float>& f) {
    std::vector<floatX> x(n);
    f.resize(n);
    for (size_t i = 0; i < n; i++) {
        x[i] = hf2x(rng_uniform(lo, hi));
        f[i] = hx2f(x[i]);
    }
    return x;
}

static std::vector<float> to_floats(const std::vector<floatX>& x) {
    std::vector<float> f(x.size());
    for (size_t i = 0; i < x.size(); i++) { f[i] = hx2f(x[i]); }
    return f;
}

// ----------------------------------------------------------------------------
// device buffers

template <typename T> static T* dev_from(const std::vector<T>& h) {
    T* d = NULL;
    cudaCheck(cudaMalloc(&d, h.size() * sizeof(T) + 16));  // + 16: never a zero-size malloc
    if (!h.empty()) { cudaCheck(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice)); }
    return d;
}
template <typename T> static std::vector<T> host_from(const T* d, size_t n) {
    std::vector<T> h(n);
    cudaCheck(cudaDeviceSynchronize());
    if (n > 0) { cudaCheck(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost)); }
    return h;
}
template <typename T> static void dev_set(T* d, const std::vector<T>& h) {
    cudaCheck(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
}

// ----------------------------------------------------------------------------
// reporting

static int n_passed = 0, n_failed = 0;

static void report(const char* name, bool ok, const char* detail) {
    printf("%s %s%s%s\n", ok ? "PASS" : "FAIL", name, detail[0] ? ": " : "", detail);
    if (ok) { n_passed++; } else { n_failed++; }
}

// |got - ref| <= tol elementwise (NaN fails)
static void check_close(const char* name, const std::vector<float>& got, const std::vector<float>& ref,
                        const std::vector<float>& tol) {
    size_t bad = 0, first_bad = 0;
    double max_err = 0.0, max_ratio = 0.0;
    for (size_t i = 0; i < ref.size(); i++) {
        double err = fabs((double)got[i] - (double)ref[i]);
        bool ok = err <= (double)tol[i];  // false for NaN
        if (!ok) {
            if (bad == 0) { first_bad = i; }
            bad++;
        }
        if (err > max_err) { max_err = err; }
        double ratio = tol[i] > 0 ? err / tol[i] : (err > 0 ? INFINITY : 0.0);
        if (ratio > max_ratio || ratio != ratio) { max_ratio = ratio; }
    }
    char detail[256];
    if (bad == 0) {
        snprintf(detail, sizeof(detail), "n=%zu max|err|=%.3g max err/tol=%.3g", ref.size(), max_err, max_ratio);
    } else {
        snprintf(detail, sizeof(detail), "%zu of %zu out of tolerance; first [%zu] got %.9g ref %.9g tol %.3g",
                 bad, ref.size(), first_bad, got[first_bad], ref[first_bad], tol[first_bad]);
    }
    report(name, bad == 0, detail);
}

// tolerance of a K-term fp32-accumulated dot product whose |terms| sum to S (header comment)
static float mm_tol(int K, double S) {
    double rel = IS_BF16 ? (K + 2) * 2.0 * U + ldexp(1.0, -7) : 2.0 * (K + 2) * U;
    return (float)(rel * S);
}

// ----------------------------------------------------------------------------
// matmul

// Every operand `offset` bytes past a 256-byte boundary: cudaMalloc's own alignment (0), or
// the 64 and 128 bytes of tensors inside the ZeRO engines' unit buffers, which cuBLASLt must
// be told of (llmc/matmul.cuh): each operand in an allocation of its own, freed at the end.
static std::vector<void*> g_mm_allocs;
template <typename T> static T* dev_at(const std::vector<T>& h, size_t offset) {
    char* base = NULL;
    cudaCheck(cudaMalloc(&base, h.size() * sizeof(T) + 512));
    g_mm_allocs.push_back(base);
    T* d = (T*)(base + (256 - (uintptr_t)base % 256) % 256 + offset);
    if (!h.empty()) { cudaCheck(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice)); }
    return d;
}

static void test_matmul(const MatmulCtx* mm, size_t offset) {
    const int BT = 74, C = 96, OC = 288;
    char nm[160];
    auto name = [&](const char* what) { snprintf(nm, sizeof(nm), "%s [operands at 256 B + %zu]", what, offset); return nm; };
    std::vector<float> inp_f, w_f, b_f, dout_f, dw0_f, db0_f, dinp0_f, pre_f;
    std::vector<floatX> inp = rand_x((size_t)BT * C, -1.0f, 1.0f, inp_f);
    std::vector<floatX> w = rand_x((size_t)OC * C, -1.0f, 1.0f, w_f);
    std::vector<floatX> b = rand_x(OC, -1.0f, 1.0f, b_f);
    std::vector<floatX> dout = rand_x((size_t)BT * OC, -1.0f, 1.0f, dout_f);
    std::vector<floatX> dw0 = rand_x((size_t)OC * C, -1.0f, 1.0f, dw0_f);
    std::vector<floatX> db0 = rand_x(OC, -1.0f, 1.0f, db0_f);
    std::vector<floatX> dinp0 = rand_x((size_t)BT * C, -1.0f, 1.0f, dinp0_f);
    std::vector<floatX> pre = rand_x((size_t)BT * C, -3.0f, 3.0f, pre_f);  // a pre-GELU input for the backward

    floatX* d_inp = dev_at(inp, offset);
    floatX* d_w = dev_at(w, offset);
    floatX* d_b = dev_at(b, offset);
    floatX* d_dout = dev_at(dout, offset);
    floatX* d_dw = dev_at(dw0, offset);
    floatX* d_db = dev_at(db0, offset);
    floatX* d_dinp = dev_at(dinp0, offset);
    floatX* d_pre = dev_at(pre, offset);
    floatX* d_out = dev_at(std::vector<floatX>((size_t)BT * OC), offset);
    floatX* d_pre_out = dev_at(std::vector<floatX>((size_t)BT * OC), offset);
    float* d_scratch = dev_at(std::vector<float>(MATMUL_DBIAS_SCRATCH_FLOATS(OC)), offset);

    // forward scale S[i,o] = sum_c |inp[i,c] w[o,c]| + |b[o]|
    std::vector<float> fwd_S((size_t)BT * OC);
    for (int i = 0; i < BT; i++) {
        for (int o = 0; o < OC; o++) {
            double S = fabs(b_f[o]);
            for (int c = 0; c < C; c++) { S += fabs((double)inp_f[(size_t)i * C + c] * w_f[(size_t)o * C + c]); }
            fwd_S[(size_t)i * OC + o] = (float)S;
        }
    }

    // 1. forward with bias
    std::vector<float> ref((size_t)BT * OC), tol((size_t)BT * OC);
    matmul_forward(ref.data(), inp_f.data(), w_f.data(), b_f.data(), 1, BT, C, OC);
    matmul_forward(d_out, d_inp, d_w, d_b, BT, C, OC, (floatX*)NULL, 0, mm);
    for (size_t i = 0; i < ref.size(); i++) { tol[i] = mm_tol(C, fwd_S[i]); }
    check_close(name("matmul_forward bias"), to_floats(host_from(d_out, ref.size())), ref, tol);

    // 2. forward without bias (epilogue DEFAULT)
    {
        std::vector<float> ref_nb((size_t)BT * OC), tol_nb((size_t)BT * OC);
        matmul_forward(ref_nb.data(), inp_f.data(), w_f.data(), NULL, 1, BT, C, OC);
        matmul_forward(d_out, d_inp, d_w, (const floatX*)NULL, BT, C, OC, (floatX*)NULL, 0, mm);
        for (size_t i = 0; i < ref_nb.size(); i++) { tol_nb[i] = mm_tol(C, fwd_S[i]); }
        check_close(name("matmul_forward no bias"), to_floats(host_from(d_out, ref_nb.size())), ref_nb, tol_nb);
    }

    // 3. forward with GELU: pre_gelu = the biased product, out = gelu(pre_gelu); bf16 in
    // cuBLASLt's epilogue, fp32 by llmc/gelu.cuh's kernel after the product (tolerances above)
    {
        matmul_forward(d_out, d_inp, d_w, d_b, BT, C, OC, d_pre_out, 1, mm);
        std::vector<float> pre_gpu = to_floats(host_from(d_pre_out, ref.size()));
        std::vector<float> out_gpu = to_floats(host_from(d_out, ref.size()));
        check_close(name("matmul_forward gelu: pre_gelu"), pre_gpu, ref, tol);
        // the GELU alone: the CPU's GELU of the GPU's pre_gelu
        std::vector<float> ref_own(ref.size()), tol_own(ref.size());
        gelu_forward(ref_own.data(), pre_gpu.data(), (int)ref.size());
        float max_own = 0.0f;
        for (float v : ref_own) { max_own = fmaxf(max_own, fabsf(v)); }
        for (size_t i = 0; i < ref.size(); i++) {
            tol_own[i] = IS_BF16 ? (1.14f * ldexpf(1.0f, -8) + 4e-4f) * fabsf(pre_gpu[i]) + ldexpf(fabsf(ref_own[i]), -8)
                                 : 1e-5f * fabsf(ref_own[i]) + 1e-6f * max_own;
        }
        check_close(name("matmul_forward gelu: out = gelu(pre_gelu)"), out_gpu, ref_own, tol_own);
        // end to end: the CPU's GELU of the CPU's product
        std::vector<float> ref_g(ref.size()), tol_g(ref.size());
        gelu_forward(ref_g.data(), ref.data(), (int)ref.size());
        for (size_t i = 0; i < ref.size(); i++) {
            tol_g[i] = 1.13f * tol[i] + 1e-6f * max_own +
                       (IS_BF16 ? 4e-4f * fabsf(ref[i]) + ldexpf(fabsf(ref_g[i]), -8) : 1e-5f * fabsf(ref_g[i]));
        }
        check_close(name("matmul_forward gelu: out"), out_gpu, ref_g, tol_g);
    }

    // backward scales: dinp K = OC, dweight K = BT, dbias K = BT
    std::vector<float> dinp_S((size_t)BT * C), dw_S((size_t)OC * C), db_S(OC);
    for (int i = 0; i < BT; i++) {
        for (int c = 0; c < C; c++) {
            double S = 0.0;
            for (int o = 0; o < OC; o++) { S += fabs((double)dout_f[(size_t)i * OC + o] * w_f[(size_t)o * C + c]); }
            dinp_S[(size_t)i * C + c] = (float)S;
        }
    }
    for (int o = 0; o < OC; o++) {
        for (int c = 0; c < C; c++) {
            double S = fabs(dw0_f[(size_t)o * C + c]);
            for (int i = 0; i < BT; i++) { S += fabs((double)dout_f[(size_t)i * OC + o] * inp_f[(size_t)i * C + c]); }
            dw_S[(size_t)o * C + c] = (float)S;
        }
        double S = fabs(db0_f[o]);
        for (int i = 0; i < BT; i++) { S += fabs(dout_f[(size_t)i * OC + o]); }
        db_S[o] = (float)S;
    }

    // 4. backward, everything accumulated (the CPU semantics)
    {
        std::vector<float> dinp_ref = dinp0_f, dw_ref = dw0_f, db_ref = db0_f;
        matmul_backward(dinp_ref.data(), dw_ref.data(), db_ref.data(), dout_f.data(), inp_f.data(), w_f.data(), 1, BT, C, OC);
        matmul_backward(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_scratch, BT, C, OC, (const floatX*)NULL, 1, 0,
                        mm);
        std::vector<float> t_dinp(dinp_ref.size()), t_dw(dw_ref.size()), t_db(OC);
        for (size_t i = 0; i < t_dinp.size(); i++) { t_dinp[i] = mm_tol(OC, dinp_S[i] + fabsf(dinp0_f[i])); }
        for (size_t i = 0; i < t_dw.size(); i++) { t_dw[i] = mm_tol(BT, dw_S[i]); }
        for (int o = 0; o < OC; o++) { t_db[o] = mm_tol(BT, db_S[o]); }
        check_close(name("matmul_backward dinp (accumulate)"), to_floats(host_from(d_dinp, dinp_ref.size())), dinp_ref, t_dinp);
        check_close(name("matmul_backward dweight (+=)"), to_floats(host_from(d_dw, dw_ref.size())), dw_ref, t_dw);
        check_close(name("matmul_backward dbias (+=)"), to_floats(host_from(d_db, (size_t)OC)), db_ref, t_db);

        // deterministic dbias: the same call again from the same start gives the same bits
        std::vector<floatX> db_first = host_from(d_db, (size_t)OC);
        dev_set(d_db, db0);
        matmul_backward((floatX*)NULL, d_dw, d_db, d_dout, d_inp, d_w, d_scratch, BT, C, OC, (const floatX*)NULL, 0, 0,
                        mm);
        std::vector<floatX> db_second = host_from(d_db, (size_t)OC);
        report(name("matmul_backward dbias deterministic"), memcmp(db_first.data(), db_second.data(), OC * sizeof(floatX)) == 0, "");
    }

    // 5. backward, dinp overwritten (it starts as NaN: beta = 0 must not read it); no dbias
    {
        std::vector<float> dinp_ref((size_t)BT * C, 0.0f), dw_ref = dw0_f;
        matmul_backward(dinp_ref.data(), dw_ref.data(), NULL, dout_f.data(), inp_f.data(), w_f.data(), 1, BT, C, OC);
        cudaCheck(cudaMemset(d_dinp, 0xff, (size_t)BT * C * sizeof(floatX)));  // all-ones bits: NaN
        dev_set(d_dw, dw0);
        matmul_backward(d_dinp, d_dw, (floatX*)NULL, d_dout, d_inp, d_w, (float*)NULL, BT, C, OC, (const floatX*)NULL, 0, 0,
                        mm);
        std::vector<float> t_dinp(dinp_ref.size()), t_dw(dw_ref.size());
        for (size_t i = 0; i < t_dinp.size(); i++) { t_dinp[i] = mm_tol(OC, dinp_S[i]); }
        for (size_t i = 0; i < t_dw.size(); i++) { t_dw[i] = mm_tol(BT, dw_S[i]); }
        check_close(name("matmul_backward dinp (overwrite)"), to_floats(host_from(d_dinp, dinp_ref.size())), dinp_ref, t_dinp);
        check_close(name("matmul_backward dweight (+=, no dbias)"), to_floats(host_from(d_dw, dw_ref.size())), dw_ref, t_dw);
    }

    // 6. backward through a GELU: dinp = (dout @ W) * gelu'(pre)
    {
        std::vector<float> tmp((size_t)BT * C, 0.0f), dw_dummy((size_t)OC * C, 0.0f), dinp_ref((size_t)BT * C, 0.0f);
        matmul_backward(tmp.data(), dw_dummy.data(), NULL, dout_f.data(), inp_f.data(), w_f.data(), 1, BT, C, OC);
        gelu_backward(dinp_ref.data(), pre_f.data(), tmp.data(), BT * C);
        dev_set(d_dw, dw0);
        matmul_backward(d_dinp, d_dw, (floatX*)NULL, d_dout, d_inp, d_w, (float*)NULL, BT, C, OC, d_pre, 0, 0,
                        mm);
        std::vector<float> t_dinp(dinp_ref.size());
        for (size_t i = 0; i < t_dinp.size(); i++) {
            t_dinp[i] = 1.13f * mm_tol(OC, dinp_S[i]) + 1e-6f * fabsf(dinp_ref[i]) +
                        (IS_BF16 ? ldexpf(fabsf(dinp_ref[i]), -8) : 0.0f);
        }
        check_close(name("matmul_backward dinp * gelu'(pre_gelu)"), to_floats(host_from(d_dinp, dinp_ref.size())), dinp_ref, t_dinp);

        // 7. the same with -ge 2 (bf16): the derivative in cuBLASLt's DGELU epilogue, whose
        // formula is undocumented (the stand-in's is the erf form's): within the tolerance
        // above plus the largest gap between the erf and tanh forms' derivatives, times the
        // product; emulated, other bits than the kernel's (the epilogue ran, not the kernel)
        if (IS_BF16) {
            std::vector<floatX> by_kernel = host_from(d_dinp, dinp_ref.size());
            double gap = 0.0;  // max |Phi(x) + x phi(x) - tanh form's derivative| over the pre-activations' range
            for (double x = -8.0; x <= 8.0; x += 1.0 / 1024) {
                float xf = (float)x, one = 1.0f, tanh_d = 0.0f;
                gelu_backward(&tanh_d, &xf, &one, 1);
                double erf_d = 0.5 * (1.0 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) / sqrt(2.0 * M_PI);
                gap = fmax(gap, fabs(erf_d - tanh_d));
            }
            matmul_backward(d_dinp, d_dw, (floatX*)NULL, d_dout, d_inp, d_w, (float*)NULL, BT, C, OC, d_pre, 0, 2, mm);
            for (size_t i = 0; i < t_dinp.size(); i++) { t_dinp[i] += (float)(gap * (fabsf(tmp[i]) + mm_tol(OC, dinp_S[i]))); }
            check_close(name("matmul_backward dinp * gelu'(pre_gelu) in the DGELU epilogue (-ge 2)"),
                        to_floats(host_from(d_dinp, dinp_ref.size())), dinp_ref, t_dinp);
#if defined(LLMC_EMU)
            std::vector<floatX> by_epilogue = host_from(d_dinp, dinp_ref.size());
            report(name("matmul_backward -ge 2: the epilogue's bits, not the kernel's"),
                   memcmp(by_kernel.data(), by_epilogue.data(), by_kernel.size() * sizeof(floatX)) != 0, "");
#endif
            char detail[96];
            snprintf(detail, sizeof(detail), "erf and tanh forms' derivatives apart by at most %.2e", gap);
            report(name("matmul_backward -ge 2: the gap between the GELU forms is small"), gap > 0 && gap < 0.02, detail);
        }
    }

    for (void* p : g_mm_allocs) { cudaCheck(cudaFree(p)); }
    g_mm_allocs.clear();
}

// The heuristic runs once per distinct problem: repeated products of one shape and one
// alignment take their algorithm from llmc/matmul.cuh's cache, and another alignment of
// the same shape is another problem (its own heuristic call). Counted by matmul.cuh and,
// emulated, by the cuBLASLt stand-in itself (test/emu/cublasLt.h), which sees the calls
// the library gets.
static void test_matmul_algo_cache(const MatmulCtx* mm) {
    const int BT = 40, C = 64, OC = 136;  // a shape no other test uses
    std::vector<float> inp_f, w_f;
    std::vector<floatX> inp = rand_x((size_t)BT * C + 64, -1.0f, 1.0f, inp_f);  // + 64: room for an offset
    std::vector<floatX> w = rand_x((size_t)OC * C, -1.0f, 1.0f, w_f);
    floatX* d_inp = dev_at(inp, 0);
    floatX* d_w = dev_at(w, 0);
    floatX* d_out = dev_at(std::vector<floatX>((size_t)BT * OC), 0);
    long calls0 = matmul_heuristic_calls, lookups0 = matmul_algo_lookups;
#if defined(LLMC_EMU)
    long lib0 = emu_lt_heuristic_calls;
#endif
    for (int r = 0; r < 5; r++) {  // one problem, five times
        matmul_forward(d_out, d_inp, d_w, (const floatX*)NULL, BT, C, OC, (floatX*)NULL, 0, mm);
    }
    long calls1 = matmul_heuristic_calls;
    const floatX* inp_64 = d_inp + 64 / sizeof(floatX);  // the same shape, inp 64 bytes past the boundary
    for (int r = 0; r < 5; r++) {
        matmul_forward(d_out, inp_64, d_w, (const floatX*)NULL, BT, C, OC, (floatX*)NULL, 0, mm);
    }
    long calls2 = matmul_heuristic_calls;
    cudaCheck(cudaDeviceSynchronize());
    char detail[200];
    snprintf(detail, sizeof(detail), "10 lookups (got %ld), heuristic calls: 1 for 5 products (got %ld), 1 more for "
             "another alignment (got %ld)", matmul_algo_lookups - lookups0, calls1 - calls0, calls2 - calls1);
    report("matmul algorithm cache", matmul_algo_lookups - lookups0 == 10 && calls1 - calls0 == 1 && calls2 - calls1 == 1, detail);
#if defined(LLMC_EMU)
    snprintf(detail, sizeof(detail), "%ld calls reached the library for 10 products (2 expected)", emu_lt_heuristic_calls - lib0);
    report("matmul algorithm cache: the library's heuristic calls", emu_lt_heuristic_calls - lib0 == 2, detail);
#endif
    for (void* p : g_mm_allocs) { cudaCheck(cudaFree(p)); }
    g_mm_allocs.clear();
}

// --matmul-tune (llmc/matmul.cuh): each new problem's candidates timed and the fastest
// kept. The products stay right: one that overwrites D (timed on D itself) and ones that
// accumulate (timed on the scratch: D added to once) against the CPU; the D a tuned call
// leaves is its choice's (the next call, a cache hit, gives the same bits); every new
// problem counted as tuned; a table adopted whole (the ranks' agreement) is used without
// the heuristic and gives the same bits. Emulated, the stand-in's candidates 1 and 3 sleep
// (test/emu/cublasLt.h): the choice must be its second.
static void test_matmul_tune(const MatmulCtx* mm) {
    const int BT = 24, C = 48, OC = 80;  // a shape no other test uses
    MatmulCtx t = *mm;  // the same handle and workspace, tuning on
    cublaslt_tune(&t, 3);
    std::vector<float> inp_f, w_f, b_f, dout_f, dw0_f, dinp0_f;
    std::vector<floatX> inp = rand_x((size_t)BT * C, -1.0f, 1.0f, inp_f), w = rand_x((size_t)OC * C, -1.0f, 1.0f, w_f);
    std::vector<floatX> b = rand_x(OC, -1.0f, 1.0f, b_f), dout = rand_x((size_t)BT * OC, -1.0f, 1.0f, dout_f);
    std::vector<floatX> dw0 = rand_x((size_t)OC * C, -1.0f, 1.0f, dw0_f), dinp0 = rand_x((size_t)BT * C, -1.0f, 1.0f, dinp0_f);
    floatX *d_inp = dev_at(inp, 0), *d_w = dev_at(w, 0), *d_b = dev_at(b, 0), *d_dout = dev_at(dout, 0);
    floatX *d_dw = dev_at(dw0, 0), *d_dinp = dev_at(dinp0, 0);
    floatX *d_out = dev_at(std::vector<floatX>((size_t)BT * OC), 0), *d_out2 = dev_at(std::vector<floatX>((size_t)BT * OC), 0);
    long keys0 = matmul_tuned_keys;
#if defined(LLMC_EMU)
    long changed0 = matmul_tune_changed;  // (the stand-in's fastest candidate is known; a GPU's is not)
#endif

    matmul_forward(d_out, d_inp, d_w, d_b, BT, C, OC, (floatX*)NULL, 0, &t);  // beta 0: timed in place
    matmul_backward(d_dinp, d_dw, (floatX*)NULL, d_dout, d_inp, d_w, (float*)NULL, BT, C, OC, (const floatX*)NULL, 1, 0, &t);
    std::vector<float> ref((size_t)BT * OC), tol((size_t)BT * OC), dinp_ref = dinp0_f, dw_ref = dw0_f;
    matmul_forward(ref.data(), inp_f.data(), w_f.data(), b_f.data(), 1, BT, C, OC);
    matmul_backward(dinp_ref.data(), dw_ref.data(), NULL, dout_f.data(), inp_f.data(), w_f.data(), 1, BT, C, OC);
    // (the terms' magnitudes bounded by the largest sum: |x| < 1 everywhere)
    for (size_t i = 0; i < ref.size(); i++) { tol[i] = mm_tol(C, C + 1.0); }
    check_close("matmul tuned: forward (timed on D itself)", to_floats(host_from(d_out, ref.size())), ref, tol);
    std::vector<float> tol_dinp(dinp_ref.size(), mm_tol(OC, OC + 1.0)), tol_dw(dw_ref.size(), mm_tol(BT, BT + 1.0));
    check_close("matmul tuned: dinp accumulated once (timed on the scratch)", to_floats(host_from(d_dinp, dinp_ref.size())),
                dinp_ref, tol_dinp);
    check_close("matmul tuned: dweight accumulated once (timed on the scratch)", to_floats(host_from(d_dw, dw_ref.size())),
                dw_ref, tol_dw);

    matmul_forward(d_out2, d_inp, d_w, d_b, BT, C, OC, (floatX*)NULL, 0, &t);  // a hit: the choice, once
    std::vector<floatX> out1 = host_from(d_out, ref.size()), out2 = host_from(d_out2, ref.size());
    report("matmul tuned: the D it leaves is its choice's", memcmp(out1.data(), out2.data(), out1.size() * sizeof(floatX)) == 0, "");
    char detail[200];
    snprintf(detail, sizeof(detail), "3 problems tuned (got %ld)", matmul_tuned_keys - keys0);
    report("matmul tuned: every new problem timed", matmul_tuned_keys - keys0 == 3, detail);
#if defined(LLMC_EMU)
    int second = 0, tuned = 0;
    for (int i = 0; i < MATMUL_ALGO_CACHE_SLOTS; i++) {
        const MatmulAlgoSlot* sl = &matmul_algo_cache[i];
        if (sl->used && sl->key.n == BT && (sl->key.m == OC || sl->key.m == C)) {
            tuned++;
            second += sl->algo.id / EMU_LT_CANDIDATE_STRIDE == 2;
        }
    }
    snprintf(detail, sizeof(detail), "the stand-in's fast candidate kept for %d of %d products (%ld changed from the first)",
             second, tuned, matmul_tune_changed - changed0);
    report("matmul tuned: the fastest candidate kept", second == 2 && tuned == 2 && matmul_tune_changed - changed0 == 3, detail);
#endif
    // the agreement: a table adopted whole after a clear gives its choices, no heuristic call
    std::vector<char> table((const char*)matmul_algo_table(), (const char*)matmul_algo_table() + matmul_algo_table_bytes());
    int used = 0;
    for (int i = 0; i < MATMUL_ALGO_CACHE_SLOTS; i++) { used += matmul_algo_cache[i].used; }
    matmul_algo_cache_clear();
    int adopted = matmul_algo_adopt(table.data());
    long calls0 = matmul_heuristic_calls;
    matmul_forward(d_out2, d_inp, d_w, d_b, BT, C, OC, (floatX*)NULL, 0, &t);
    out2 = host_from(d_out2, ref.size());
    snprintf(detail, sizeof(detail), "%d of %d algorithms adopted, %ld heuristic calls after", adopted, used,
             matmul_heuristic_calls - calls0);
    report("matmul tuned: a table adopted is used as chosen", adopted == used && used >= 3 && matmul_heuristic_calls == calls0 &&
           memcmp(out1.data(), out2.data(), out1.size() * sizeof(floatX)) == 0, detail);
    size_t held = cublaslt_tune(&t, 0);  // tuning off: the scratch freed
    report("matmul tuned: tuning off frees its scratch", held == 0 && t.tune_scratch == NULL && t.tune == 0, "");
    for (void* p : g_mm_allocs) { cudaCheck(cudaFree(p)); }
    g_mm_allocs.clear();
}

// ----------------------------------------------------------------------------
// fused classifier

static void test_classifier(cudaStream_t s) {
    const int BT = 74, V = 211, Vp = 256;
    const float dloss = 1.0f / BT;
    std::vector<float> logits_f;
    std::vector<floatX> logits = rand_x((size_t)BT * Vp, -4.0f, 4.0f, logits_f);
    // padded columns hold large values: if they took part in the softmax the loss would show it
    for (int i = 0; i < BT; i++) {
        for (int v = V; v < Vp; v++) {
            logits[(size_t)i * Vp + v] = hf2x(50.0f);
            logits_f[(size_t)i * Vp + v] = 50.0f;
        }
    }
    std::vector<int> targets(BT);
    for (int i = 0; i < BT; i++) { targets[i] = (int)(rng_u32() % V); }
    targets[0] = 0;
    targets[1] = V - 1;  // the edges of the real columns

    // CPU reference
    std::vector<float> probs((size_t)BT * Vp), losses_ref(BT), dlosses(BT, dloss), dlogits_ref((size_t)BT * Vp, 0.0f);
    softmax_forward(probs.data(), logits_f.data(), 1, BT, V, Vp);
    crossentropy_forward(losses_ref.data(), probs.data(), targets.data(), 1, BT, Vp);
    crossentropy_softmax_backward(dlogits_ref.data(), dlosses.data(), probs.data(), targets.data(), 1, BT, V, Vp);

    floatX* d_logits = dev_from(logits);
    float* d_losses = dev_from(std::vector<float>(BT, 0.0f));
    int* d_targets = dev_from(targets);
    std::vector<float> t_loss(BT);
    for (int i = 0; i < BT; i++) { t_loss[i] = 5e-5f + 2e-6f * fabsf(losses_ref[i]); }

    // loss only: logits untouched
    fused_classifier(d_logits, d_losses, d_targets, dloss, BT, V, Vp, 0, s);
    check_close("fused_classifier losses (no dlogits)", host_from(d_losses, (size_t)BT), losses_ref, t_loss);
    std::vector<floatX> after = host_from(d_logits, logits.size());
    report("fused_classifier write_dlogits=0 leaves logits", memcmp(after.data(), logits.data(), logits.size() * sizeof(floatX)) == 0, "");

    // loss and dlogits in place
    cudaCheck(cudaMemset(d_losses, 0, BT * sizeof(float)));
    fused_classifier(d_logits, d_losses, d_targets, dloss, BT, V, Vp, 1, s);
    check_close("fused_classifier losses", host_from(d_losses, (size_t)BT), losses_ref, t_loss);
    std::vector<float> dl = to_floats(host_from(d_logits, logits.size()));
    std::vector<float> t_dl(dl.size());
    bool pad_zero = true;
    for (int i = 0; i < BT; i++) {
        for (int v = 0; v < Vp; v++) {
            size_t k = (size_t)i * Vp + v;
            float r = dlogits_ref[k];
            t_dl[k] = dloss * 4e-5f * probs[k] + 1e-6f * fabsf(r) + (IS_BF16 ? ldexpf(fabsf(r), -8) : 0.0f);
            if (v >= V && float_to_bits(dl[k]) != 0u) { pad_zero = false; }  // +0.0 exactly
        }
    }
    check_close("fused_classifier dlogits", dl, dlogits_ref, t_dl);
    report("fused_classifier padded dlogits are 0", pad_zero, "");

    // The same in vocabulary tiles (--vocab-tile), against the same reference and tolerances:
    // the running (max, sum) merges one more partial state per tile, at most Vp / 8 = 32
    // fp32 roundings of the sum, 2e-6 relative, inside the loss's 2e-6 |loss| + 5e-5 and
    // the dlogits' 4e-5 p. Widths dividing Vp = 256 (8, 64, 256) and not (40: the tile
    // [200, 240) mixes real and padding columns, [240, 256) is padding only), each a
    // multiple of 16 bytes of floatX. The forward runs every tile, the last writing its
    // dlogits in place; the backward recomputes the others (here: uploads their logits again).
    float* d_max = dev_from(std::vector<float>(BT, 0.0f));
    float* d_sum = dev_from(std::vector<float>(BT, 0.0f));
    float* d_target = dev_from(std::vector<float>(BT, 0.0f));
    for (int Vt : {8, 40, 64, 256}) {
        char name[96];
        int last = (Vp - 1) / Vt * Vt;
        floatX* d_tile = dev_from(std::vector<floatX>((size_t)BT * Vt));
        // the columns [v0, v0 + w) of the logits as a (BT, w) tile on the device
        auto upload_tile = [&](int v0, int w) {
            std::vector<floatX> tile((size_t)BT * w);
            for (int i = 0; i < BT; i++) {
                memcpy(&tile[(size_t)i * w], &logits[(size_t)i * Vp + v0], (size_t)w * sizeof(floatX));
            }
            dev_set(d_tile, tile);
        };
        std::vector<float> tl((size_t)BT * Vp);
        for (int write = 0; write <= 1; write++) {
            cudaCheck(cudaMemset(d_losses, 0, BT * sizeof(float)));
            for (int v0 = 0; v0 < Vp; v0 += Vt) {
                int w = Vp - v0 < Vt ? Vp - v0 : Vt;
                upload_tile(v0, w);
                classifier_tile_forward(d_tile, d_max, d_sum, d_target, d_losses, d_targets, dloss, BT, v0, w, V, Vp, write, s);
            }
            snprintf(name, sizeof(name), "classifier tiles of %d: losses%s", Vt, write ? "" : " (no dlogits)");
            check_close(name, host_from(d_losses, (size_t)BT), losses_ref, t_loss);
        }
        // the last tile's dlogits from the forward, the others' from the backward kernel
        for (int v0 = last; v0 >= 0; v0 -= Vt) {
            int w = Vp - v0 < Vt ? Vp - v0 : Vt;
            if (v0 != last) {
                upload_tile(v0, w);
                classifier_tile_backward(d_tile, d_max, d_sum, d_targets, dloss, BT, v0, w, V, Vp, s);
            }
            std::vector<float> g = to_floats(host_from(d_tile, (size_t)BT * w));
            for (int i = 0; i < BT; i++) {
                memcpy(&tl[(size_t)i * Vp + v0], &g[(size_t)i * w], (size_t)w * sizeof(float));
            }
        }
        snprintf(name, sizeof(name), "classifier tiles of %d: dlogits", Vt);
        check_close(name, tl, dlogits_ref, t_dl);
        bool tile_pad_zero = true;
        for (int i = 0; i < BT; i++) {
            for (int v = V; v < Vp; v++) { tile_pad_zero = tile_pad_zero && float_to_bits(tl[(size_t)i * Vp + v]) == 0u; }
        }
        snprintf(name, sizeof(name), "classifier tiles of %d: padded dlogits are 0", Vt);
        report(name, tile_pad_zero, "");
        cudaCheck(cudaFree(d_tile));
    }

    cudaCheck(cudaFree(d_logits)); cudaCheck(cudaFree(d_losses)); cudaCheck(cudaFree(d_targets));
    cudaCheck(cudaFree(d_max)); cudaCheck(cudaFree(d_sum)); cudaCheck(cudaFree(d_target));
}

// ----------------------------------------------------------------------------
// AdamW

// the two bf16 neighbours of x: lo <= x <= hi (lo == hi when x is a bf16 value)
static void bf16_neighbours(float x, float* lo, float* hi) {
    uint32_t u = float_to_bits(x);
    float trunc = bits_to_float(u & 0xffff0000u);  // toward zero
    float away = (u & 0xffffu) ? bits_to_float((u & 0xffff0000u) + 0x10000u) : trunc;
    if (x >= 0) { *lo = trunc; *hi = away; } else { *lo = away; *hi = trunc; }
}

static void test_adamw(cudaStream_t s) {
    const size_t n = 100003;
    const float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, wd = 0.1f, grad_scale = 0.7f;
    const int t = 3;
    const unsigned int seed = 1234u;
    std::vector<float> master(n), m0(n), v0(n), grads_f;
    for (size_t i = 0; i < n; i++) {
        master[i] = rng_uniform(-1.0f, 1.0f);
        m0[i] = rng_uniform(-0.1f, 0.1f);
        v0[i] = rng_uniform(0.0f, 0.01f);
    }
    std::vector<floatX> grads = rand_x(n, -1.0f, 1.0f, grads_f);

    std::vector<float> p_ref = master, m_ref = m0, v_ref = v0;
    adamw_update(p_ref.data(), grads_f.data(), m_ref.data(), v_ref.data(), n, lr, beta1, beta2, eps, wd, grad_scale, t);

    float* d_master = dev_from(master);
    float* d_m = dev_from(m0);
    float* d_v = dev_from(v0);
    floatX* d_grads = dev_from(grads);
    floatX* d_params = dev_from(std::vector<floatX>(n));
    adamw_update_cuda(d_params, d_master, d_grads, d_m, d_v, n, lr, beta1, beta2, eps, wd, grad_scale, t, seed, s);
    std::vector<float> p_gpu = host_from(d_master, n), m_gpu = host_from(d_m, n), v_gpu = host_from(d_v, n);
    std::vector<floatX> params_gpu = host_from(d_params, n);

    double bc1 = 1.0 - pow((double)beta1, t), bc2 = 1.0 - pow((double)beta2, t);
    std::vector<float> t_m(n), t_v(n), t_p(n);
    for (size_t i = 0; i < n; i++) {
        double g = (double)grads_f[i] * grad_scale;
        t_m[i] = (float)(1e-6 * (fabs(beta1 * m0[i]) + fabs((1.0 - beta1) * g)) + 1e-30);
        t_v[i] = (float)(1e-6 * (beta2 * v0[i] + (1.0 - beta2) * g * g) + 1e-30);
        double denom = sqrt(v_ref[i] / bc2) + eps;
        double upd = (m_ref[i] / bc1) / denom;
        t_p[i] = (float)(ldexp(fabs(p_ref[i]), -21) + lr * (1e-6 * fabs(upd) + t_m[i] / bc1 / denom) + 1e-12);
    }
    check_close("adamw m", m_gpu, m_ref, t_m);
    check_close("adamw v", v_gpu, v_ref, t_v);
    check_close("adamw master", p_gpu, p_ref, t_p);

    // the compute copy against the GPU's own master
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        float got = hx2f(params_gpu[i]);
        if (IS_BF16) {
            float lo, hi;
            bf16_neighbours(p_gpu[i], &lo, &hi);
            if (!(got == lo || got == hi)) { bad++; }
        } else if (float_to_bits(got) != float_to_bits(p_gpu[i])) {
            bad++;
        }
    }
    char detail[128];
    snprintf(detail, sizeof(detail), "%zu of %zu wrong", bad, n);
    report(IS_BF16 ? "adamw params = a bf16 neighbour of master" : "adamw params == master", bad == 0, detail);

    // reproducibility of the rounding: same (seed, t) again on the same master -> same bits
    {
        // lr = 0 keeps the master (and so the value to round) fixed
        adamw_update_cuda(d_params, d_master, d_grads, d_m, d_v, n, 0.0f, beta1, beta2, eps, wd, grad_scale, t, seed, s);
        std::vector<floatX> a = host_from(d_params, n);
        adamw_update_cuda(d_params, d_master, d_grads, d_m, d_v, n, 0.0f, beta1, beta2, eps, wd, grad_scale, t, seed, s);
        std::vector<floatX> b = host_from(d_params, n);
        adamw_update_cuda(d_params, d_master, d_grads, d_m, d_v, n, 0.0f, beta1, beta2, eps, wd, grad_scale, t, seed + 1, s);
        std::vector<floatX> c = host_from(d_params, n);
        report("adamw params reproducible (same seed)", memcmp(a.data(), b.data(), n * sizeof(floatX)) == 0, "");
        if (IS_BF16) {
            report("adamw params differ with another seed", memcmp(a.data(), c.data(), n * sizeof(floatX)) != 0, "");
        }
    }

    // unbiasedness: lr = 0, grads = m = v = 0, so the master stays x and only the rounding varies
    {
        std::vector<floatX> zeros_x(n, hf2x(0.0f));
        std::vector<float> zeros(n, 0.0f);
        dev_set(d_grads, zeros_x);
        const float xs[2] = {1.0f + 1.0f / 384.0f,             // 1 + gap/3, gap = 2^-7 in [1,2)
                             -(3.0f + 0.7f / 64.0f)};          // f = 0.7 of gap 2^-6 in [2,4)
        for (int k = 0; k < 2; k++) {
            float x = xs[k];
            dev_set(d_master, std::vector<float>(n, x));
            dev_set(d_m, zeros);
            dev_set(d_v, zeros);
            adamw_update_cuda(d_params, d_master, d_grads, d_m, d_v, n, 0.0f, beta1, beta2, eps, 0.0f, 1.0f, 7, 99u + k, s);
            std::vector<floatX> pr = host_from(d_params, n);
            float lo, hi;
            bf16_neighbours(x, &lo, &hi);
            double sum = 0.0;
            for (size_t i = 0; i < n; i++) { sum += (double)hx2f(pr[i]) - (double)x; }
            double mean = sum / n;
            double gap = (double)hi - (double)lo;
            double f = gap > 0 ? ((double)x - lo) / gap : 0.0;
            double sigma = gap * sqrt(f * (1.0 - f) / n);
            bool ok = IS_BF16 ? fabs(mean) <= 5.0 * sigma : mean == 0.0;
            snprintf(detail, sizeof(detail), "x=%.9g mean-x=%.3g sigma=%.3g (round-to-nearest bias %.3g)",
                     x, mean, sigma, gap * (f < 0.5 ? f : 1.0 - f));
            report(IS_BF16 ? "adamw stochastic rounding unbiased (constant x)" : "adamw fp32 params exact (constant x)",
                   ok, detail);
        }
        // random values, errors in units of each value's gap: sum ~ 0 within 5 sqrt(sum f (1 - f))
        std::vector<float> xr(n);
        for (size_t i = 0; i < n; i++) { xr[i] = rng_uniform(-2.0f, 2.0f); }
        dev_set(d_master, xr);
        dev_set(d_m, zeros);
        dev_set(d_v, zeros);
        adamw_update_cuda(d_params, d_master, d_grads, d_m, d_v, n, 0.0f, beta1, beta2, eps, 0.0f, 1.0f, 11, 4321u, s);
        std::vector<floatX> pr = host_from(d_params, n);
        double z = 0.0, var = 0.0;
        size_t notneighbour = 0;
        for (size_t i = 0; i < n; i++) {
            float lo, hi;
            bf16_neighbours(xr[i], &lo, &hi);
            float got = hx2f(pr[i]);
            if (!IS_BF16) {
                if (got != xr[i]) { notneighbour++; }
                continue;
            }
            if (!(got == lo || got == hi)) { notneighbour++; }
            double gap = (double)hi - (double)lo;
            if (gap == 0.0) { continue; }
            double f = ((double)xr[i] - lo) / gap;
            z += ((double)got - xr[i]) / gap;
            var += f * (1.0 - f);
        }
        bool ok = notneighbour == 0 && fabs(z) <= 5.0 * sqrt(var);
        snprintf(detail, sizeof(detail), "sum of errors/gap=%.3g, 5 sigma=%.3g, %zu not neighbours", z, 5.0 * sqrt(var), notneighbour);
        report(IS_BF16 ? "adamw stochastic rounding unbiased (random x)" : "adamw fp32 params exact (random x)", ok, detail);
    }

    cudaCheck(cudaFree(d_master)); cudaCheck(cudaFree(d_m)); cudaCheck(cudaFree(d_v));
    cudaCheck(cudaFree(d_grads)); cudaCheck(cudaFree(d_params));
}

// ----------------------------------------------------------------------------
// global norm

static void test_global_norm(cudaStream_t s) {
    double* d_out = dev_from(std::vector<double>(1, -1.0));
    double* d_scratch = dev_from(std::vector<double>(GLOBAL_NORM_SCRATCH_DOUBLES, 0.0));
    const size_t sizes[3] = {100003, 5, 0};
    for (int k = 0; k < 3; k++) {
        size_t n = sizes[k];
        std::vector<float> g_f;
        std::vector<floatX> g = rand_x(n, -1.0f, 1.0f, g_f);
        floatX* d_g = dev_from(g);
        double ref = grad_norm_squared(g_f.data(), n);
        global_norm_squared(d_out, d_scratch, d_g, n, s);
        double got = host_from(d_out, 1)[0];
        global_norm_squared(d_out, d_scratch, d_g, n, s);
        double again = host_from(d_out, 1)[0];
        char name[96], detail[160];
        snprintf(name, sizeof(name), "global_norm_squared n=%zu", n);
        // the host's double sum in another order: a few double ulps apart (n of them at most);
        // a float rounding anywhere on the way is 1e-8 or more (n = 0: both exactly 0)
        bool ok = fabs(got - ref) <= 1e-12 * ref;
        snprintf(detail, sizeof(detail), "got %.17g ref %.17g rel err %.3g", got, ref, ref > 0 ? fabs(got - ref) / ref : fabs(got));
        report(name, ok, detail);
        snprintf(name, sizeof(name), "global_norm_squared n=%zu deterministic", n);
        report(name, memcmp(&got, &again, sizeof(double)) == 0, "");
        cudaCheck(cudaFree(d_g));
    }
    cudaCheck(cudaFree(d_out));
    cudaCheck(cudaFree(d_scratch));
}

// the clipping factor on the GPU (adamw_grad_scale_kernel) against the host engine's
// adamw_grad_scale: the same double arithmetic (sqrt and division correctly rounded on
// both), so the same bits; and AdamW reading that scale on the GPU gives the bits of AdamW
// given it from the host
static void test_grad_scale(cudaStream_t s) {
    const double sums[4] = {0.0, 0.25, 9.0, 12345.678};
    const float clips[3] = {0.0f, 1.0f, 2.5f};
    double* d_sum = dev_from(std::vector<double>(1, 0.0));
    float* d_out = dev_from(std::vector<float>(2, -1.0f));
    int bad = 0, cases = 0;
    for (int world = 1; world <= 3; world++) {
        for (int i = 0; i < 4; i++) {
            for (int k = 0; k < 3; k++) {
                cudaCheck(cudaMemcpy(d_sum, &sums[i], sizeof(double), cudaMemcpyHostToDevice));
                adamw_grad_scale_kernel<<<1, 1, 0, s>>>(d_out, d_out + 1, d_sum, world, clips[k]);
                cudaCheck(cudaGetLastError());
                std::vector<float> got = host_from(d_out, 2);
                float norm = 0.0f;
                float scale = adamw_grad_scale(sums[i], world, clips[k], &norm);
                bad += float_to_bits(got[0]) != float_to_bits(scale) || float_to_bits(got[1]) != float_to_bits(norm);
                cases++;
            }
        }
    }
    char detail[96];
    snprintf(detail, sizeof(detail), "%d of %d cases differ", bad, cases);
    report("adamw_grad_scale_kernel == host adamw_grad_scale (bits)", bad == 0, detail);

    // AdamW with the scale on the GPU vs the same scale from the host
    const size_t n = 4099;
    std::vector<float> g_f, p_f;
    std::vector<floatX> g = rand_x(n, -1.0f, 1.0f, g_f);
    rand_x(n, -1.0f, 1.0f, p_f);
    std::vector<float> out[2];
    float scale_h = 0.37f;
    float* d_scale = dev_from(std::vector<float>(1, scale_h));
    for (int k = 0; k < 2; k++) {
        floatX* d_g = dev_from(g);
        float* d_master = dev_from(p_f);
        float* d_m = dev_from(std::vector<float>(n, 0.0f));
        float* d_v = dev_from(std::vector<float>(n, 0.0f));
        adamw_update_cuda((floatX*)NULL, d_master, d_g, d_m, d_v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f,
                          k == 0 ? scale_h : 123.0f, 1, 7u, s, 0, k == 0 ? NULL : d_scale);  // k = 1: 123 is ignored
        out[k] = host_from(d_master, n);
        cudaCheck(cudaFree(d_g)); cudaCheck(cudaFree(d_master)); cudaCheck(cudaFree(d_m)); cudaCheck(cudaFree(d_v));
    }
    size_t differ = 0;
    for (size_t i = 0; i < n; i++) { differ += float_to_bits(out[0][i]) != float_to_bits(out[1][i]); }
    snprintf(detail, sizeof(detail), "%zu of %zu masters differ", differ, n);
    report("adamw with the scale on the GPU == the scale from the host (bits)", differ == 0, detail);
    cudaCheck(cudaFree(d_scale)); cudaCheck(cudaFree(d_sum)); cudaCheck(cudaFree(d_out));
}


// ----------------------------------------------------------------------------
// int8 blocks (zero3/quant.cuh) against zero3/quant.h
//
// Bit for bit, on runs of random values with outliers (1 in 61 x1000) and, in the long run,
// blocks made to hit every rule: zeros, +-inf, NaNs (the last one's payload kept, quietened),
// an inf and a NaN together, ties to even, -0, subnormals (a scale that underflows to 0; a
// 127 / amax that overflows), FLT_MAX, a huge outlier among small values; n = 0, 1, 5, 16,
// 256, 257, 2065 and 100003 (short last blocks, thread blocks of the quantise kernel only
// partly used), fp32 and bf16 input (quant.h given the widened floats). Checked: the
// quantised bytes equal; dequantised to fp32 and to bf16 the same values (a NaN for a NaN:
// its bits are the hardware's); the add variant equal to one rounding of q * scale + out
// (fmaf: quant.cuh says why), on data where the twice-rounded sum differs often enough that
// an unfused kernel fails, and quant.h's own add here either of the two (counted: which one
// this build's compiler made). The dequantising kernels read quant.h's bytes, so each kernel
// is checked on its own. Every output lies QUANT_LEAD bytes into its buffer (4-byte but not
// 8-byte aligned, as a rank block of 16 values quantised is 20 bytes) with QUANT_GUARD
// bytes after it; nothing outside may change. Then the rules on their own, independent of
// the host's arithmetic: ties to even, a NaN scale's bits; and an unaligned run refused.

#define QUANT_LEAD 20   // bytes before every output
#define QUANT_GUARD 64  // and after it; filled with 0xa5, checked untouched

static void zero_check(int rc) {
    if (rc != 0) { fprintf(stderr, "error: %s\n", zero_errmsg()); exit(EXIT_FAILURE); }
}

// bf16 by its bits, whatever floatX is: rounded to nearest even, a NaN quietened (what
// __float2bfloat16_rn gives), or cut to its top bits, a NaN kept one (a signalling one too)
static uint16_t bf16_round_bits(float f) {
    uint32_t u = float_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) { return (uint16_t)((u >> 16) | 0x0040u); }
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static std::vector<__nv_bfloat16> to_bf16(const std::vector<float>& x, std::vector<float>& xf) {
    std::vector<__nv_bfloat16> b(x.size());
    xf.resize(x.size());
    for (size_t i = 0; i < x.size(); i++) {
        uint32_t u = float_to_bits(x[i]);
        uint16_t h = (u & 0x7fffffffu) > 0x7f800000u ? (uint16_t)((u >> 16) | ((u >> 16) & 0x7fu ? 0u : 1u))
                                                     : bf16_round_bits(x[i]);
        __nv_bfloat16_raw r;
        r.x = h;
        b[i] = __nv_bfloat16(r);
        xf[i] = bits_to_float((uint32_t)h << 16);
    }
    return b;
}
// the same float: the same bits, or both NaN
static bool same_float(float a, float b) { return a != a ? b != b : float_to_bits(a) == float_to_bits(b); }

// a device buffer of QUANT_LEAD + bytes + QUANT_GUARD, every byte 0xa5; the data at + QUANT_LEAD
static unsigned char* quant_dev(size_t bytes) {
    unsigned char* d = NULL;
    cudaCheck(cudaMalloc(&d, QUANT_LEAD + bytes + QUANT_GUARD));
    cudaCheck(cudaMemset(d, 0xa5, QUANT_LEAD + bytes + QUANT_GUARD));
    return d;
}
// the data's bytes, and whether everything around them is untouched
static std::vector<unsigned char> quant_back(const unsigned char* d, size_t bytes, bool* around_ok) {
    std::vector<unsigned char> h = host_from(d, QUANT_LEAD + bytes + QUANT_GUARD);
    *around_ok = true;
    for (size_t i = 0; i < h.size(); i++) { *around_ok &= (i >= QUANT_LEAD && i < QUANT_LEAD + bytes) || h[i] == 0xa5; }
    return std::vector<unsigned char>(h.begin() + QUANT_LEAD, h.begin() + QUANT_LEAD + bytes);
}

// the kernel's bytes of x (fp32 or bf16) against quant.h's of xf (x as floats)
template <typename T>
static void check_quant_bytes(const char* name, const std::vector<T>& x, const std::vector<float>& xf, cudaStream_t s) {
    size_t n = xf.size(), qb = zero_quant_bytes(n);
    std::vector<unsigned char> want(qb);
    zero_quantize(xf.data(), n, want.data());
    T* d_x = dev_from(x);
    unsigned char* d_q = quant_dev(qb);
    zero_check(zero_quantize_cuda(d_x, n, d_q + QUANT_LEAD, s));
    bool around_ok;
    std::vector<unsigned char> got = quant_back(d_q, qb, &around_ok);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < qb; i++) {
        if (got[i] != want[i] && bad++ == 0) { first = i; }
    }
    char detail[160];
    snprintf(detail, sizeof(detail), "%zu of %zu bytes differ%s", bad, qb, around_ok ? "" : "; WRITTEN OUTSIDE");
    if (bad > 0) {
        snprintf(detail + strlen(detail), sizeof(detail) - strlen(detail), "; first at %zu: %02x, quant.h %02x", first,
                 got[first], want[first]);
    }
    report(name, bad == 0 && around_ok, detail);
    cudaCheck(cudaFree(d_x)); cudaCheck(cudaFree(d_q));
}

// the kernels' dequantisation of quant.h's bytes of xf: to fp32, to bf16, and added into out0;
// *differs counts the elements where one rounding and two give other sums
static void check_dequant(const char* name, const std::vector<float>& xf, cudaStream_t s, size_t* differs) {
    size_t n = xf.size(), qb = zero_quant_bytes(n);
    std::vector<unsigned char> q(qb);
    zero_quantize(xf.data(), n, q.data());
    std::vector<float> want(n), out0(n), want_add(n), host_add;
    zero_dequantize(q.data(), n, want.data(), 0);
    for (size_t i = 0; i < n; i++) { out0[i] = rng_uniform(-2.0f, 2.0f); }
    host_add = out0;
    zero_dequantize(q.data(), n, host_add.data(), 1);  // as this build's compiler made it: fused or not
    size_t host_fused = 0, host_neither = 0;
    for (size_t i = 0; i < n; i++) {
        const unsigned char* blk = &q[(i / ZERO_QUANT_BLOCK) * (sizeof(float) + ZERO_QUANT_BLOCK)];
        float scale;
        memcpy(&scale, blk, sizeof(float));
        float qi = (float)(int8_t)blk[sizeof(float) + i % ZERO_QUANT_BLOCK];
        volatile float p = qi * scale;  // (stored: not contracted)
        float twice = out0[i] + p;
        want_add[i] = fmaf(qi, scale, out0[i]);
        *differs += !same_float(twice, want_add[i]);
        host_fused += !same_float(host_add[i], twice) && same_float(host_add[i], want_add[i]);
        host_neither += !same_float(host_add[i], twice) && !same_float(host_add[i], want_add[i]);
    }
    unsigned char* d_q = quant_dev(qb);
    float* d_f = (float*)quant_dev(n * sizeof(float));
    __nv_bfloat16* d_b = (__nv_bfloat16*)quant_dev(n * sizeof(__nv_bfloat16));
    unsigned char* d_add = quant_dev(n * sizeof(float));
    if (n > 0) {
        cudaCheck(cudaMemcpy(d_q + QUANT_LEAD, q.data(), qb, cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(d_add + QUANT_LEAD, out0.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    }
    zero_check(zero_dequantize_cuda(d_q + QUANT_LEAD, n, (float*)((unsigned char*)d_f + QUANT_LEAD), s));
    zero_check(zero_dequantize_cuda(d_q + QUANT_LEAD, n, (__nv_bfloat16*)((unsigned char*)d_b + QUANT_LEAD), s));
    zero_check(zero_dequantize_add_cuda(d_q + QUANT_LEAD, n, (float*)(d_add + QUANT_LEAD), s));
    bool ok_f, ok_b, ok_a;
    std::vector<unsigned char> fb = quant_back((unsigned char*)d_f, n * sizeof(float), &ok_f);
    std::vector<unsigned char> bb = quant_back((unsigned char*)d_b, n * sizeof(__nv_bfloat16), &ok_b);
    std::vector<unsigned char> ab = quant_back(d_add, n * sizeof(float), &ok_a);
    size_t bad_f = 0, bad_b = 0, bad_a = 0;
    for (size_t i = 0; i < n; i++) {
        float f, a;
        uint16_t bits;
        memcpy(&f, &fb[i * 4], 4); memcpy(&a, &ab[i * 4], 4); memcpy(&bits, &bb[i * 2], 2);
        bad_f += !same_float(f, want[i]);
        bad_b += !same_float(bits_to_float((uint32_t)bits << 16), bits_to_float((uint32_t)bf16_round_bits(want[i]) << 16));
        bad_a += !same_float(a, want_add[i]);
    }
    char nm[256], detail[200];
    snprintf(nm, sizeof(nm), "%s: dequantised to fp32 == quant.h", name);
    snprintf(detail, sizeof(detail), "%zu of %zu differ%s", bad_f, n, ok_f ? "" : "; WRITTEN OUTSIDE");
    report(nm, bad_f == 0 && ok_f, detail);
    snprintf(nm, sizeof(nm), "%s: dequantised to bf16 == quant.h's rounded", name);
    snprintf(detail, sizeof(detail), "%zu of %zu differ%s", bad_b, n, ok_b ? "" : "; WRITTEN OUTSIDE");
    report(nm, bad_b == 0 && ok_b, detail);
    snprintf(nm, sizeof(nm), "%s: out += q * scale == fmaf(q, scale, out)", name);
    snprintf(detail, sizeof(detail), "%zu of %zu differ%s; quant.h's add in this build: %zu fused, %zu neither", bad_a, n,
             ok_a ? "" : "; WRITTEN OUTSIDE", host_fused, host_neither);
    report(nm, bad_a == 0 && ok_a && host_neither == 0, detail);
    cudaCheck(cudaFree(d_q)); cudaCheck(cudaFree(d_f)); cudaCheck(cudaFree(d_b)); cudaCheck(cudaFree(d_add));
}

// n random values in (-1, 1), 1 in 61 times 1000; with 14 blocks or more, blocks 1-13 made
// to hit the rules
static std::vector<float> quant_case(size_t n) {
    std::vector<float> x(n);
    for (size_t i = 0; i < n; i++) { x[i] = rng_uniform(-1.0f, 1.0f) * (i % 61 == 7 ? 1000.0f : 1.0f); }
    if (n < 14 * ZERO_QUANT_BLOCK) { return x; }
    auto blk = [&](int b) { return &x[(size_t)b * ZERO_QUANT_BLOCK]; };
    for (int i = 0; i < ZERO_QUANT_BLOCK; i++) {
        blk(1)[i] = 0.0f;                                                      // zeros: scale 0
        blk(7)[i] = ((float)(i % 253) - 126.0f) * 0.5f;                        // ties (amax 127 below: inv = 1)
        blk(8)[i] = ldexpf((float)(i % 101 - 50), -149);                      // amax / 127 underflows to 0
        blk(9)[i] = i % 4 == 0 ? 0.0f : 1e-38f * (float)(i % 7 - 3);           // 127 / amax overflows; zeros among
        blk(12)[i] *= 1e-3f;                                                   // all small
        blk(13)[i] = -0.0f;                                                    // -0 but one
    }
    blk(2)[17] = INFINITY;
    blk(3)[250] = -INFINITY;
    blk(4)[10] = bits_to_float(0x7fc00077u);                                   // NaNs: the last one's, quietened
    blk(4)[100] = bits_to_float(0x7f800005u);
    blk(4)[200] = bits_to_float(0xff800123u);
    blk(5)[3] = INFINITY; blk(5)[250] = bits_to_float(0x7fc00001u);           // inf, then NaN
    blk(6)[3] = bits_to_float(0xffc00002u); blk(6)[250] = -INFINITY;          // NaN, then inf
    blk(7)[0] = 127.0f;
    blk(10)[5] = FLT_MAX; blk(10)[6] = -FLT_MAX;                              // 127 * scale may round past FLT_MAX
    blk(11)[128] = 1e30f;                                                      // the rest rounds to 0
    blk(13)[9] = -3.0f;
    return x;
}

static void test_quant(cudaStream_t s) {
    const size_t sizes[] = {100003, 0, 1, 5, 16, 256, 257, 2065};
    size_t differs = 0;
    char nm[128], detail[160];
    for (size_t n : sizes) {
        std::vector<float> x = quant_case(n), xb_f;
        std::vector<__nv_bfloat16> xb = to_bf16(x, xb_f);
        snprintf(nm, sizeof(nm), "quantise fp32 n=%zu: bytes == quant.h", n);
        check_quant_bytes(nm, x, x, s);
        snprintf(nm, sizeof(nm), "quantise bf16 n=%zu: bytes == quant.h of the widened values", n);
        check_quant_bytes(nm, xb, xb_f, s);
        snprintf(nm, sizeof(nm), "n=%zu", n);
        check_dequant(nm, x, s, &differs);
    }
    snprintf(detail, sizeof(detail), "%zu elements", differs);
    report("the add's data tells one rounding from two", differs > 0, detail);

    // the rules on their own: ties to even (scale 127 / 127 = 1), a NaN scale's bits (the last
    // NaN, quietened) and its q = 0
    const float ties[6] = {127.0f, 0.5f, 1.5f, 2.5f, -2.5f, -0.5f};
    const int8_t ties_q[6] = {127, 0, 2, 2, -2, 0};
    const float nans[4] = {1.0f, bits_to_float(0x7fa00005u), 2.0f, bits_to_float(0xff800123u)};
    for (int k = 0; k < 2; k++) {
        std::vector<float> x(k == 0 ? ties : nans, k == 0 ? ties + 6 : nans + 4);
        float* d_x = dev_from(x);
        unsigned char* d_q = quant_dev(zero_quant_bytes(x.size()));
        zero_check(zero_quantize_cuda(d_x, x.size(), d_q + QUANT_LEAD, s));
        bool around_ok;
        std::vector<unsigned char> got = quant_back(d_q, zero_quant_bytes(x.size()), &around_ok);
        uint32_t scale_bits;
        memcpy(&scale_bits, got.data(), 4);
        bool ok = around_ok && scale_bits == (k == 0 ? float_to_bits(1.0f) : 0x7fc00123u);
        for (size_t i = 0; i < x.size(); i++) { ok &= (int8_t)got[4 + i] == (k == 0 ? ties_q[i] : 0); }
        snprintf(detail, sizeof(detail), "scale %08x", scale_bits);
        report(k == 0 ? "quantise: ties to even (127 0.5 1.5 2.5 -2.5 -0.5 -> 127 0 2 2 -2 0)"
                      : "quantise: a NaN block's scale is its last NaN quietened (0xff800123 -> 7fc00123), q = 0",
               ok, detail);
        cudaCheck(cudaFree(d_x)); cudaCheck(cudaFree(d_q));
    }

    // a quantised run that does not start 4-byte aligned is refused, nothing launched
    float* d_x = dev_from(std::vector<float>(5, 1.0f));
    unsigned char* d_q = quant_dev(zero_quant_bytes(5));
    bool refused = zero_quantize_cuda(d_x, 5, d_q + QUANT_LEAD + 1, s) != 0 && strstr(zero_errmsg(), "aligned") != NULL &&
                   zero_dequantize_cuda(d_q + QUANT_LEAD + 2, 5, d_x, s) != 0 &&
                   zero_dequantize_add_cuda(d_q + QUANT_LEAD + 3, 5, d_x, s) != 0;
    bool around_ok;
    quant_back(d_q, 0, &around_ok);
    report("quantise and dequantise refuse a run not 4-byte aligned", refused && around_ok, zero_errmsg());
    cudaCheck(cudaFree(d_x)); cudaCheck(cudaFree(d_q));
}

// ----------------------------------------------------------------------------
// flash attention
//
// attention_flash_forward / attention_flash_backward against the CPU reference (llmc/attention.h:
// fp32, the full T x T softmax stored) and against the cuBLAS path on the GPU, on the same
// floatX inputs. Tolerances: tol_i = atol_rel * max_j |ref_j| + rtol * |ref_i| (+ a bound below).
//  fp32 (both builds, every sum): the two sides sum the same terms in other orders (tiles and an
//   online softmax rescaled at most T/32 times, vs sgemm and a stored softmax): a sum of n terms
//   is off by <= n u (sum of |terms|) at worst and ~sqrt(n) u typically, n <= T + hs = 384,
//   u = 2^-24: ~1e-6 of the tensor's max typically, 2.3e-5 x (sum |terms| / max) at worst.
//   forward out: atol_rel 1e-4 (out is an average of v rows: sum |terms| <= max|v| ~ max|out|).
//   backward dq, dk, dv: atol_rel 3e-4 (test_kernels_gpu's 1e-4 for T <= 129 with the margin
//   kept at T = 256; the sums there have some cancellation: sum |terms| a few times max).
//   lse (fp32 in both builds): m + log(l) with scores off by <= (hs + 1) u sum_d |scale q_d k_d|
//   <= 129 u sqrt(hs) < 1e-4 at worst on each side: atol_rel 5e-5 of max|lse| (~5: 2.5e-4).
//  bf16 adds the roundings of floatX outputs. forward out: one rounding, <= 2^-8 |out|: rtol 8e-3
//   (x2). backward: the result dqkv0 + gradient is rounded once: rtol 8e-3 (x2); and the flash
//   backward forms D_i = dO_i . O_i from the bf16 out, whose elements are off by <= 2^-8 |O_id|,
//   so |dD_i| <= E_i = 2^-8 sum_d |dO_id O_id|. D enters dS_ij = P_ij (dP_ij - D_i), which moves
//   dQ_id by <= scale E_i sum_j P_ij |k_jd| and dK_jd by <= scale sum_i P_ij E_i |q_id| (dV does
//   not use D). That bound is added per element, computed from the CPU's out and att.
//  bf16's tensor-core kernels (llmc/attention_tc.cuh) also round, to bf16, the operands they
//   form themselves: the unnormalized probabilities before O = P V and dV = P^T dO, and dS
//   before dQ = dS K and dK = dS^T Q, each <= 2^-9 of itself. Bounds per element, from the
//   CPU's att (P) and dpreatt (dS), with a factor 2 for the tensor cores' own fp32 sums:
//   out_id 2^-8 sum_j P_ij |v_jd|; dV_jd 2^-8 sum_i P_ij |dO_id|; dQ_id 2^-8 scale sum_j
//   |dS_ij| |k_jd|; dK_jd 2^-8 scale sum_i |dS_ij| |q_id| (scale = 1/sqrt(hs)).
//  vs the cuBLAS path: by the triangle inequality, the flash tolerance plus the cuBLAS path's own
//   tolerance against the CPU (test_kernels_gpu.cu's TOL_ATTN_*: fp32 1e-4; bf16 2e-2 forward and
//   3e-2 backward, both of the max and of |ref|: it stores the softmax and its gradient in bf16),
//   all measured against the CPU reference. (Those were set for T <= 129: if only this check
//   fails at T = 256 while the flash-vs-CPU check passes, the cuBLAS path is the one off.)
//  determinism: the backward twice from the same dqkv gives bitwise the same dqkv; the forward
//   twice, the same out and lse.
struct AttnTol { double atol_rel, rtol; };
#if defined(ENABLE_FP32)
static const AttnTol FLASH_FWD = {1e-4, 1e-4}, FLASH_BWD = {3e-4, 1e-4};
static const AttnTol CUBLAS_FWD = {1e-4, 1e-4}, CUBLAS_BWD = {1e-4, 1e-4};
#else
static const AttnTol FLASH_FWD = {1e-4, 8e-3}, FLASH_BWD = {3e-4, 8e-3};
static const AttnTol CUBLAS_FWD = {2e-2, 2e-2}, CUBLAS_BWD = {3e-2, 3e-2};
#endif
static const AttnTol FLASH_LSE = {5e-5, 1e-5};
static AttnTol tol_plus(AttnTol a, AttnTol b) { return AttnTol{a.atol_rel + b.atol_rel, a.rtol + b.rtol}; }

// tol_i = t.atol_rel * max_j |ref_j| + t.rtol * |ref_i| + extra_i (extra may be empty)
static std::vector<float> attn_tol(const std::vector<float>& ref, AttnTol t, const std::vector<float>& extra) {
    double mx = 0.0;
    for (size_t i = 0; i < ref.size(); i++) { mx = fmax(mx, fabs((double)ref[i])); }
    std::vector<float> tol(ref.size());
    for (size_t i = 0; i < ref.size(); i++) {
        tol[i] = (float)(t.atol_rel * mx + t.rtol * fabs((double)ref[i]) + (extra.empty() ? 0.0 : extra[i]));
    }
    return tol;
}

// part 0/1/2 (q/k/v) of a (B*T, 3, C) tensor, as (B*T, C)
static std::vector<float> qkv_part(const std::vector<float>& x, int BT, int C, int part) {
    std::vector<float> p((size_t)BT * C);
    for (int bt = 0; bt < BT; bt++) {
        memcpy(&p[(size_t)bt * C], &x[(size_t)bt * 3 * C + (size_t)part * C], C * sizeof(float));
    }
    return p;
}

static void test_attention_flash(int B, int NH, int T, int hs, cublasHandle_t cublas, cudaStream_t s) {
    const int C = NH * hs, BT = B * T;
    const size_t BTC = (size_t)BT * C, BT3C = 3 * BTC, BHT = (size_t)B * NH * T, BHTT = BHT * T;
    const double scale = 1.0 / sqrt((double)hs);
    char shape[64], name[160];
    snprintf(shape, sizeof(shape), "B%d NH%d T%d hs%d", B, NH, T, hs);
    if (!attention_use_flash(T, hs)) {
        snprintf(name, sizeof(name), "attention_use_flash %s", shape);
        report(name, false, "refused");
        return;
    }

    std::vector<float> qkv_f, dout_f, dqkv0_f;
    std::vector<floatX> qkv = rand_x(BT3C, -1.0f, 1.0f, qkv_f);
    std::vector<floatX> dout = rand_x(BTC, -1.0f, 1.0f, dout_f);
    // a small initial gradient: checks the accumulation without hiding the attention's part
    std::vector<floatX> dqkv0 = rand_x(BT3C, -0.1f, 0.1f, dqkv0_f);

    // CPU reference; lse from its scores in double
    std::vector<float> out_ref(BTC), preatt(BHTT), att(BHTT), dpreatt(BHTT), datt(BHTT), dqkv_ref = dqkv0_f;
    attention_forward(out_ref.data(), preatt.data(), att.data(), qkv_f.data(), B, T, C, NH);
    attention_backward(dqkv_ref.data(), dpreatt.data(), datt.data(), dout_f.data(), qkv_f.data(), att.data(), B, T, C, NH);
    std::vector<float> lse_ref(BHT);
    for (size_t r = 0; r < BHT; r++) {
        int t = (int)(r % T);
        const float* row = &preatt[r * T];
        double m = row[0], sum = 0.0;
        for (int j = 1; j <= t; j++) { m = fmax(m, (double)row[j]); }
        for (int j = 0; j <= t; j++) { sum += exp((double)row[j] - m); }
        lse_ref[r] = (float)(m + log(sum));
    }
    // the bound on the effect of the bf16 out in D, and the bf16 operands of the tensor-core
    // kernels (comment above); 0 in fp32
    std::vector<float> dbound(BT3C, 0.0f), obound(BTC, 0.0f);
    if (IS_BF16) {
        for (int b = 0; b < B; b++) {
            for (int h = 0; h < NH; h++) {
                const float* P = &att[((size_t)b * NH + h) * T * T];
                const float* dS = &dpreatt[((size_t)b * NH + h) * T * T];
                for (int i = 0; i < T; i++) {
                    for (int j = 0; j <= i; j++) {
                        double p = P[(size_t)i * T + j], ds = fabs((double)dS[(size_t)i * T + j]) * scale;
                        for (int d = 0; d < hs; d++) {
                            size_t o = ((size_t)b * T + i) * C + (size_t)h * hs + d;          // out and dout of row i
                            size_t qi = ((size_t)b * T + i) * 3 * C + (size_t)h * hs + d;    // q of row i
                            size_t kj = ((size_t)b * T + j) * 3 * C + C + (size_t)h * hs + d;  // k of row j
                            obound[o] += (float)(ldexp(p, -8) * fabs((double)qkv_f[kj + C]));   // v of row j
                            dbound[kj + C] += (float)(ldexp(p, -8) * fabs((double)dout_f[o]));  // dV
                            dbound[qi] += (float)(ldexp(ds, -8) * fabs((double)qkv_f[kj]));      // dQ
                            dbound[kj] += (float)(ldexp(ds, -8) * fabs((double)qkv_f[qi]));      // dK
                        }
                    }
                }
            }
        }
        for (int b = 0; b < B; b++) {
            for (int h = 0; h < NH; h++) {
                std::vector<double> E(T);
                for (int i = 0; i < T; i++) {
                    double e = 0.0;
                    for (int d = 0; d < hs; d++) {
                        size_t o = ((size_t)b * T + i) * C + (size_t)h * hs + d;
                        e += fabs((double)dout_f[o] * out_ref[o]);
                    }
                    E[i] = ldexp(e, -8);
                }
                const float* P = &att[((size_t)b * NH + h) * T * T];
                for (int i = 0; i < T; i++) {
                    for (int j = 0; j <= i; j++) {
                        double pe = (double)P[(size_t)i * T + j] * E[i] * scale;
                        for (int d = 0; d < hs; d++) {
                            size_t qi = ((size_t)b * T + i) * 3 * C + (size_t)h * hs + d;  // q of row i
                            size_t kj = ((size_t)b * T + j) * 3 * C + C + (size_t)h * hs + d;  // k of row j
                            dbound[qi] += (float)(pe * fabs((double)qkv_f[kj]));
                            dbound[kj] += (float)(pe * fabs((double)qkv_f[qi]));
                        }
                    }
                }
            }
        }
    }
    const std::vector<float> none;

    // flash path. NaN (all bits set) wherever the kernels must write: a skipped row shows up
    floatX* d_qkv = dev_from(qkv);
    floatX* d_dout = dev_from(dout);
    floatX* d_dqkv = dev_from(dqkv0);
    floatX* d_out = dev_from(std::vector<floatX>(BTC));
    float* d_lse = dev_from(std::vector<float>(attention_flash_lse_floats(B, NH, T)));
    float* d_scratch = dev_from(std::vector<float>(attention_flash_backward_scratch_floats(B, NH, T)));
    cudaCheck(cudaMemset(d_out, 0xff, BTC * sizeof(floatX)));
    cudaCheck(cudaMemset(d_lse, 0xff, BHT * sizeof(float)));
    cudaCheck(cudaMemset(d_scratch, 0xff, BHT * sizeof(float)));

    attention_flash_forward(d_out, d_lse, d_qkv, B, T, C, NH, s);
    std::vector<floatX> out_x = host_from(d_out, BTC);
    std::vector<float> lse = host_from(d_lse, BHT);
    std::vector<float> out = to_floats(out_x);
    snprintf(name, sizeof(name), "attention_flash_forward out vs CPU %s", shape);
    check_close(name, out, out_ref, attn_tol(out_ref, FLASH_FWD, obound));
    snprintf(name, sizeof(name), "attention_flash_forward lse vs CPU %s", shape);
    check_close(name, lse, lse_ref, attn_tol(lse_ref, FLASH_LSE, none));

    attention_flash_backward(d_dqkv, d_scratch, d_dout, d_qkv, d_out, d_lse, B, T, C, NH, s);
    std::vector<floatX> dqkv_x = host_from(d_dqkv, BT3C);
    std::vector<float> dqkv = to_floats(dqkv_x);
    const char* part_names[3] = {"dq", "dk", "dv"};
    for (int part = 0; part < 3; part++) {
        std::vector<float> ref = qkv_part(dqkv_ref, BT, C, part);
        snprintf(name, sizeof(name), "attention_flash_backward %s vs CPU %s", part_names[part], shape);
        check_close(name, qkv_part(dqkv, BT, C, part), ref, attn_tol(ref, FLASH_BWD, qkv_part(dbound, BT, C, part)));
    }

    // determinism: the same inputs again, scratch refilled with NaN
    attention_flash_forward(d_out, d_lse, d_qkv, B, T, C, NH, s);
    std::vector<floatX> out_x2 = host_from(d_out, BTC);
    std::vector<float> lse2 = host_from(d_lse, BHT);
    snprintf(name, sizeof(name), "attention_flash_forward deterministic %s", shape);
    report(name, memcmp(out_x.data(), out_x2.data(), BTC * sizeof(floatX)) == 0 &&
                 memcmp(lse.data(), lse2.data(), BHT * sizeof(float)) == 0, "");
    dev_set(d_dqkv, dqkv0);
    cudaCheck(cudaMemset(d_scratch, 0xff, BHT * sizeof(float)));
    attention_flash_backward(d_dqkv, d_scratch, d_dout, d_qkv, d_out, d_lse, B, T, C, NH, s);
    std::vector<floatX> dqkv_x2 = host_from(d_dqkv, BT3C);
    snprintf(name, sizeof(name), "attention_flash_backward deterministic %s", shape);
    report(name, memcmp(dqkv_x.data(), dqkv_x2.data(), BT3C * sizeof(floatX)) == 0, "");

    // the cuBLAS path on the same device inputs
    floatX* d_out_cb = dev_from(std::vector<floatX>(BTC));
    floatX* d_qkvr = dev_from(std::vector<floatX>(BT3C));
    floatX* d_att = dev_from(std::vector<floatX>(BHTT));
    floatX* d_dqkvr = dev_from(std::vector<floatX>(BT3C));
    floatX* d_datt = dev_from(std::vector<floatX>(BHTT));
    floatX* d_att_scratch = dev_from(std::vector<floatX>(attention_backward_scratch_elems(B, T, C)));
    floatX* d_dqkv_cb = dev_from(dqkv0);
    attention_forward(d_out_cb, d_qkvr, d_att, d_qkv, B, T, C, NH, cublas, s);
    attention_backward(d_dqkv_cb, d_dqkvr, d_datt, d_att_scratch, d_dout, d_qkvr, d_att, B, T, C, NH, cublas, s);
    std::vector<float> out_cb = to_floats(host_from(d_out_cb, BTC));
    std::vector<float> dqkv_cb = to_floats(host_from(d_dqkv_cb, BT3C));
    snprintf(name, sizeof(name), "attention_flash_forward out vs cuBLAS path %s", shape);
    check_close(name, out, out_cb, attn_tol(out_ref, tol_plus(FLASH_FWD, CUBLAS_FWD), obound));
    for (int part = 0; part < 3; part++) {
        std::vector<float> ref = qkv_part(dqkv_ref, BT, C, part);  // the tolerance's scale
        snprintf(name, sizeof(name), "attention_flash_backward %s vs cuBLAS path %s", part_names[part], shape);
        check_close(name, qkv_part(dqkv, BT, C, part), qkv_part(dqkv_cb, BT, C, part),
                    attn_tol(ref, tol_plus(FLASH_BWD, CUBLAS_BWD), qkv_part(dbound, BT, C, part)));
    }

    cudaCheck(cudaFree(d_qkv)); cudaCheck(cudaFree(d_dout)); cudaCheck(cudaFree(d_dqkv));
    cudaCheck(cudaFree(d_out)); cudaCheck(cudaFree(d_lse)); cudaCheck(cudaFree(d_scratch));
    cudaCheck(cudaFree(d_out_cb)); cudaCheck(cudaFree(d_qkvr)); cudaCheck(cudaFree(d_att));
    cudaCheck(cudaFree(d_dqkvr)); cudaCheck(cudaFree(d_datt)); cudaCheck(cudaFree(d_att_scratch));
    cudaCheck(cudaFree(d_dqkv_cb));
}

int main(void) {
    int dev = 0;
    cudaCheck(cudaGetDevice(&dev));
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, dev));
    printf("test_kernels2_gpu: %s, precision %s\n", prop.name, PRECISION_MODE);

    cudaStream_t s;
    cudaCheck(cudaStreamCreate(&s));
    MatmulCtx mm;
    cublaslt_init(&mm, s);
    for (size_t offset : {(size_t)0, (size_t)64, (size_t)128}) { test_matmul(&mm, offset); }
    test_matmul_algo_cache(&mm);
    test_matmul_tune(&mm);
    test_classifier(s);
    test_adamw(s);
    test_global_norm(s);
    test_grad_scale(s);
    test_quant(s);

    // flash attention: the shapes asked of it, then ragged last tiles (the trainer's sampling
    // loop runs the forward at every T from 1) and hs = 96
    cublasHandle_t cublas;
    cublasCheck(cublasCreate(&cublas));
    // (bf16: the tensor-core kernels, head size 80 too; fp32: the CUDA-core ones, multiples of 32)
    report(IS_BF16 ? "attention_use_flash: hs 64/80/96/128 yes, 48 and 112 no" : "attention_use_flash: hs 64/96/128 yes, 80 no",
           attention_use_flash(1024, 64) && attention_use_flash(1, 128) && attention_use_flash(2048, 96) &&
           attention_use_flash(1024, 80) == (bool)IS_BF16 && !attention_use_flash(1024, 48) && !attention_use_flash(64, 112), "");
    const struct { int B, NH, T, hs; } fa_shapes[] = {
        {2, 4, 64, 64}, {2, 4, 128, 64}, {2, 4, 256, 64},
        {2, 4, 64, 128}, {2, 4, 128, 128}, {2, 4, 256, 128},
        {1, 1, 1, 64}, {2, 3, 37, 64}, {1, 2, 100, 96}, {1, 2, 161, 128},
    };
    for (const auto& sh : fa_shapes) { test_attention_flash(sh.B, sh.NH, sh.T, sh.hs, cublas, s); }
    // the bf16 build's tensor-core kernels: head size 80 (GPT-3 2.7B's), ragged; and GPT-3's
    // context, T = 2048: 32 query tiles, the last seeing all 32 key tiles
    if (IS_BF16) {
        test_attention_flash(2, 2, 150, 80, cublas, s);
        test_attention_flash(1, 1, 2048, 64, cublas, s);
    }
    cublasCheck(cublasDestroy(cublas));
    cudaCheck(cudaDeviceSynchronize());

    cublaslt_free(&mm);
    cudaCheck(cudaStreamDestroy(s));
    printf("%d passed, %d failed\n", n_passed, n_failed);
    return n_failed == 0 ? 0 : 1;
}
