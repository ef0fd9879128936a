// zero3/cpu_adam.c: the implementation (the interface and its notes: zero3/cpu_adam.h)
#include "zero3/cpu_adam.h"  // this module's types and prototypes
#include <string.h>       // memcpy (bit casts, tail buffers), strcmp (ISA names)
#include <math.h>         // pow, sqrt, sqrtf, isfinite (pow/sqrt need -lm)
#include <immintrin.h>    // AVX2 / AVX-512 intrinsics; usable in target() functions without -mavx2
#include "zero3/util.h"    // zero_error: the 0 / -1 error convention

uint16_t cpu_adam_f32_to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof(u));  // a bit cast without breaking strict aliasing
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        // rounding could carry a NaN with a small payload into infinity: keep it a NaN
        return (uint16_t)((u >> 16) | 0x0040u);
    }
    // adding 0x7fff rounds up above the half-way point; the kept bit's lsb breaks ties to even
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

float cpu_adam_bf16_to_f32(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float x;
    memcpy(&x, &u, sizeof(x));
    return x;
}

void cpu_adam_grad_add(float* acc, const void* g, int g_bf16, size_t n, int first) {
    // each element's sum is one add whatever the threads: the same bits at any count
    const int threads = n >= ((size_t)1 << 16);
    if (g_bf16) {
        const uint16_t* g16 = (const uint16_t*)g;
        #pragma omp parallel for schedule(static) if (threads)
        for (size_t i = 0; i < n; i++) { acc[i] = (first ? 0.0f : acc[i]) + cpu_adam_bf16_to_f32(g16[i]); }
    } else {
        const float* g32 = (const float*)g;
        #pragma omp parallel for schedule(static) if (threads)
        for (size_t i = 0; i < n; i++) { acc[i] = (first ? 0.0f : acc[i]) + g32[i]; }
    }
}

static void cpu_adam_kernel_scalar(const CpuAdamConsts* c, float* p, const void* g, int g_bf16,
                                   float* m, float* v, size_t n, void* out, int out_kind) {
    // constants in locals: stores through the float pointers could alias *c otherwise
    const float b1 = c->b1, b2 = c->b2, omb1 = c->omb1, omb2 = c->omb2, gs = c->gs;
    const float lrwd = c->lrwd, step = c->step, isb2 = c->isb2, eps = c->eps;
    for (size_t i = 0; i < n; i++) {
        float gi = g_bf16 ? cpu_adam_bf16_to_f32(((const uint16_t*)g)[i]) : ((const float*)g)[i];
        gi *= gs;
        float mi = b1 * m[i] + omb1 * gi;
        float vi = b2 * v[i] + (omb2 * gi) * gi;
        float pi = p[i];
        pi = pi - lrwd * pi;
        float den = sqrtf(vi) * isb2 + eps;
        pi = pi - step * (mi / den);
        m[i] = mi;
        v[i] = vi;
        p[i] = pi;
        if (out_kind == CPU_ADAM_OUT_FP32) { ((float*)out)[i] = pi; }
        else if (out_kind == CPU_ADAM_OUT_BF16) { ((uint16_t*)out)[i] = cpu_adam_f32_to_bf16(pi); }
    }
}

// 8 fp32 -> 8 bf16 bits, the same rounding as cpu_adam_f32_to_bf16
__attribute__((target("avx2,fma")))
static inline __m128i cpu_adam_bf16_pack_avx2(__m256 x) {
    const __m256i u = _mm256_castps_si256(x);
    const __m256i hi = _mm256_srli_epi32(u, 16);
    const __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
    const __m256i qnan = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
    const __m256 isnan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    r = _mm256_blendv_epi8(r, qnan, _mm256_castps_si256(isnan));
    // every lane is in [0, 0xffff], so unsigned saturation keeps it; the 128-bit pack keeps the order
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

__attribute__((target("avx2,fma")))
static void cpu_adam_kernel_avx2(const CpuAdamConsts* c, float* p, const void* g, int g_bf16,
                                 float* m, float* v, size_t n, void* out, int out_kind) {
    const __m256 b1 = _mm256_set1_ps(c->b1), b2 = _mm256_set1_ps(c->b2);
    const __m256 omb1 = _mm256_set1_ps(c->omb1), omb2 = _mm256_set1_ps(c->omb2);
    const __m256 gs = _mm256_set1_ps(c->gs), lrwd = _mm256_set1_ps(c->lrwd);
    const __m256 step = _mm256_set1_ps(c->step), isb2 = _mm256_set1_ps(c->isb2), eps = _mm256_set1_ps(c->eps);
    for (size_t i = 0; i < n; i += 8) {
        __m256 gv;
        if (g_bf16) {
            // widen: zero-extend the 16-bit halves to 32 bits and shift them into the top half
            __m128i h = _mm_loadu_si128((const __m128i*)((const uint16_t*)g + i));
            gv = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
        } else {
            gv = _mm256_loadu_ps((const float*)g + i);
        }
        gv = _mm256_mul_ps(gv, gs);
        __m256 mv = _mm256_fmadd_ps(b1, _mm256_loadu_ps(m + i), _mm256_mul_ps(omb1, gv));
        __m256 vv = _mm256_fmadd_ps(_mm256_mul_ps(omb2, gv), gv, _mm256_mul_ps(b2, _mm256_loadu_ps(v + i)));
        __m256 pv = _mm256_loadu_ps(p + i);
        pv = _mm256_fnmadd_ps(lrwd, pv, pv);
        __m256 den = _mm256_fmadd_ps(_mm256_sqrt_ps(vv), isb2, eps);
        pv = _mm256_fnmadd_ps(step, _mm256_div_ps(mv, den), pv);
        _mm256_storeu_ps(m + i, mv);
        _mm256_storeu_ps(v + i, vv);
        _mm256_storeu_ps(p + i, pv);
        if (out_kind == CPU_ADAM_OUT_FP32) {
            _mm256_storeu_ps((float*)out + i, pv);
        } else if (out_kind == CPU_ADAM_OUT_BF16) {
            _mm_storeu_si128((__m128i*)((uint16_t*)out + i), cpu_adam_bf16_pack_avx2(pv));
        }
    }
}

__attribute__((target("avx512f")))
static inline __m256i cpu_adam_bf16_pack_avx512(__m512 x) {
    const __m512i u = _mm512_castps_si512(x);
    const __m512i hi = _mm512_srli_epi32(u, 16);
    const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
    const __m512i qnan = _mm512_or_si512(hi, _mm512_set1_epi32(0x40));
    const __mmask16 isnan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    r = _mm512_mask_blend_epi32(isnan, r, qnan);
    return _mm512_cvtepi32_epi16(r);  // vpmovdw: truncates each lane to 16 bits, in order
}

__attribute__((target("avx512f")))
static void cpu_adam_kernel_avx512(const CpuAdamConsts* c, float* p, const void* g, int g_bf16,
                                   float* m, float* v, size_t n, void* out, int out_kind) {
    const __m512 b1 = _mm512_set1_ps(c->b1), b2 = _mm512_set1_ps(c->b2);
    const __m512 omb1 = _mm512_set1_ps(c->omb1), omb2 = _mm512_set1_ps(c->omb2);
    const __m512 gs = _mm512_set1_ps(c->gs), lrwd = _mm512_set1_ps(c->lrwd);
    const __m512 step = _mm512_set1_ps(c->step), isb2 = _mm512_set1_ps(c->isb2), eps = _mm512_set1_ps(c->eps);
    for (size_t i = 0; i < n; i += 16) {
        __m512 gv;
        if (g_bf16) {
            __m256i h = _mm256_loadu_si256((const __m256i*)((const uint16_t*)g + i));
            gv = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
        } else {
            gv = _mm512_loadu_ps((const float*)g + i);
        }
        gv = _mm512_mul_ps(gv, gs);
        __m512 mv = _mm512_fmadd_ps(b1, _mm512_loadu_ps(m + i), _mm512_mul_ps(omb1, gv));
        __m512 vv = _mm512_fmadd_ps(_mm512_mul_ps(omb2, gv), gv, _mm512_mul_ps(b2, _mm512_loadu_ps(v + i)));
        __m512 pv = _mm512_loadu_ps(p + i);
        pv = _mm512_fnmadd_ps(lrwd, pv, pv);
        __m512 den = _mm512_fmadd_ps(_mm512_sqrt_ps(vv), isb2, eps);
        pv = _mm512_fnmadd_ps(step, _mm512_div_ps(mv, den), pv);
        _mm512_storeu_ps(m + i, mv);
        _mm512_storeu_ps(v + i, vv);
        _mm512_storeu_ps(p + i, pv);
        if (out_kind == CPU_ADAM_OUT_FP32) {
            _mm512_storeu_ps((float*)out + i, pv);
        } else if (out_kind == CPU_ADAM_OUT_BF16) {
            _mm256_storeu_si256((__m256i*)((uint16_t*)out + i), cpu_adam_bf16_pack_avx512(pv));
        }
    }
}

// the ISA in use; resolved on first use. Accessed with __atomic builtins: two threads
// resolving it at once both store the same value, which is then not a data race
static int cpu_adam_isa_sel = CPU_ADAM_ISA_UNSET;

// can this CPU (and OS: libgcc checks that it saves the vector state) run the ISA?
static int cpu_adam_isa_ok(int isa) {
    __builtin_cpu_init();  // needed if we run before libgcc's constructor (e.g. from another constructor)
    switch (isa) {
        case CPU_ADAM_ISA_SCALAR: return 1;
        case CPU_ADAM_ISA_AVX2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        case CPU_ADAM_ISA_AVX512: return __builtin_cpu_supports("avx512f");
        default: return 0;
    }
}

// the best the CPU runs, cached
static int cpu_adam_isa_get(void) {
    int isa = __atomic_load_n(&cpu_adam_isa_sel, __ATOMIC_RELAXED);
    if (isa == CPU_ADAM_ISA_UNSET) {
        isa = cpu_adam_isa_ok(CPU_ADAM_ISA_AVX512) ? CPU_ADAM_ISA_AVX512
            : cpu_adam_isa_ok(CPU_ADAM_ISA_AVX2) ? CPU_ADAM_ISA_AVX2 : CPU_ADAM_ISA_SCALAR;
        __atomic_store_n(&cpu_adam_isa_sel, isa, __ATOMIC_RELAXED);
    }
    return isa;
}

const char* cpu_adam_isa(void) {
    switch (cpu_adam_isa_get()) {
        case CPU_ADAM_ISA_AVX512: return "avx512";
        case CPU_ADAM_ISA_AVX2: return "avx2";
        default: return "scalar";
    }
}

int cpu_adam_force_isa(const char* isa) {
    int want;
    if (isa == NULL || strcmp(isa, "auto") == 0) {
        __atomic_store_n(&cpu_adam_isa_sel, CPU_ADAM_ISA_UNSET, __ATOMIC_RELAXED);
        cpu_adam_isa_get();
        return 0;
    }
    if (strcmp(isa, "avx512") == 0) { want = CPU_ADAM_ISA_AVX512; }
    else if (strcmp(isa, "avx2") == 0) { want = CPU_ADAM_ISA_AVX2; }
    else if (strcmp(isa, "scalar") == 0) { want = CPU_ADAM_ISA_SCALAR; }
    else { return zero_error("cpu_adam_force_isa: unknown ISA '%s' (avx512, avx2, scalar, auto)", isa); }
    if (!cpu_adam_isa_ok(want)) { return zero_error("cpu_adam_force_isa: this CPU cannot run %s", isa); }
    __atomic_store_n(&cpu_adam_isa_sel, want, __ATOMIC_RELAXED);
    return 0;
}

// elements [i0, i1) with the given ISA: whole vectors in place, then the last partial
// vector (only the array's end has one: tiles are multiples of 16) on a zero-padded copy
// through the same vector kernel, so it gets exactly the same arithmetic
static void cpu_adam_range(int isa, const CpuAdamConsts* c, float* p, const void* g, int g_bf16,
                                  float* m, float* v, size_t i0, size_t i1, void* out, int out_kind) {
    const size_t gsz = g_bf16 ? sizeof(uint16_t) : sizeof(float);
    const size_t osz = out_kind == CPU_ADAM_OUT_BF16 ? sizeof(uint16_t) : sizeof(float);
    const void* gi = (const char*)g + i0 * gsz;  // byte offsets: g and out have two element sizes
    void* oi = out_kind == CPU_ADAM_OUT_NONE ? NULL : (void*)((char*)out + i0 * osz);
    if (isa == CPU_ADAM_ISA_SCALAR) {
        cpu_adam_kernel_scalar(c, p + i0, gi, g_bf16, m + i0, v + i0, i1 - i0, oi, out_kind);
        return;
    }
    const size_t width = isa == CPU_ADAM_ISA_AVX512 ? 16 : 8;
    const size_t nfull = (i1 - i0) / width * width;
    void (*kernel)(const CpuAdamConsts*, float*, const void*, int, float*, float*, size_t, void*, int) =
        isa == CPU_ADAM_ISA_AVX512 ? cpu_adam_kernel_avx512 : cpu_adam_kernel_avx2;
    if (nfull > 0) { kernel(c, p + i0, gi, g_bf16, m + i0, v + i0, nfull, oi, out_kind); }
    const size_t rest = i1 - i0 - nfull;
    if (rest > 0) {
        // zero padding is harmless: g = m = v = 0 gives den = eps and an update of 0
        // (or 0/0 = NaN if eps = 0, in lanes that are thrown away)
        float tp[16] = {0}, tm[16] = {0}, tv[16] = {0}, tg[16] = {0}, to[16] = {0};
        size_t j = i0 + nfull;
        memcpy(tp, p + j, rest * sizeof(float));
        memcpy(tm, m + j, rest * sizeof(float));
        memcpy(tv, v + j, rest * sizeof(float));
        memcpy(tg, (const char*)g + j * gsz, rest * gsz);  // tg holds bf16 bits in its first bytes if g is bf16
        kernel(c, tp, tg, g_bf16, tm, tv, width, to, out_kind);
        memcpy(p + j, tp, rest * sizeof(float));
        memcpy(m + j, tm, rest * sizeof(float));
        memcpy(v + j, tv, rest * sizeof(float));
        if (out_kind != CPU_ADAM_OUT_NONE) { memcpy((char*)out + j * osz, to, rest * osz); }
    }
}

int cpu_adam_step(float* p, const void* g, CpuAdamDtype g_dtype, float* m, float* v, size_t n,
                                const CpuAdamParams* hp, void* out, CpuAdamDtype out_dtype) {
    if (hp == NULL) { return zero_error("cpu_adam_step: hyperparameters are NULL"); }
    if (n > SIZE_MAX / sizeof(float) / 2) {
        return zero_error("cpu_adam_step: n = %zu elements overflows a byte count", n);
    }
    if (n > 0 && (p == NULL || g == NULL || m == NULL || v == NULL)) {
        return zero_error("cpu_adam_step: NULL array (p %p, g %p, m %p, v %p) for n = %zu",
                          (void*)p, g, (void*)m, (void*)v, n);
    }
    if (g_dtype != CPU_ADAM_FP32 && g_dtype != CPU_ADAM_BF16) {
        return zero_error("cpu_adam_step: unknown gradient dtype %d", (int)g_dtype);
    }
    if (out != NULL && out_dtype != CPU_ADAM_FP32 && out_dtype != CPU_ADAM_BF16) {
        return zero_error("cpu_adam_step: unknown output dtype %d", (int)out_dtype);
    }
    if (hp->t < 1) { return zero_error("cpu_adam_step: step t = %d, must be >= 1", hp->t); }
    // !(x >= 0 && x < 1) also catches NaN; beta = 1 would make a bias correction 0
    if (!(hp->beta1 >= 0.0f && hp->beta1 < 1.0f) || !(hp->beta2 >= 0.0f && hp->beta2 < 1.0f)) {
        return zero_error("cpu_adam_step: betas (%g, %g) must be in [0, 1)", hp->beta1, hp->beta2);
    }
    if (n == 0) { return 0; }

    // bias corrections once per call, in double (beta2^t stays close to 1 for many steps)
    double bc1 = 1.0 - pow((double)hp->beta1, hp->t);
    double bc2 = 1.0 - pow((double)hp->beta2, hp->t);
    CpuAdamConsts c;
    c.b1 = hp->beta1;
    c.b2 = hp->beta2;
    c.omb1 = 1.0f - hp->beta1;  // in float, as adamw_update
    c.omb2 = 1.0f - hp->beta2;
    c.gs = hp->grad_scale;
    c.lrwd = hp->lr * hp->weight_decay;
    c.step = (float)((double)hp->lr / bc1);
    c.isb2 = (float)(1.0 / sqrt(bc2));
    c.eps = hp->eps;

    const int isa = cpu_adam_isa_get();
    const int g_bf16 = g_dtype == CPU_ADAM_BF16;
    const int out_kind = out == NULL ? CPU_ADAM_OUT_NONE : out_dtype == CPU_ADAM_BF16 ? CPU_ADAM_OUT_BF16 : CPU_ADAM_OUT_FP32;
    const size_t ntiles = (n + CPU_ADAM_TILE - 1) / CPU_ADAM_TILE;
    // one tile: no parallel region (its start-up would cost more than the work)
    #pragma omp parallel for schedule(static) if (ntiles > 1)
    for (size_t tile = 0; tile < ntiles; tile++) {
        size_t i0 = tile * CPU_ADAM_TILE;
        size_t i1 = i0 + CPU_ADAM_TILE < n ? i0 + CPU_ADAM_TILE : n;
        cpu_adam_range(isa, &c, p, g, g_bf16, m, v, i0, i1, out, out_kind);
    }
    return 0;
}
