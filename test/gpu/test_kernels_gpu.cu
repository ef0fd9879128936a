/*
 GPU kernels vs the CPU reference ops (the llmc/OP.h headers), on small odd shapes.
 Built and run by `make test-gpu` on a machine with a GPU; build it twice:
   -DENABLE_FP32  floatX = float: the kernels must match the CPU to fp32 rounding noise
   (default)      floatX = bf16:  inputs are rounded to bf16 first and the SAME rounded
                  values are given to the CPU, so differences come only from the roundings
                  the GPU path makes (outputs and stored intermediates), see TOLERANCES.
 Every check prints one line; the program ends with "N passed, N failed" and exits
 non-zero when anything failed.

 Check: |gpu_i - ref_i| <= atol_rel * max_j |ref_j| + rtol * |ref_i| for every i (and no
 NaN). atol is relative to the tensor's largest magnitude so that elements that came out
 near zero by cancellation are judged against the scale of the tensor, not their own.
*/
#include <stdio.h>      // printf
#include <stdlib.h>     // exit
#include <string.h>     // memcpy, strcmp
#include <math.h>       // fabsf, isnan
#include <stdint.h>     // uint32_t for the RNG and the bf16 bit patterns
#include <vector>       // host buffers

#include "llmc/cuda_common.cuh"   // floatX, cudaCheck, cublasCheck, PRECISION_MODE
#include "llmc/encoder.cuh"       // GPU ops under test
#include "llmc/layernorm.cuh"
#include "llmc/gelu.cuh"
#include "llmc/residual.cuh"
#include "llmc/attention.cuh"
// the CPU references: plain C (static inline functions, OpenMP pragmas), compiled as C++ here;
// same names as the GPU launchers but different parameter lists, so they are overloads
#include "llmc/encoder.h"
#include "llmc/layernorm.h"
#include "llmc/gelu.h"
#include "llmc/residual.h"
#include "llmc/attention.h"      // needs cblas.h (OpenBLAS)

// ----------------------------------------------------------------------------
// TOLERANCES (atol_rel, rtol), per kind of op and per precision. Justification:
//  fp32: the GPU does the same fp32 math in another order (warp trees instead of loops,
//   cuBLAS instead of OpenBLAS; CUDA's expf is within 2 ulp). Elementwise ops differ by a
//   few ulp (1e-5 relative is ~100 ulp of margin); sums over <= a few hundred terms by
//   ~N*eps relative to the largest term (2e-5 of the max); the attention chains three
//   GEMMs and a softmax over T <= 129 (1e-4).
//  bf16: one rounding to bf16 (8 significant bits) costs up to 2^-8 = 3.9e-3 relative.
//   Elementwise ops, encoder, layernorm and the reductions of the backward passes do all
//   their math in fp32 on the same rounded inputs as the CPU and round once at the end:
//   rtol 8e-3 (one rounding, x2 margin). mean/rstd are fp32 outputs: 1e-4.
//   Attention stores preatt, att, datt, dpreatt in bf16 and feeds them to the next GEMM:
//   3 to 5 chained roundings, with cancellation in att V, in datt - rowsum and in the
//   GEMM sums; errors are measured against the tensor's max: 2e-2 forward, 3e-2 backward.
struct Tol { float atol_rel, rtol; };
#if defined(ENABLE_FP32)
static const Tol TOL_ELEM = {1e-6f, 1e-5f};
static const Tol TOL_SUM  = {2e-5f, 1e-4f};
static const Tol TOL_STAT = {1e-5f, 1e-4f};
static const Tol TOL_ATTN_FWD = {1e-4f, 1e-4f};
static const Tol TOL_ATTN_BWD = {1e-4f, 1e-4f};
#else
static const Tol TOL_ELEM = {1e-5f, 8e-3f};
static const Tol TOL_SUM  = {1e-4f, 8e-3f};
static const Tol TOL_STAT = {1e-5f, 1e-4f};
static const Tol TOL_ATTN_FWD = {2e-2f, 2e-2f};
static const Tol TOL_ATTN_BWD = {3e-2f, 3e-2f};
#endif

static int g_passed = 0, g_failed = 0;

// ----------------------------------------------------------------------------
// host helpers

// xorshift32: reproducible inputs without touching the trainer's RNG
static uint32_t g_rng = 0x2545F491u;
static float rand_uniform(float lo, float hi) {
    g_rng ^= g_rng << 13; g_rng ^= g_rng >> 17; g_rng ^= g_rng << 5;
    return lo + (hi - lo) * (float)(g_rng >> 8) / 16777216.0f;
}
static std::vector<float> rand_vec(size_t n, float lo, float hi) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; i++) { v[i] = rand_uniform(lo, hi); }
    return v;
}

// float <-> floatX on the host. bf16 by bit manipulation (round to nearest even; the test
// inputs are finite), so the test does not depend on host-side cuda_bf16 intrinsics.
#if defined(ENABLE_FP32)
static floatX host_to_x(float f) { return f; }
static float host_from_x(floatX x) { return x; }
#else
static floatX host_to_x(float f) {
    uint32_t u; memcpy(&u, &f, 4);
    u += 0x7FFFu + ((u >> 16) & 1u);
    __nv_bfloat16_raw r; r.x = (unsigned short)(u >> 16);
    return __nv_bfloat16(r);
}
static float host_from_x(floatX x) {
    __nv_bfloat16_raw r = (__nv_bfloat16_raw)x;
    uint32_t u = (uint32_t)r.x << 16;
    float f; memcpy(&f, &u, 4);
    return f;
}
#endif

// round a host vector to floatX precision in place (identity in fp32): the CPU reference
// then sees exactly the values the GPU sees
static void round_x(std::vector<float>& v) {
    for (size_t i = 0; i < v.size(); i++) { v[i] = host_from_x(host_to_x(v[i])); }
}

static floatX* upload(const std::vector<float>& h) {
    std::vector<floatX> x(h.size());
    for (size_t i = 0; i < h.size(); i++) { x[i] = host_to_x(h[i]); }
    floatX* d;
    cudaCheck(cudaMalloc(&d, h.size() * sizeof(floatX)));
    cudaCheck(cudaMemcpy(d, x.data(), h.size() * sizeof(floatX), cudaMemcpyHostToDevice));
    return d;
}
// h uploaded one element past a 16-byte boundary: the launchers then take their one-element
// path (llmc/cuda_common.cuh's xpack). *base is what to cudaFree.
static floatX* upload_unaligned(const std::vector<float>& h, floatX** base) {
    std::vector<floatX> x(h.size());
    for (size_t i = 0; i < h.size(); i++) { x[i] = host_to_x(h[i]); }
    cudaCheck(cudaMalloc(base, (h.size() + 1) * sizeof(floatX)));
    cudaCheck(cudaMemcpy(*base + 1, x.data(), h.size() * sizeof(floatX), cudaMemcpyHostToDevice));
    return *base + 1;
}
static float* upload_f32(size_t n) {  // uninitialized fp32 device buffer
    float* d;
    cudaCheck(cudaMalloc(&d, n * sizeof(float)));
    return d;
}
static std::vector<float> download(const floatX* d, size_t n) {
    std::vector<floatX> x(n);
    cudaCheck(cudaDeviceSynchronize());
    cudaCheck(cudaMemcpy(x.data(), d, n * sizeof(floatX), cudaMemcpyDeviceToHost));
    std::vector<float> h(n);
    for (size_t i = 0; i < n; i++) { h[i] = host_from_x(x[i]); }
    return h;
}
#if !defined(ENABLE_FP32)
// (in the fp32 build floatX is float and the overload above covers fp32 buffers)
static std::vector<float> download(const float* d, size_t n) {
    std::vector<float> h(n);
    cudaCheck(cudaDeviceSynchronize());
    cudaCheck(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
}
#endif

static void check(const char* what, const char* shape, const std::vector<float>& gpu,
                  const std::vector<float>& ref, Tol tol) {
    float maxref = 0.0f;
    for (size_t i = 0; i < ref.size(); i++) { maxref = fmaxf(maxref, fabsf(ref[i])); }
    float worst = 0.0f, max_err = 0.0f;
    size_t worst_i = 0;
    bool nan = false;
    for (size_t i = 0; i < ref.size(); i++) {
        if (isnan(gpu[i]) || isnan(ref[i])) { nan = true; worst_i = i; break; }
        float err = fabsf(gpu[i] - ref[i]);
        float allowed = tol.atol_rel * maxref + tol.rtol * fabsf(ref[i]);
        float ratio = allowed > 0.0f ? err / allowed : (err > 0.0f ? INFINITY : 0.0f);
        if (err > max_err) { max_err = err; }
        if (ratio > worst) { worst = ratio; worst_i = i; }
    }
    bool ok = !nan && worst <= 1.0f;
    printf("%s %-34s %-24s max|err| %.3e  max|ref| %.3e  worst err/tol %.3f at %zu (gpu %.6g ref %.6g)%s\n",
           ok ? "PASS" : "FAIL", what, shape, max_err, maxref, worst, worst_i,
           gpu.empty() ? 0.0 : (double)gpu[worst_i], ref.empty() ? 0.0 : (double)ref[worst_i],
           nan ? " NaN" : "");
    if (ok) { g_passed++; } else { g_failed++; }
}

// bitwise equality of two downloads of the same computation (determinism)
static void check_same_bits(const char* what, const char* shape, const std::vector<float>& a,
                            const std::vector<float>& b) {
    bool ok = a.size() == b.size() && memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    printf("%s %-34s %-24s bitwise identical over two runs\n", ok ? "PASS" : "FAIL", what, shape);
    if (ok) { g_passed++; } else { g_failed++; }
}

// ----------------------------------------------------------------------------
// tests

// tokens of the encoder's tests: uniform over V (many short runs when V is small), all
// equal (one run of B*T: the wte pass's worst case), or one token at ~90% of the positions
// among rare ones (a long run next to short ones)
enum { TOKENS_UNIFORM, TOKENS_ALL_EQUAL, TOKENS_ONE_FREQUENT };

static void test_encoder(int B, int T, int C, int V, int tokens, const char* shape, cudaStream_t s) {
    size_t BTC = (size_t)B * T * C;
    int N = B * T;
    std::vector<int> inp(N);
    for (int i = 0; i < N; i++) {
        int r = (int)(rand_uniform(0.0f, 1.0f) * V) % V;
        if (tokens == TOKENS_ALL_EQUAL) { r = V - 1; }
        if (tokens == TOKENS_ONE_FREQUENT && rand_uniform(0.0f, 1.0f) < 0.9f) { r = V / 3; }
        inp[i] = r;
    }
    std::vector<float> wte = rand_vec((size_t)V * C, -1, 1), wpe = rand_vec((size_t)T * C, -1, 1);
    std::vector<float> dout = rand_vec(BTC, -1, 1);
    std::vector<float> dwte = rand_vec((size_t)V * C, -1, 1), dwpe = rand_vec((size_t)T * C, -1, 1);
    round_x(wte); round_x(wpe); round_x(dout); round_x(dwte); round_x(dwpe);

    int* d_inp;
    cudaCheck(cudaMalloc(&d_inp, inp.size() * sizeof(int)));
    cudaCheck(cudaMemcpy(d_inp, inp.data(), inp.size() * sizeof(int), cudaMemcpyHostToDevice));
    floatX *d_wte = upload(wte), *d_wpe = upload(wpe), *d_dout = upload(dout);
    floatX *d_out = upload(std::vector<float>(BTC, 0.0f));

    // forward
    std::vector<float> out(BTC);
    encoder_forward(out.data(), inp.data(), wte.data(), wpe.data(), B, T, C);
    encoder_forward(d_out, d_inp, d_wte, d_wpe, B, T, C, s);
    check("encoder_forward out", shape, download(d_out, BTC), out, TOL_ELEM);

    // backward (accumulating into random gradients), twice on the GPU for determinism; the
    // scratch starts as NaN (all-ones bytes), so the partials it is read back for below are
    // what this call wrote
    size_t scratch_bytes = encoder_backward_scratch_bytes(B, T, C);
    void* d_scratch;
    cudaCheck(cudaMalloc(&d_scratch, scratch_bytes));
    cudaCheck(cudaMemset(d_scratch, 0xff, scratch_bytes));
    std::vector<float> gw[2], gp[2];
    for (int run = 0; run < 2; run++) {
        floatX *d_dwte = upload(dwte), *d_dwpe = upload(dwpe);
        if (run == 0) {  // explicit scratch
            encoder_backward(d_dwte, d_dwpe, d_scratch, d_dout, d_inp, B, T, C, s);
        } else {         // the overload that allocates its scratch stream-ordered
            encoder_backward(d_dwte, d_dwpe, d_dout, d_inp, B, T, C, s);
        }
        gw[run] = download(d_dwte, dwte.size());
        gp[run] = download(d_dwpe, dwpe.size());
        cudaCheck(cudaFree(d_dwte)); cudaCheck(cudaFree(d_dwpe));
    }
    encoder_backward(dwte.data(), dwpe.data(), dout.data(), inp.data(), B, T, C);
    check("encoder_backward dwte", shape, gw[0], dwte, TOL_SUM);
    check("encoder_backward dwpe", shape, gp[0], dwpe, TOL_SUM);
    check_same_bits("encoder_backward dwte determinism", shape, gw[0], gw[1]);
    check_same_bits("encoder_backward dwpe determinism", shape, gp[0], gp[1]);

    // one run of B*T entries is split: it spans several chunks, and each chunk summed its
    // own piece into its partial slot (the first chunk's piece starts the run: its tail
    // slot; every later chunk's continues it: its head slot). The stable sort keeps the
    // positions in order, so chunk k's piece is positions [k*CHUNK, (k+1)*CHUNK).
    if (tokens == TOKENS_ALL_EQUAL) {
        int nchunks = encoder_wte_num_chunks(N);
        bool split = nchunks > 1 && scratch_bytes >= encoder_scratch_partials_offset(N) + (size_t)nchunks * 2 * C * sizeof(float);
        printf("%s %-34s %-24s %d chunks of %d entries in the scratch layout\n", split ? "PASS" : "FAIL",
               "encoder_backward wte split", shape, nchunks, ENCODER_WTE_CHUNK);
        if (split) { g_passed++; } else { g_failed++; }
        std::vector<float> parts((size_t)nchunks * 2 * C);
        cudaCheck(cudaDeviceSynchronize());
        cudaCheck(cudaMemcpy(parts.data(), encoder_scratch_partials(d_scratch, N), parts.size() * sizeof(float),
                             cudaMemcpyDeviceToHost));
        std::vector<float> got((size_t)nchunks * C), want((size_t)nchunks * C, 0.0f);
        for (int k = 0; k < nchunks; k++) {
            int slot = k == 0 ? ENCODER_WTE_TAIL : ENCODER_WTE_HEAD;
            for (int c = 0; c < C; c++) {
                got[(size_t)k * C + c] = parts[((size_t)k * 2 + slot) * C + c];
                for (int p = k * ENCODER_WTE_CHUNK; p < N && p < (k + 1) * ENCODER_WTE_CHUNK; p++) {
                    want[(size_t)k * C + c] += dout[(size_t)p * C + c];
                }
            }
        }
        check("encoder_backward wte chunk partials", shape, got, want, TOL_SUM);
    }

    cudaCheck(cudaFree(d_inp)); cudaCheck(cudaFree(d_wte)); cudaCheck(cudaFree(d_wpe));
    cudaCheck(cudaFree(d_dout)); cudaCheck(cudaFree(d_out)); cudaCheck(cudaFree(d_scratch));
}

static void test_layernorm(int B, int T, int C, const char* shape, cudaStream_t s) {
    int N = B * T;
    size_t NC = (size_t)N * C;
    // an offset mean and a spread of scales, as on the residual stream
    std::vector<float> inp = rand_vec(NC, -2, 3), w = rand_vec(C, 0.5f, 1.5f), b = rand_vec(C, -0.5f, 0.5f);
    std::vector<float> inp2 = rand_vec(NC, -1, 1);
    round_x(inp); round_x(w); round_x(b); round_x(inp2);
    floatX *d_inp = upload(inp), *d_w = upload(w), *d_b = upload(b), *d_inp2 = upload(inp2);
    floatX* d_out = upload(std::vector<float>(NC, 0.0f));
    float *d_mean = upload_f32(N), *d_rstd = upload_f32(N);

    // forward
    std::vector<float> out(NC), mean(N), rstd(N);
    layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), B, T, C);
    layernorm_forward(d_out, d_mean, d_rstd, d_inp, d_w, d_b, B, T, C, s);
    check("layernorm_forward out", shape, download(d_out, NC), out, TOL_ELEM);
    check("layernorm_forward mean", shape, download(d_mean, N), mean, TOL_STAT);
    check("layernorm_forward rstd", shape, download(d_rstd, N), rstd, TOL_STAT);

    // backward, accumulating into random gradients; GPU uses its own mean/rstd from above
    std::vector<float> dout = rand_vec(NC, -1, 1), dinp = rand_vec(NC, -1, 1);
    std::vector<float> dw = rand_vec(C, -1, 1), db = rand_vec(C, -1, 1);
    round_x(dout); round_x(dinp); round_x(dw); round_x(db);
    floatX* d_dout = upload(dout);
    float* d_scratch = upload_f32(layernorm_backward_scratch_floats(B, T, C));
    // runs 0 and 1 as the trainer calls it; run 2 with dinp one element off a 16-byte
    // boundary, which sends both kernels down the one-element path
    std::vector<float> gdinp[3], gdw[3], gdb[3];
    for (int run = 0; run < 3; run++) {
        floatX* dinp_base = NULL;
        floatX* d_dinp = run < 2 ? upload(dinp) : upload_unaligned(dinp, &dinp_base);
        floatX *d_dw = upload(dw), *d_db = upload(db);
        layernorm_backward(d_dinp, d_dw, d_db, d_scratch, d_dout, d_inp, d_w, d_mean, d_rstd, B, T, C, s);
        gdinp[run] = download(d_dinp, NC);
        gdw[run] = download(d_dw, C);
        gdb[run] = download(d_db, C);
        cudaCheck(cudaFree(run < 2 ? d_dinp : dinp_base)); cudaCheck(cudaFree(d_dw)); cudaCheck(cudaFree(d_db));
    }
    layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(),
                       mean.data(), rstd.data(), B, T, C);
    check("layernorm_backward dinp", shape, gdinp[0], dinp, TOL_SUM);
    check("layernorm_backward dweight", shape, gdw[0], dw, TOL_SUM);
    check("layernorm_backward dbias", shape, gdb[0], db, TOL_SUM);
    check_same_bits("layernorm_backward dweight determinism", shape, gdw[0], gdw[1]);
    check_same_bits("layernorm_backward dbias determinism", shape, gdb[0], gdb[1]);
    // the one-element path: dinp within the tolerance, and dweight/dbias the same bits as
    // the 16-byte path's (every column's rows are summed in the same order on both)
    check("layernorm_backward dinp, one element a lane", shape, gdinp[2], dinp, TOL_SUM);
    check_same_bits("layernorm_backward dweight, both paths", shape, gdw[0], gdw[2]);
    check_same_bits("layernorm_backward dbias, both paths", shape, gdb[0], gdb[2]);

    // fused residual + layernorm: CPU residual in fp32, rounded to floatX like the GPU's
    // stored residual, then the CPU layernorm of that rounded tensor
    std::vector<float> res(NC), rmean(N), rrstd(N), normed(NC);
    residual_forward(res.data(), inp.data(), inp2.data(), (int)NC);
    round_x(res);
    layernorm_forward(normed.data(), rmean.data(), rrstd.data(), res.data(), w.data(), b.data(), B, T, C);
    floatX* d_res = upload(std::vector<float>(NC, 0.0f));
    fused_residual_layernorm_forward(d_res, d_out, d_mean, d_rstd, d_inp, d_inp2, d_w, d_b, N, C, s);
    check("fused_residual_layernorm residual", shape, download(d_res, NC), res, TOL_ELEM);
    check("fused_residual_layernorm normed", shape, download(d_out, NC), normed, TOL_ELEM);
    check("fused_residual_layernorm mean", shape, download(d_mean, N), rmean, TOL_STAT);
    check("fused_residual_layernorm rstd", shape, download(d_rstd, N), rrstd, TOL_STAT);

    cudaCheck(cudaFree(d_inp)); cudaCheck(cudaFree(d_w)); cudaCheck(cudaFree(d_b)); cudaCheck(cudaFree(d_inp2));
    cudaCheck(cudaFree(d_out)); cudaCheck(cudaFree(d_mean)); cudaCheck(cudaFree(d_rstd));
    cudaCheck(cudaFree(d_dout)); cudaCheck(cudaFree(d_scratch)); cudaCheck(cudaFree(d_res));
}

static void test_gelu_residual(size_t N, const char* shape, cudaStream_t s) {
    std::vector<float> x = rand_vec(N, -6, 4), y = rand_vec(N, -1, 1), dout = rand_vec(N, -1, 1);
    std::vector<float> dx = rand_vec(N, -1, 1), dy = rand_vec(N, -1, 1);
    round_x(x); round_x(y); round_x(dout); round_x(dx); round_x(dy);
    floatX *d_x = upload(x), *d_y = upload(y), *d_dout = upload(dout);
    floatX* d_out = upload(std::vector<float>(N, 0.0f));
    std::vector<float> out(N);

    gelu_forward(out.data(), x.data(), (int)N);
    gelu_forward(d_out, d_x, N, s);
    check("gelu_forward", shape, download(d_out, N), out, TOL_ELEM);

    floatX* d_dx = upload(dx);
    gelu_backward(dx.data(), x.data(), dout.data(), (int)N);
    gelu_backward(d_dx, d_x, d_dout, N, s);
    check("gelu_backward dinp", shape, download(d_dx, N), dx, TOL_ELEM);
    cudaCheck(cudaFree(d_dx));

    // in place, as matmul_backward applies it: d = gelu'(x) * d (the CPU's accumulating
    // backward from zero gives the same products)
    std::vector<float> dg(N, 0.0f);
    gelu_backward(dg.data(), x.data(), dout.data(), (int)N);
    floatX* d_g = upload(dout);
    gelu_backward_inplace(d_g, d_x, N, s);
    check("gelu_backward_inplace", shape, download(d_g, N), dg, TOL_ELEM);
    cudaCheck(cudaFree(d_g));

    residual_forward(out.data(), x.data(), y.data(), (int)N);
    residual_forward(d_out, d_x, d_y, N, s);
    check("residual_forward", shape, download(d_out, N), out, TOL_ELEM);

    // dx holds gelu_backward's fp32 result now: rounded to floatX first, so that both sides
    // start the accumulation from the same values (the emulated bf16 run caught this)
    round_x(dx);
    d_dx = upload(dx);
    floatX* d_dy = upload(dy);
    residual_backward(dx.data(), dy.data(), dout.data(), (int)N);
    residual_backward(d_dx, d_dy, d_dout, N, s);
    check("residual_backward dinp1", shape, download(d_dx, N), dx, TOL_ELEM);
    check("residual_backward dinp2", shape, download(d_dy, N), dy, TOL_ELEM);

    cudaCheck(cudaFree(d_x)); cudaCheck(cudaFree(d_y)); cudaCheck(cudaFree(d_dout));
    cudaCheck(cudaFree(d_out)); cudaCheck(cudaFree(d_dx)); cudaCheck(cudaFree(d_dy));
}

static void test_attention(int B, int T, int C, int NH, const char* shape, cublasHandle_t h, cudaStream_t s) {
    size_t BTC = (size_t)B * T * C, BT3C = 3 * BTC, BHTT = (size_t)B * NH * T * T;
    std::vector<float> qkv = rand_vec(BT3C, -1, 1), dout = rand_vec(BTC, -1, 1);
    // small initial gradient: checks the accumulation without hiding the attention's part
    std::vector<float> dqkv = rand_vec(BT3C, -0.1f, 0.1f);
    round_x(qkv); round_x(dout); round_x(dqkv);
    floatX *d_qkv = upload(qkv), *d_dout = upload(dout), *d_dqkv = upload(dqkv);
    floatX* d_out = upload(std::vector<float>(BTC, 0.0f));
    floatX *d_qkvr, *d_att, *d_dqkvr, *d_datt, *d_scratch;
    cudaCheck(cudaMalloc(&d_qkvr, BT3C * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_att, BHTT * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_dqkvr, BT3C * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_datt, BHTT * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_scratch, attention_backward_scratch_elems(B, T, C) * sizeof(floatX)));
    // garbage in the overwritten buffers: the functions must not depend on their content
    cudaCheck(cudaMemset(d_att, 0x7f, BHTT * sizeof(floatX)));
    cudaCheck(cudaMemset(d_datt, 0x7f, BHTT * sizeof(floatX)));
    cudaCheck(cudaMemset(d_dqkvr, 0x7f, BT3C * sizeof(floatX)));

    std::vector<float> out(BTC), preatt(BHTT), att(BHTT), dpreatt(BHTT), datt(BHTT);
    attention_forward(out.data(), preatt.data(), att.data(), qkv.data(), B, T, C, NH);
    attention_forward(d_out, d_qkvr, d_att, d_qkv, B, T, C, NH, h, s);
    check("attention_forward out", shape, download(d_out, BTC), out, TOL_ATTN_FWD);
    check("attention_forward att", shape, download(d_att, BHTT), att, TOL_ATTN_FWD);

    attention_backward(dqkv.data(), dpreatt.data(), datt.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
    attention_backward(d_dqkv, d_dqkvr, d_datt, d_scratch, d_dout, d_qkvr, d_att, B, T, C, NH, h, s);
    check("attention_backward dqkv", shape, download(d_dqkv, BT3C), dqkv, TOL_ATTN_BWD);
    check("attention_backward dpreatt", shape, download(d_datt, BHTT), dpreatt, TOL_ATTN_BWD);

    cudaCheck(cudaFree(d_qkv)); cudaCheck(cudaFree(d_dout)); cudaCheck(cudaFree(d_dqkv));
    cudaCheck(cudaFree(d_out)); cudaCheck(cudaFree(d_qkvr)); cudaCheck(cudaFree(d_att));
    cudaCheck(cudaFree(d_dqkvr)); cudaCheck(cudaFree(d_datt)); cudaCheck(cudaFree(d_scratch));
}

// The launchers' choice of the 16-byte path (llmc/cuda_common.cuh's xpack): taken at the
// trainer's shapes (a path never taken would be correct and slow, which no tensor check
// sees), refused for rows that are no multiple of X128, unaligned pointers and, in the
// softmax, rows too long for the registers. Pointers here are only inspected.
static void test_pack_choice(void) {
    alignas(16) static floatX buf[64];
    const floatX* a = buf;
    const floatX* u = buf + 1;  // 2 or 4 bytes past a 16-byte boundary
    struct { const char* what; int got, want; } cases[] = {
        {"gelu 4096 aligned", xpack_width(4096, {a, a, a}), X128},
        {"gelu 1001", xpack_width(1001, {a, a, a}), 1},
        {"gelu unaligned", xpack_width(4096, {a, u, a}), 1},
        {"layernorm C 768", xpack_width(768, {a, a, a, a}), X128},
        {"layernorm C 77", xpack_width(77, {a, a, a, a}), 1},
        {"layernorm unaligned weight", xpack_width(768, {a, a, a, u}), 1},
        {"attention layout hs 64", xpack_width(64, {a, a}), X128},
        {"attention layout hs 11", xpack_width(11, {a, a}), 1},
        {"attention layout unaligned", xpack_width(64, {u, a}), 1},
        {"softmax T 1024", attention_row_vecs(a, a, 1024), X128 == 8 ? 4 : 8},
        {"softmax T 64", attention_row_vecs(a, a, 64), 1},
        {"softmax T 2048", attention_row_vecs(a, a, 2048), X128 == 8 ? 8 : 0},
        {"softmax T 37", attention_row_vecs(a, a, 37), 0},
        {"softmax unaligned", attention_row_vecs(a, u, 1024), 0},
        // layernorm's backward: the warps a block whose sums fit 96 KB, from C alone
        {"layernorm bwd warps C 768", layernorm_backward_warps(768), 8},
        {"layernorm bwd warps C 1600", layernorm_backward_warps(1600), 4},
        {"layernorm bwd warps C 4096", layernorm_backward_warps(4096), 2},
        {"layernorm bwd warps C 12288", layernorm_backward_warps(12288), 1},
        {"layernorm bwd warps C 12800", layernorm_backward_warps(12800), 0},
    };
    for (const auto& c : cases) {
        bool ok = c.got == c.want;
        printf("%s pack choice %-28s %d (want %d)\n", ok ? "PASS" : "FAIL", c.what, c.got, c.want);
        if (ok) { g_passed++; } else { g_failed++; }
    }
}

int main(void) {
    printf("test_kernels_gpu: floatX = %s\n", PRECISION_MODE);
    cudaStream_t s;
    cudaCheck(cudaStreamCreate(&s));
    cublasHandle_t h;
    cublasCheck(cublasCreate(&h));

    // small odd shapes: T not a multiple of 32 and > 64 (several lanes' strides per row),
    // C not a multiple of 32 (partial warps in the row loops and the column tiles),
    // head sizes 32, 20 and 16; V small so that tokens repeat many times
    struct Shape { int B, T, C, NH, V; };
    const Shape shapes[] = {
        {2, 37, 96, 3, 13},
        {3, 64, 80, 4, 50},
        {1, 129, 64, 4, 7},
        {2, 33, 77, 7, 5},
        {4, 50, 40, 1, 1000},
    };
    for (const Shape& sh : shapes) {
        char name[64];
        snprintf(name, sizeof(name), "B%d T%d C%d NH%d", sh.B, sh.T, sh.C, sh.NH);
        test_encoder(sh.B, sh.T, sh.C, sh.V, TOKENS_UNIFORM, name, s);
        test_layernorm(sh.B, sh.T, sh.C, name, s);
        test_gelu_residual((size_t)sh.B * sh.T * 4 * sh.C, name, s);
        test_attention(sh.B, sh.T, sh.C, sh.NH, name, h, s);
    }

    // the 16-byte paths' edges (llmc/cuda_common.cuh's xpack): an N that is no multiple of
    // 8 (the elementwise kernels one element a thread; the shapes above all take 16 bytes in
    // bf16); rows of several packs a lane in layernorm's backward (C = 776: 97 packs of 8 in
    // bf16, 194 of 4 in fp32, lane 0 takes 4 or 7) and in the softmax kernels (T = 264: 2 a
    // lane in bf16, 3 in fp32), and T = 1032: 5 a lane in bf16 (its largest instance, 8),
    // past the register path's 1024 in fp32 (the scalar kernels there)
    test_pack_choice();
    test_gelu_residual(1001, "N1001", s);
    test_layernorm(2, 3, 776, "B2 T3 C776", s);
    // layernorm's backward at GPT-2 XL's width: 4 warps a block (their sums' slices would
    // not fit 96 KB at 8), 80 rows in 3 chunks of 27, a warp's rows 7 or 6 of them
    test_layernorm(4, 20, 1600, "B4 T20 C1600", s);
    // 400 rows in 13 chunks: every thread row of partials_add's tree (8) holds a sum
    test_layernorm(4, 100, 64, "B4 T100 C64", s);
    test_attention(1, 264, 64, 2, "B1 T264 C64 NH2", h, s);
    test_attention(1, 1032, 32, 1, "B1 T1032 C32 NH1", h, s);

    // the encoder's wte pass on long runs: B*T over many chunks of ENCODER_WTE_CHUNK entries,
    // every position one token, or one token at 90% among rare ones
    test_encoder(4, 300, 40, 50, TOKENS_ALL_EQUAL, "B4 T300 C40 all one token", s);
    test_encoder(3, 333, 72, 500, TOKENS_ONE_FREQUENT, "B3 T333 C72 one at 90%", s);
    test_encoder(2, 1024, 24, 3, TOKENS_UNIFORM, "B2 T1024 C24 V3", s);

    cublasCheck(cublasDestroy(h));
    cudaCheck(cudaStreamDestroy(s));
    printf("%d passed, %d failed\n", g_passed, g_failed);
    return g_failed > 0 ? 1 : 0;
}
