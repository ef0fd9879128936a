/*
 Tests of zero3/cpu_adam.h, the vectorized CPU AdamW of optimizer offload.

 Built WITHOUT -march=native, so the vector kernels are reached only through the
 header's run-time dispatch. Every ISA the CPU runs is forced in turn and compared with
 zero3/adamw.h's adamw_update (the trainer's scalar AdamW) run on copies:
 - sizes around the vector widths (tails), pointers offset by one float (unaligned),
   fp32 and bf16 gradients, with and without weight decay, grad_scale 1 and != 1,
   steps t = 1..5 (the state is re-synchronised to the reference after every step, so
   each step is checked against the single-step bound and errors cannot compound);
 - the bound is the one derived in cpu_adam.h: a few units of roundoff (u = 2^-24) of
   the terms of each formula, not of the result, because m and p can cancel;
 - the fp32 output equals the new p bitwise, the bf16 output equals cpu_adam_f32_to_bf16
   of it bitwise (so the vector rounding equals the scalar helper);
 - bitwise independence from the thread count (1 vs 2), the alignment and, between the
   vector ISAs, the ISA (they execute the same IEEE operations);
 - the bf16 helpers against an independent nearest-even rounding done in double;
 - every bad argument returns -1 with a message.

 build: make build/test_cpu_adam (compiles zero3/cpu_adam.c, adamw.c and util.c itself, without
 -march=native, so that the run-time ISA dispatch is what runs)
*/
#include <stdio.h>                // fprintf, stderr: the ISA chosen
#include <stdint.h>               // uint16_t, uint32_t, SIZE_MAX
#include <string.h>               // memcpy, memcmp
#include <stdlib.h>               // malloc, free
#include <math.h>                 // fabsf, sqrtf, pow, isnan, INFINITY, NAN
#include <float.h>                // FLT_MAX
#include <omp.h>                  // omp_set_num_threads: the thread-count independence test
#include <criterion/criterion.h>  // Test, cr_assert*, cr_assert_fail
#include "zero3/adamw.h"           // adamw_update: the reference
#include "zero3/cpu_adam.h"       // the code under test
#include "zero3/util.h"     // zero_error, zero_errmsg, zero_now_ms

// one float's unit roundoff
#define U_RND (1.0f / 16777216.0f)

// Criterion's asserts are slow when they pass: only call into it on failure
#define CHECK(cond, ...) do { if (!(cond)) { cr_assert_fail(__VA_ARGS__); } } while (0)

static const size_t sizes[] = {0, 1, 7, 8, 15, 16, 17, 31, 33, 1000, 4099, 100003};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static const char* const isas[] = {"scalar", "avx2", "avx512"};

// ----------------------------------------------------------------------------
// helpers

// xorshift64*: reproducible pseudo-random numbers without libc's rand state
static uint64_t rng_next(uint64_t* s) {
    *s ^= *s >> 12; *s ^= *s << 25; *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

// uniform in [-1, 1)
static float rng_uniform(uint64_t* s) {
    return (float)((double)(rng_next(s) >> 11) * (1.0 / 4503599627370496.0)) - 1.0f;
}

// a gradient: mostly uniform with a spread of magnitudes (scaled by 2^-10..2^5), some exact zeros
static float rng_grad(uint64_t* s) {
    uint64_t r = rng_next(s);
    if ((r & 31) == 0) { return 0.0f; }
    return rng_uniform(s) * ldexpf(1.0f, (int)((r >> 8) % 16) - 10);
}

static float* alloc_f(size_t n) {
    float* x = malloc((n + 2) * sizeof(float));  // +2: room for the unaligned offset
    cr_assert(x != NULL);
    return x;
}

// the elements a bf16 gradient widens to
static void widen_bf16(const uint16_t* b, float* f, size_t n) {
    for (size_t i = 0; i < n; i++) { f[i] = cpu_adam_bf16_to_f32(b[i]); }
}

// ----------------------------------------------------------------------------
// against adamw_update

typedef struct {
    const char* isa;
    size_t n;
    int offset;        // 0, or 1: every pointer one float past a malloc'd (16-byte aligned) block
    CpuAdamDtype gdt;
    float wd, gs, beta2;
    int out;           // 0 none, 1 fp32, 2 bf16
} Case;

static double worst_ulps = 0.0;  // the largest error seen on p, in u of the terms: reported

// runs steps 1..5 of one case; each step checks the bound, then copies the reference state
static void run_case(const Case* cs) {
    size_t n = cs->n;
    const int off = cs->offset;
    float *pb = alloc_f(n), *mb = alloc_f(n), *vb = alloc_f(n), *gb = alloc_f(n), *ob = alloc_f(n);
    float *prb = alloc_f(n), *mrb = alloc_f(n), *vrb = alloc_f(n), *grb = alloc_f(n);
    uint16_t* g16b = malloc((n + 2) * sizeof(uint16_t));
    cr_assert(g16b != NULL);
    float *p = pb + off, *m = mb + off, *v = vb + off, *gf = gb + off, *o = ob + off;
    float *pr = prb + off, *mr = mrb + off, *vr = vrb + off, *gr = grb + off;
    uint16_t* g16 = g16b + off;
    uint16_t* o16 = (uint16_t*)ob + off;  // bf16 output: unaligned by one element too
    uint64_t seed = 0x9e3779b97f4a7c15ull ^ (n * 131 + (size_t)off * 7 + (size_t)cs->gdt * 3 + (size_t)cs->out);
    for (size_t i = 0; i < n; i++) { p[i] = rng_uniform(&seed); m[i] = 0.0f; v[i] = 0.0f; }
    CpuAdamParams hp = { .lr = 3e-3f, .beta1 = 0.9f, .beta2 = cs->beta2, .eps = 1e-8f,
                         .weight_decay = cs->wd, .grad_scale = cs->gs, .t = 1 };
    for (int t = 1; t <= 5; t++) {
        hp.t = t;
        // gradients: fp32, or bf16 whose widened values feed the reference
        for (size_t i = 0; i < n; i++) {
            float x = rng_grad(&seed);
            if (cs->gdt == CPU_ADAM_BF16) { g16[i] = cpu_adam_f32_to_bf16(x); }
            else { gf[i] = x; }
        }
        if (cs->gdt == CPU_ADAM_BF16) { widen_bf16(g16, gr, n); } else { memcpy(gr, gf, n * sizeof(float)); }
        memcpy(pr, p, n * sizeof(float));
        memcpy(mr, m, n * sizeof(float));
        memcpy(vr, v, n * sizeof(float));
        adamw_update(pr, gr, mr, vr, n, hp.lr, hp.beta1, hp.beta2, hp.eps, hp.weight_decay, hp.grad_scale, t);

        const void* g = cs->gdt == CPU_ADAM_BF16 ? (const void*)g16 : (const void*)gf;
        void* out = cs->out == 0 ? NULL : cs->out == 1 ? (void*)o : (void*)o16;
        CpuAdamDtype odt = cs->out == 2 ? CPU_ADAM_BF16 : CPU_ADAM_FP32;
        // keep the inputs of this step for the bound (p, m, v are overwritten)
        float* p0 = alloc_f(n); float* m0 = alloc_f(n);
        memcpy(p0, p, n * sizeof(float));
        memcpy(m0, m, n * sizeof(float));
        int rc = cpu_adam_step(n ? p : NULL, n ? g : NULL, cs->gdt, n ? m : NULL, n ? v : NULL, n, &hp,
                               n ? out : NULL, odt);
        cr_assert_eq(rc, 0, "%s n=%zu: %s", cs->isa, n, zero_errmsg());

        // the bound of cpu_adam.h with a factor 2 of margin, plus an absolute floor far
        // below any value here (in case a product lands among the subnormals)
        const float bc1 = (float)(1.0 - pow((double)hp.beta1, t));
        const float bc2 = (float)(1.0 - pow((double)hp.beta2, t));
        const float step = (float)((double)hp.lr / (1.0 - pow((double)hp.beta1, t)));
        const float lrwd = hp.lr * hp.weight_decay;
        const float tiny = 1e-35f;
        for (size_t i = 0; i < n; i++) {
            float gi = gr[i] * hp.grad_scale;
            float tol_m = 3.0f * U_RND * (fabsf(hp.beta1 * m0[i]) + fabsf((1.0f - hp.beta1) * gi)) + tiny;
            float tol_v = 4.0f * U_RND * vr[i] + tiny;
            float p1 = p0[i] - lrwd * p0[i];
            float den = sqrtf(vr[i] / bc2) + hp.eps;
            float d = hp.lr * (mr[i] / bc1) / den;
            float tol_p = 2.0f * U_RND * (fabsf(pr[i]) + fabsf(p1)) + U_RND * fabsf(lrwd * p0[i])
                        + 16.0f * U_RND * fabsf(d) + 2.0f * step * tol_m / den + tiny;
            CHECK(fabsf(m[i] - mr[i]) <= tol_m, "%s n=%zu off=%d gdt=%d t=%d i=%zu: m %.9g vs ref %.9g (tol %g)",
                  cs->isa, n, off, cs->gdt, t, i, m[i], mr[i], tol_m);
            CHECK(fabsf(v[i] - vr[i]) <= tol_v, "%s n=%zu off=%d gdt=%d t=%d i=%zu: v %.9g vs ref %.9g (tol %g)",
                  cs->isa, n, off, cs->gdt, t, i, v[i], vr[i], tol_v);
            CHECK(fabsf(p[i] - pr[i]) <= tol_p, "%s n=%zu off=%d gdt=%d t=%d i=%zu: p %.9g vs ref %.9g (tol %g)",
                  cs->isa, n, off, cs->gdt, t, i, p[i], pr[i], tol_p);
            double scale = (double)U_RND * (fabs(pr[i]) + fabs(d));
            double ulps = fabs((double)p[i] - pr[i]) / scale;
            if (ulps > worst_ulps) { worst_ulps = ulps; }
            if (cs->out == 1) {
                CHECK(memcmp(&o[i], &p[i], sizeof(float)) == 0, "%s n=%zu i=%zu: fp32 out %.9g != p %.9g",
                      cs->isa, n, i, o[i], p[i]);
            } else if (cs->out == 2) {
                CHECK(o16[i] == cpu_adam_f32_to_bf16(p[i]), "%s n=%zu i=%zu: bf16 out %04x != round(p %.9g) %04x",
                      cs->isa, n, i, o16[i], p[i], cpu_adam_f32_to_bf16(p[i]));
            }
        }
        free(p0); free(m0);
        // next step from the reference's state: each step is checked on its own
        memcpy(p, pr, n * sizeof(float));
        memcpy(m, mr, n * sizeof(float));
        memcpy(v, vr, n * sizeof(float));
    }
    free(pb); free(mb); free(vb); free(gb); free(ob); free(prb); free(mrb); free(vrb); free(grb); free(g16b);
}

Test(cpu_adam, matches_adamw_update_every_isa) {
    int ran = 0;
    for (int k = 0; k < 3; k++) {
        if (cpu_adam_force_isa(isas[k]) != 0) {
            cr_log_info("ISA %s not supported here: skipped", isas[k]);
            continue;
        }
        cr_assert_str_eq(cpu_adam_isa(), isas[k]);
        ran++;
        worst_ulps = 0.0;
        for (size_t s = 0; s < NSIZES; s++)
        for (int off = 0; off <= 1; off++)
        for (int gdt = 0; gdt <= 1; gdt++)
        for (int wdk = 0; wdk <= 1; wdk++)
        for (int gsk = 0; gsk <= 1; gsk++)
        for (int out = 0; out <= 2; out++) {
            Case cs = { .isa = isas[k], .n = sizes[s], .offset = off, .gdt = gdt ? CPU_ADAM_BF16 : CPU_ADAM_FP32,
                        .wd = wdk ? 0.1f : 0.0f, .gs = gsk ? 0.37f : 1.0f,
                        .beta2 = (s & 1) ? 0.999f : 0.95f, .out = out };
            run_case(&cs);
        }
        fprintf(stderr, "cpu_adam %s: largest |p - ref| = %.2f u of (|p| + |update|)\n", isas[k], worst_ulps);
    }
    cr_assert(ran >= 1);
    cpu_adam_force_isa("auto");
}

// ----------------------------------------------------------------------------
// bitwise properties

// one update of n elements from a fixed seed into fresh arrays at pointer offset off
typedef struct { float *p, *m, *v; uint16_t* o; void* blocks[4]; } Result;

static Result run_fixed(size_t n, int off, CpuAdamDtype gdt) {
    Result r;
    float* pb = alloc_f(n); float* mb = alloc_f(n); float* vb = alloc_f(n);
    uint16_t* ob = malloc((n + 2) * sizeof(uint16_t));
    float* gb = alloc_f(n);
    cr_assert(ob != NULL);
    r.p = pb + off; r.m = mb + off; r.v = vb + off; r.o = ob + off;
    r.blocks[0] = pb; r.blocks[1] = mb; r.blocks[2] = vb; r.blocks[3] = ob;
    float* g = gb + off;
    uint16_t* g16 = (uint16_t*)gb + off;
    uint64_t seed = 12345;
    for (size_t i = 0; i < n; i++) {
        r.p[i] = rng_uniform(&seed);
        r.m[i] = 0.1f * rng_uniform(&seed);
        r.v[i] = 0.01f * fabsf(rng_uniform(&seed));
        float x = rng_grad(&seed);
        if (gdt == CPU_ADAM_BF16) { g16[i] = cpu_adam_f32_to_bf16(x); } else { g[i] = x; }
    }
    CpuAdamParams hp = { 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 7 };
    const void* gp = gdt == CPU_ADAM_BF16 ? (const void*)g16 : (const void*)g;
    cr_assert_eq(cpu_adam_step(r.p, gp, gdt, r.m, r.v, n, &hp, r.o, CPU_ADAM_BF16), 0, "%s", zero_errmsg());
    free(gb);
    return r;
}

static void result_free(Result* r) { for (int k = 0; k < 4; k++) { free(r->blocks[k]); } }

static void assert_same(const Result* a, const Result* b, size_t n, const char* what) {
    cr_assert(memcmp(a->p, b->p, n * sizeof(float)) == 0, "%s: p differs", what);
    cr_assert(memcmp(a->m, b->m, n * sizeof(float)) == 0, "%s: m differs", what);
    cr_assert(memcmp(a->v, b->v, n * sizeof(float)) == 0, "%s: v differs", what);
    cr_assert(memcmp(a->o, b->o, n * sizeof(uint16_t)) == 0, "%s: bf16 out differs", what);
}

Test(cpu_adam, bitwise_independent_of_threads_and_alignment) {
    const size_t n = 100003;  // 49 tiles, a tail of 3
    for (int k = 0; k < 3; k++) {
        if (cpu_adam_force_isa(isas[k]) != 0) { continue; }
        for (int gdt = 0; gdt <= 1; gdt++) {
            CpuAdamDtype dt = gdt ? CPU_ADAM_BF16 : CPU_ADAM_FP32;
            omp_set_num_threads(1);
            Result one = run_fixed(n, 0, dt);
            omp_set_num_threads(2);
            Result two = run_fixed(n, 0, dt);
            Result two_unaligned = run_fixed(n, 1, dt);
            assert_same(&one, &two, n, isas[k]);
            assert_same(&one, &two_unaligned, n, isas[k]);
            result_free(&one); result_free(&two); result_free(&two_unaligned);
        }
    }
    cpu_adam_force_isa("auto");
}

// AVX2 and AVX-512 run the same IEEE operations in the same order: equal bitwise
Test(cpu_adam, vector_isas_agree_bitwise) {
    if (cpu_adam_force_isa("avx2") != 0 || cpu_adam_force_isa("avx512") != 0) {
        cr_log_info("needs both avx2 and avx512: skipped");
        cpu_adam_force_isa("auto");
        return;
    }
    const size_t n = 4099;
    for (int gdt = 0; gdt <= 1; gdt++) {
        CpuAdamDtype dt = gdt ? CPU_ADAM_BF16 : CPU_ADAM_FP32;
        cpu_adam_force_isa("avx2");
        Result a = run_fixed(n, 1, dt);
        cpu_adam_force_isa("avx512");
        Result b = run_fixed(n, 1, dt);
        assert_same(&a, &b, n, "avx2 vs avx512");
        result_free(&a); result_free(&b);
    }
    cpu_adam_force_isa("auto");
}

// ----------------------------------------------------------------------------
// bf16 rounding

static uint16_t bits_of_bf16_expected(uint32_t u);

static float f32_of_bits(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }
static uint32_t bits_of_f32(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }

// the exact value of a non-NaN fp32 bit pattern's magnitude, in double; exponent field 255
// with a zero fraction decodes to 2^128, the "next value" past the largest finite one,
// which is what round-to-nearest compares against for overflow
static double decode_mag(uint32_t u) {
    uint32_t e = (u >> 23) & 0xff, f = u & 0x7fffff;
    return e == 0 ? ldexp((double)f, -149) : ldexp((double)(f | 0x800000), (int)e - 150);
}

// nearest-even rounding done independently: pick the closer of the two bf16 neighbours
static uint16_t bits_of_bf16_expected(uint32_t u) {
    uint32_t sign = u & 0x80000000u, mag = u & 0x7fffffffu;
    if (mag > 0x7f800000u) { return 0; }  // NaN: not handled here
    if (mag == 0x7f800000u) { return (uint16_t)(u >> 16); }
    uint32_t lo = mag & 0xffff0000u, hi = lo + 0x10000u;
    double x = decode_mag(mag), dl = x - decode_mag(lo), dh = decode_mag(hi) - x;
    uint32_t pick = dl < dh ? lo : dh < dl ? hi : (((lo >> 16) & 1) ? hi : lo);
    return (uint16_t)((sign | pick) >> 16);
}

Test(bf16, rounding_cases) {
    struct { uint32_t in; uint16_t out; } cases[] = {
        {0x3f800000u, 0x3f80},  // 1.0: exact
        {0x3f808000u, 0x3f80},  // tie, kept lsb even: down
        {0x3f818000u, 0x3f82},  // tie, kept lsb odd: up to even
        {0x3f807fffu, 0x3f80},  // just below the tie: down
        {0x3f808001u, 0x3f81},  // just above the tie: up
        {0xbf808000u, 0xbf80},  // negative tie: to even
        {0xbf818000u, 0xbf82},
        {0x3fffffffu, 0x4000},  // carry into the exponent
        {0x7f7fffffu, 0x7f80},  // FLT_MAX: past the largest bf16 + half ulp: infinity
        {0x7f7f7fffu, 0x7f7f},  // largest bf16 stays
        {0x7f7f8000u, 0x7f80},  // tie at the top, lsb odd: up to infinity
        {0x7f800000u, 0x7f80},  // +inf
        {0xff800000u, 0xff80},  // -inf
        {0x00000000u, 0x0000},  // +0
        {0x80000000u, 0x8000},  // -0
        {0x00008000u, 0x0000},  // subnormal tie: to even (zero)
        {0x00018000u, 0x0002},  // subnormal tie: to even (up)
        {0x00000001u, 0x0000},  // smallest subnormal: down
        {0x007fffffu, 0x0080},  // largest subnormal: up to the smallest normal
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        uint16_t got = cpu_adam_f32_to_bf16(f32_of_bits(cases[k].in));
        cr_assert_eq(got, cases[k].out, "%08x -> %04x, want %04x", cases[k].in, got, cases[k].out);
        cr_assert_eq(got, bits_of_bf16_expected(cases[k].in), "%08x: helper and independent reference differ", cases[k].in);
    }
    // NaNs stay NaNs with their sign, including payloads that would round into infinity
    uint32_t nans[] = {0x7fc00000u, 0x7f800001u, 0x7f80ffffu, 0x7fffffffu, 0xffc00000u, 0xff800001u, 0xffffffffu};
    for (size_t k = 0; k < sizeof(nans) / sizeof(nans[0]); k++) {
        uint16_t b = cpu_adam_f32_to_bf16(f32_of_bits(nans[k]));
        cr_assert(isnan(cpu_adam_bf16_to_f32(b)), "%08x -> %04x is not a NaN", nans[k], b);
        cr_assert_eq(b >> 15, nans[k] >> 31, "%08x -> %04x lost its sign", nans[k], b);
    }
}

Test(bf16, widen_round_trip_and_sweep) {
    // every bf16 widens exactly and rounds back to itself (NaNs to a NaN)
    for (uint32_t b = 0; b < 65536; b++) {
        float x = cpu_adam_bf16_to_f32((uint16_t)b);
        CHECK(bits_of_f32(x) == b << 16, "%04x widened to %08x", b, bits_of_f32(x));
        uint16_t back = cpu_adam_f32_to_bf16(x);
        if (isnan(x)) { CHECK(isnan(cpu_adam_bf16_to_f32(back)), "NaN %04x came back as %04x", b, back); }
        else { CHECK(back == b, "%04x came back as %04x", b, back); }
    }
    // a sweep of fp32 patterns (a prime stride touches every exponent and low-bit pattern),
    // plus the neighbourhood of every tie in a few binades, against the independent rounding
    for (uint64_t u = 0; u <= 0xffffffffull; u += 4093) {
        uint32_t x = (uint32_t)u;
        if ((x & 0x7fffffffu) > 0x7f800000u) { continue; }
        uint16_t got = cpu_adam_f32_to_bf16(f32_of_bits(x)), want = bits_of_bf16_expected(x);
        CHECK(got == want, "%08x -> %04x, want %04x", x, got, want);
    }
    for (uint32_t hi = 0x3f00; hi < 0x4100; hi++) {
        for (int d = -2; d <= 2; d++) {
            uint32_t x = (hi << 16) + 0x8000u + (uint32_t)d;
            uint16_t got = cpu_adam_f32_to_bf16(f32_of_bits(x)), want = bits_of_bf16_expected(x);
            CHECK(got == want, "%08x -> %04x, want %04x", x, got, want);
        }
    }
}

// the vector kernels' bf16 packing: with lr = 0 (and g = m = v = 0) p goes through unchanged,
// so the output is the rounding of chosen patterns: ties, neighbours of ties, NaNs, subnormals
Test(bf16, vector_output_rounding) {
    const size_t n = 4099;
    float* p = alloc_f(n); float* m = alloc_f(n); float* v = alloc_f(n); float* g = alloc_f(n);
    uint16_t* o = malloc(n * sizeof(uint16_t));
    cr_assert(o != NULL);
    for (int k = 0; k < 3; k++) {
        if (cpu_adam_force_isa(isas[k]) != 0) { continue; }
        uint64_t seed = 99;
        for (size_t i = 0; i < n; i++) {
            uint32_t hi = (uint32_t)(rng_next(&seed) >> 48);
            static const uint32_t lows[] = {0x8000, 0x7fff, 0x8001, 0x0000, 0xffff, 0x0001};
            uint32_t x = (hi << 16) | lows[i % 6];
            if (i % 97 == 0) { x = 0x7f800001u; }  // a signalling NaN that rounding would carry to inf
            if ((x & 0x7fffffffu) == 0) { x |= 0x10000u; }  // -0 would come out +0: avoid
            if ((x & 0x7f800000u) == 0x7f800000u && (x & 0x7fffffu) == 0) { x ^= 0x10000u; }  // inf - 0*inf = NaN: avoid
            p[i] = f32_of_bits(x);
            m[i] = v[i] = g[i] = 0.0f;
        }
        CpuAdamParams hp = { 0.0f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f, 1 };
        float* keep = alloc_f(n);
        memcpy(keep, p, n * sizeof(float));
        cr_assert_eq(cpu_adam_step(p, g, CPU_ADAM_FP32, m, v, n, &hp, o, CPU_ADAM_BF16), 0);
        for (size_t i = 0; i < n; i++) {
            if (isnan(keep[i])) {
                CHECK(isnan(p[i]) && isnan(cpu_adam_bf16_to_f32(o[i])), "%s i=%zu: NaN lost (%04x)", isas[k], i, o[i]);
                continue;
            }
            CHECK(bits_of_f32(p[i]) == bits_of_f32(keep[i]), "%s i=%zu: p changed with lr = 0", isas[k], i);
            CHECK(o[i] == bits_of_bf16_expected(bits_of_f32(keep[i])), "%s i=%zu: %08x -> %04x, want %04x",
                  isas[k], i, bits_of_f32(keep[i]), o[i], bits_of_bf16_expected(bits_of_f32(keep[i])));
        }
        free(keep);
        // infinities: a step overflowing to inf drives p to +-inf, whose bf16 is +-inf
        float pi[17], mi[17], vi[17], gi[17];
        uint16_t oi[17];
        for (int i = 0; i < 17; i++) { pi[i] = 1.0f; mi[i] = vi[i] = 0.0f; gi[i] = (i & 1) ? 1.0f : -1.0f; }
        CpuAdamParams big = { 1e38f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f, 1 };  // lr / (1 - 0.9) overflows float
        cr_assert_eq(cpu_adam_step(pi, gi, CPU_ADAM_FP32, mi, vi, 17, &big, oi, CPU_ADAM_BF16), 0);
        for (int i = 0; i < 17; i++) {
            cr_assert(isinf(pi[i]) && (pi[i] > 0) == (gi[i] < 0), "%s i=%d: p = %g", isas[k], i, pi[i]);
            cr_assert_eq(oi[i], (pi[i] > 0) ? 0x7f80 : 0xff80, "%s i=%d: %04x", isas[k], i, oi[i]);
        }
    }
    cpu_adam_force_isa("auto");
    free(p); free(m); free(v); free(g); free(o);
}

// ----------------------------------------------------------------------------
// dispatch and bad arguments

Test(cpu_adam, dispatch) {
    cr_assert_eq(cpu_adam_force_isa("auto"), 0);
    const char* best = cpu_adam_isa();
    int has512 = __builtin_cpu_supports("avx512f");
    int has2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    cr_assert_str_eq(best, has512 ? "avx512" : has2 ? "avx2" : "scalar");
    fprintf(stderr, "cpu_adam dispatch picks %s\n", best);
    cr_assert_eq(cpu_adam_force_isa("scalar"), 0);
    cr_assert_str_eq(cpu_adam_isa(), "scalar");
    cr_assert_eq(cpu_adam_force_isa("avx512"), has512 ? 0 : -1);
    cr_assert_eq(cpu_adam_force_isa("avx2"), has2 ? 0 : -1);
    cr_assert_eq(cpu_adam_force_isa("sse9"), -1);
    cr_assert(strstr(zero_errmsg(), "sse9") != NULL);
    cr_assert_eq(cpu_adam_force_isa(NULL), 0);
    cr_assert_str_eq(cpu_adam_isa(), best);
}

Test(cpu_adam, bad_arguments) {
    float p[4] = {0}, m[4] = {0}, v[4] = {0}, g[4] = {0};
    uint16_t o[4];
    CpuAdamParams hp = { 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1 };
    cr_assert_eq(cpu_adam_step(p, g, CPU_ADAM_FP32, m, v, 4, NULL, NULL, CPU_ADAM_FP32), -1);
    cr_assert_eq(cpu_adam_step(NULL, g, CPU_ADAM_FP32, m, v, 4, &hp, NULL, CPU_ADAM_FP32), -1);
    cr_assert(strstr(zero_errmsg(), "NULL") != NULL);
    cr_assert_eq(cpu_adam_step(p, NULL, CPU_ADAM_FP32, m, v, 4, &hp, NULL, CPU_ADAM_FP32), -1);
    cr_assert_eq(cpu_adam_step(p, g, CPU_ADAM_FP32, NULL, v, 4, &hp, NULL, CPU_ADAM_FP32), -1);
    cr_assert_eq(cpu_adam_step(p, g, CPU_ADAM_FP32, m, NULL, 4, &hp, NULL, CPU_ADAM_FP32), -1);
    cr_assert_eq(cpu_adam_step(p, g, CPU_ADAM_FP32, m, v, SIZE_MAX, &hp, NULL, CPU_ADAM_FP32), -1);
    cr_assert(strstr(zero_errmsg(), "overflow") != NULL);
    cr_assert_eq(cpu_adam_step(p, g, CPU_ADAM_FP32, m, v, SIZE_MAX / 4, &hp, NULL, CPU_ADAM_FP32), -1);
    cr_assert_eq(cpu_adam_step(p, g, (CpuAdamDtype)7, m, v, 4, &hp, NULL, CPU_ADAM_FP32), -1);
    cr_assert_eq(cpu_adam_step(p, g, CPU_ADAM_FP32, m, v, 4, &hp, o, (CpuAdamDtype)7), -1);
    CpuAdamParams bad = hp; bad.t = 0;
    cr_assert_eq(cpu_adam_step(p, g, CPU_ADAM_FP32, m, v, 4, &bad, NULL, CPU_ADAM_FP32), -1);
    cr_assert(strstr(zero_errmsg(), "t = 0") != NULL);
    bad = hp; bad.beta1 = 1.0f;
    cr_assert_eq(cpu_adam_step(p, g, CPU_ADAM_FP32, m, v, 4, &bad, NULL, CPU_ADAM_FP32), -1);
    bad = hp; bad.beta2 = NAN;
    cr_assert_eq(cpu_adam_step(p, g, CPU_ADAM_FP32, m, v, 4, &bad, NULL, CPU_ADAM_FP32), -1);
    // nothing was touched by the failed calls
    for (int i = 0; i < 4; i++) { cr_assert(p[i] == 0.0f && m[i] == 0.0f && v[i] == 0.0f); }
    // n = 0 is a valid empty update, even with NULL arrays
    cr_assert_eq(cpu_adam_step(NULL, NULL, CPU_ADAM_FP32, NULL, NULL, 0, &hp, NULL, CPU_ADAM_FP32), 0);
}

// cpu_adam_grad_add: every element one add (0 + g on the first), fp32 or bf16 widened
// exactly, the same bits at any thread count; sizes below and above the threading cut-off
Test(grad_add, one_add_per_element_any_threads) {
    size_t sizes[3] = {5, ((size_t)1 << 16) + 7, (size_t)3 << 17};
    for (int s = 0; s < 3; s++) {
        size_t n = sizes[s];
        float* acc = malloc(n * sizeof(float));
        float* ref = malloc(n * sizeof(float));
        float* g32 = malloc(n * sizeof(float));
        uint16_t* g16 = malloc(n * sizeof(uint16_t));
        uint32_t x = 12345u + (uint32_t)s;
        for (size_t i = 0; i < n; i++) {
            x = x * 1664525u + 1013904223u;
            g32[i] = ((float)(x >> 8) / 16777216.0f - 0.5f) * 3.0f;
            g16[i] = (uint16_t)(x >> 16);
            if (isnan(cpu_adam_bf16_to_f32(g16[i]))) { g16[i] = 0x3f80; }
        }
        g32[0] = -0.0f; g16[1] = 0x8000;  // -0: the first add makes it +0
        for (int bf16 = 0; bf16 < 2; bf16++) {
            for (int threads = 1; threads <= 4; threads += 3) {
                omp_set_num_threads(threads);
                for (size_t i = 0; i < n; i++) { acc[i] = NAN; }  // a first add must not read acc
                cpu_adam_grad_add(acc, bf16 ? (const void*)g16 : (const void*)g32, bf16, n, 1);
                cpu_adam_grad_add(acc, bf16 ? (const void*)g16 : (const void*)g32, bf16, n, 0);
                for (size_t i = 0; i < n; i++) {
                    float g = bf16 ? cpu_adam_bf16_to_f32(g16[i]) : g32[i];
                    ref[i] = (0.0f + g) + g;
                }
                cr_assert(memcmp(acc, ref, n * sizeof(float)) == 0, "n=%zu bf16=%d threads=%d: sums differ", n, bf16, threads);
                cr_assert(!signbit(acc[bf16 ? 1 : 0]), "n=%zu bf16=%d: -0 + -0 after a first add from zero is +0", n, bf16);
            }
        }
        free(acc); free(ref); free(g32); free(g16);
    }
    omp_set_num_threads(omp_get_num_procs());
}
