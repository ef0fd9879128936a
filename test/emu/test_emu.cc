/*
 The emulator's own test (test/emu/cuda_runtime.h, emu_device.h): what it must refuse, and
 the races it must catch, each shown to bite.
   test_emu            the limits and the runtime's answers, and cuBLASLt's algorithms summing
                       in an order of their alignments; prints PASS/FAIL lines, then
                       "N passed, N failed"
   test_emu RACE-CASE  one deliberate ordering bug, which must stop the run with the checker's
                       message (test/emu/test_emu.sh runs each and checks the message);
                       the same case with its wait or synchronisation in place (RACE-CASE-ok)
                       must pass
*/
#define EMU_DEFINE_GLOBALS
#include <stdio.h>         // printf
#include <string.h>        // strcmp
#include <math.h>          // isnan
#include <stdlib.h>        // setenv
#include <pthread.h>       // the "thread" case: a second host thread beside the GPU
#include <atomic>          // ...and its stop flag
#include <vector>          // the matmul's operands and results
#include <cuda_runtime.h>  // test/emu's
#include <cublasLt.h>      // test/emu's: its algorithms' summation orders
#include <cuda_bf16.h>     // test/emu's: the tensor cores' operands

static int passed = 0, failed = 0;
static void check(const char* what, int ok) {
    printf("%s %s\n", ok ? "PASS" : "FAIL", what);
    if (ok) { passed++; } else { failed++; }
}

__global__ void fill_kernel(float* out, float v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { out[i] = v; }
}
__global__ void add_kernel(float* out, const float* in, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { out[i] += in[i]; }
}
__global__ void smem_kernel(float* out) {
    extern __shared__ float dyn[];
    dyn[threadIdx.x] = 1.0f;
    __syncthreads();
    out[threadIdx.x] = dyn[threadIdx.x];
}
__global__ void other_smem_kernel(float* out) {
    extern __shared__ float dyn[];
    dyn[threadIdx.x] = 2.0f;
    __syncthreads();
    out[threadIdx.x] = dyn[threadIdx.x];
}
// reads the static shared word before any thread of the block wrote it (block 1 must not
// see what block 0 left there)
__global__ void stale_shared_kernel(float* out) {
    __shared__ float word;
    out[blockIdx.x] = blockIdx.x == 0 ? 0.0f : word;
    __syncthreads();
    if (threadIdx.x == 0) { word = 5.0f; }
}

// successive shuffles, each reading what its own round wrote (the emulator reuses the exchange
// slots of every other round): a lane swap, a read across half warps, a butterfly sum, on two
// warps of a block
__global__ void shuffle_kernel(float* out) {
    float v = (float)threadIdx.x;
    float a = __shfl_xor_sync(0xffffffffu, v, 1);           // lane ^ 1
    float b = __shfl_xor_sync(0xffffffffu, v + 1000.0f, 16);  // lane ^ 16, plus 1000
    float c = __shfl_xor_sync(0xffffffffu, a, 2);           // (lane ^ 2) ^ 1
    float sum = v;
    for (int m = 16; m > 0; m >>= 1) { sum += __shfl_xor_sync(0xffffffffu, sum, m); }
    out[threadIdx.x] = a + 10000.0f * (b - 1000.0f) + 1e8f * c + 0.0f * sum;
    out[64 + threadIdx.x] = sum;
}

// shuffles within groups of `width` lanes: a butterfly sum over groups of 8, and lane ^ 16 at
// width 16, which a lane of the first half reads from a later group (its own value, as CUDA
// documents) and one of the second half from an earlier one (its partner's)
__global__ void shuffle_width_kernel(float* out) {
    float v = (float)threadIdx.x;
    float sum = v;
    for (int m = 4; m > 0; m >>= 1) { sum += __shfl_xor_sync(0xffffffffu, sum, m, 8); }
    out[threadIdx.x] = sum;
    out[64 + threadIdx.x] = __shfl_xor_sync(0xffffffffu, v, 16, 16);
}

// ---------------------------------------------------------------------------
// the tensor cores' warp operations (emu_mma_bf16_16816, emu_ldmatrix, emu_cp_async), each
// against the PTX ISA's fragment tables written out element by element (the emulator
// computes them per register): for mma.m16n8k16 with .bf16, groupID = lane >> 2, tig =
// lane % 4; A's a_i (i < 8): row groupID for i in 0,1,4,5 else groupID + 8, column
// tig * 2 + (i & 1), + 8 for i >= 4; B's b_i (i < 4): row tig * 2 + (i & 1), + 8 for i >= 2,
// column groupID; C's c_i: row groupID for i < 2 else + 8, column tig * 2 + (i & 1).

static unsigned short bf16_bits(float x) { __nv_bfloat16 b = __float2bfloat16_rn(x); return b.x; }
static float bf16_value(unsigned short u) { __nv_bfloat16_raw r{u}; return __bfloat162float(__nv_bfloat16(r)); }

// one warp: D = A (16x16, row major) B (16x8: B[k][n] at b[k * 8 + n]) + C, each lane's
// fragments gathered element by element from the tables above, D written back the same way
__global__ void mma_kernel(float* d, const unsigned short* a, const unsigned short* b, const float* c) {
    int lane = threadIdx.x, g = lane >> 2, tig = lane & 3;
    unsigned short ae[8], be[4];
    for (int i = 0; i < 8; i++) {
        int row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8, col = tig * 2 + (i & 1) + (i >= 4 ? 8 : 0);
        ae[i] = a[row * 16 + col];
    }
    for (int i = 0; i < 4; i++) { be[i] = b[(tig * 2 + (i & 1) + (i >= 2 ? 8 : 0)) * 8 + g]; }
    unsigned ar[4], br[2];
    for (int i = 0; i < 4; i++) { ar[i] = ae[2 * i] | (unsigned)ae[2 * i + 1] << 16; }
    for (int i = 0; i < 2; i++) { br[i] = be[2 * i] | (unsigned)be[2 * i + 1] << 16; }
    float acc[4];
    for (int i = 0; i < 4; i++) { acc[i] = c[(g + (i >= 2 ? 8 : 0)) * 8 + tig * 2 + (i & 1)]; }
    emu_mma_bf16_16816(acc, ar, br);
    for (int i = 0; i < 4; i++) { d[(g + (i >= 2 ? 8 : 0)) * 8 + tig * 2 + (i & 1)] = acc[i]; }
}

// one warp: a 16x16 matrix into shared memory (rows of 24 elements, as the attention pads
// them), then ldmatrix x4, x4.trans, x2 and x2.trans of its four 8x8 quarters (lanes 8i..8i+7
// address quarter i's rows: (0,0), (8,0), (0,8), (8,8) at (row, column)); out (32 lanes x 12
// registers)
__global__ void ldmatrix_kernel(unsigned* out, const unsigned short* m) {
    __shared__ float4 tile4[16 * 24 / 8];  // (float4: 16-byte aligned rows)
    unsigned short* tile = (unsigned short*)tile4;
    int lane = threadIdx.x;
    for (int e = lane; e < 256; e += 32) { tile[(e / 16) * 24 + e % 16] = m[e]; }
    __syncwarp();
    int q = lane >> 3, r = lane & 7;
    const unsigned short* row = tile + ((q & 1) * 8 + r) * 24 + (q >> 1) * 8;
    unsigned x[12];
    emu_ldmatrix(x, 4, 0, row);
    emu_ldmatrix(x + 4, 4, 1, row);
    emu_ldmatrix(x + 8, 2, 0, row);
    emu_ldmatrix(x + 10, 2, 1, row);
    for (int i = 0; i < 12; i++) { out[lane * 12 + i] = x[i]; }
}

// one thread: 16 bytes by cp.async into poisoned shared memory, read before the wait, after a
// wait that leaves the newest group pending, and after waiting for all; a second, zero-filled
// copy in its own group. out: 4 words each time, for both copies (24 words)
__global__ void cp_async_kernel(unsigned* out, const unsigned* src) {
    __shared__ float4 buf4[2];
    unsigned* buf = (unsigned*)buf4;
    emu_cp_async(buf, src, 16, true);
    emu_cp_async_commit();
    emu_cp_async(buf + 4, src, 16, false);
    emu_cp_async_commit();
    for (int i = 0; i < 8; i++) { out[i] = buf[i]; }        // nothing waited for: the poison
    emu_cp_async_wait(1);
    for (int i = 0; i < 8; i++) { out[8 + i] = buf[i]; }    // the first group done, the second not
    emu_cp_async_wait(0);
    for (int i = 0; i < 8; i++) { out[16 + i] = buf[i]; }   // both
}

static void tensor_core_ops(void) {
    unsigned seed = 12345;
    auto next = [&seed]() { seed = seed * 1664525u + 1013904223u; return (float)(seed >> 8) / 16777216.0f * 2.0f - 1.0f; };
    std::vector<unsigned short> a(256), b(128);
    std::vector<float> c(128), d(128);
    for (auto& x : a) { x = bf16_bits(next()); }
    for (auto& x : b) { x = bf16_bits(next()); }
    for (auto& x : c) { x = next(); }
    unsigned short *da, *db;
    float *dc, *dd;
    cudaMalloc(&da, 512); cudaMalloc(&db, 256); cudaMalloc(&dc, 512); cudaMalloc(&dd, 512);
    cudaMemcpy(da, a.data(), 512, cudaMemcpyHostToDevice);
    cudaMemcpy(db, b.data(), 256, cudaMemcpyHostToDevice);
    cudaMemcpy(dc, c.data(), 512, cudaMemcpyHostToDevice);
    mma_kernel<<<1, 32>>>(dd, da, db, dc);
    cudaMemcpy(d.data(), dd, 512, cudaMemcpyDeviceToHost);
    double worst = 0.0;
    for (int i = 0; i < 16; i++) {
        for (int j = 0; j < 8; j++) {
            double want = c[i * 8 + j];
            for (int k = 0; k < 16; k++) { want += (double)bf16_value(a[i * 16 + k]) * bf16_value(b[k * 8 + j]); }
            worst = fmax(worst, fabs(want - d[i * 8 + j]));
        }
    }
    // 17 fp32 roundings of sums under 16: at most 17 * 2^-20 apart from the exact sum
    check("mma.m16n8k16 bf16: D = A B + C from the PTX ISA's fragment tables", worst < 17.0 / 1048576.0);

    unsigned* dout;
    cudaMalloc(&dout, 32 * 12 * 4);
    ldmatrix_kernel<<<1, 32>>>(dout, da);
    std::vector<unsigned> x(32 * 12);
    cudaMemcpy(x.data(), dout, x.size() * 4, cudaMemcpyDeviceToHost);
    int right = 1;
    for (int lane = 0; lane < 32; lane++) {
        int g = lane >> 2, tig = lane & 3;
        for (int i = 0; i < 4; i++) {  // quarter i: rows (i & 1) * 8.., columns (i >> 1) * 8..
            int r0 = (i & 1) * 8, c0 = (i >> 1) * 8;
            unsigned plain = a[(r0 + g) * 16 + c0 + 2 * tig] | (unsigned)a[(r0 + g) * 16 + c0 + 2 * tig + 1] << 16;
            unsigned trans = a[(r0 + 2 * tig) * 16 + c0 + g] | (unsigned)a[(r0 + 2 * tig + 1) * 16 + c0 + g] << 16;
            right &= x[lane * 12 + i] == plain && x[lane * 12 + 4 + i] == trans;
            if (i < 2) { right &= x[lane * 12 + 8 + i] == plain && x[lane * 12 + 10 + i] == trans; }
        }
    }
    check("ldmatrix x4, x4.trans, x2, x2.trans: each lane's registers as the PTX ISA lays them out", right);

    unsigned src[4] = {0x11111111u, 0x22222222u, 0x33333333u, 0x44444444u};
    unsigned* dsrc;
    cudaMalloc(&dsrc, 16);
    cudaMemcpy(dsrc, src, 16, cudaMemcpyHostToDevice);
    cp_async_kernel<<<1, 1>>>(dout, dsrc);
    unsigned y[24];
    cudaMemcpy(y, dout, sizeof(y), cudaMemcpyDeviceToHost);
    int poisoned = 1, first = 1, both = 1;
    for (int i = 0; i < 8; i++) { poisoned &= y[i] == 0xffffffffu; }
    for (int i = 0; i < 4; i++) {
        first &= y[8 + i] == src[i] && y[12 + i] == 0xffffffffu;
        both &= y[16 + i] == src[i] && y[20 + i] == 0u;
    }
    check("cp.async: nothing copied before its wait (the poison read), one group left pending by wait_group 1, "
          "zero-filled when not valid", poisoned && first && both);
    cudaFree(da); cudaFree(db); cudaFree(dc); cudaFree(dd); cudaFree(dout); cudaFree(dsrc);
}

static int launch_error(void) { return (int)cudaGetLastError(); }

static void limits(void) {
    float* d;
    cudaMalloc(&d, 4096 * sizeof(float));
    fill_kernel<<<1, 1025>>>(d, 1.0f, 4096);
    check("a block of 1025 threads refused", launch_error() == cudaErrorInvalidConfiguration);
    check("the launch error is cleared once read", cudaGetLastError() == cudaSuccess);
    fill_kernel<<<dim3(1, 65536), 32>>>(d, 1.0f, 4096);
    check("gridDim.y of 65536 refused", launch_error() == cudaErrorInvalidConfiguration);
    fill_kernel<<<dim3(1, 1, 65536), 32>>>(d, 1.0f, 4096);
    check("gridDim.z of 65536 refused", launch_error() == cudaErrorInvalidConfiguration);
    smem_kernel<<<1, 32, 64 * 1024>>>(d);
    check("64 KB of dynamic shared memory refused without cudaFuncSetAttribute", launch_error() == cudaErrorInvalidValue);
    cudaFuncSetAttribute(smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024);
    smem_kernel<<<1, 32, 64 * 1024>>>(d);
    check("64 KB accepted once the kernel opted in", launch_error() == cudaSuccess);
    other_smem_kernel<<<1, 32, 64 * 1024>>>(d);
    check("one kernel's opt-in is not another's", launch_error() == cudaErrorInvalidValue);
    check("an opt-in over the device's limit refused",
          cudaFuncSetAttribute(smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 300 * 1024) == cudaErrorInvalidValue);
    (void)cudaGetLastError();

    float lanes[128];
    shuffle_kernel<<<1, 64>>>(d);
    cudaMemcpy(lanes, d, sizeof(lanes), cudaMemcpyDeviceToHost);
    int shuffled = 1;
    for (int t = 0; t < 64; t++) {
        int w = t & ~31;
        float want = (float)(t ^ 1) + 10000.0f * (float)(t ^ 16) + 1e8f * (float)((t ^ 2) ^ 1);
        float want_sum = (float)(32 * w + 496);  // lanes w..w+31
        shuffled &= lanes[t] == want && lanes[64 + t] == want_sum;
    }
    check("successive shuffles each see their own round's values (swap, halves, butterfly sum)", shuffled);
    shuffle_width_kernel<<<1, 64>>>(d);
    cudaMemcpy(lanes, d, sizeof(lanes), cudaMemcpyDeviceToHost);
    int grouped = 1;
    for (int t = 0; t < 64; t++) {
        int g = t & ~7;  // lanes g..g+7
        float want_other = (t & 16) ? (float)(t ^ 16) : (float)t;
        grouped &= lanes[t] == (float)(8 * g + 28) && lanes[64 + t] == want_other;
    }
    check("shuffles within groups of width lanes (sums over 8; lane ^ 16 at width 16: a later group gives the lane's own value)",
          grouped);

    float host[2];
    stale_shared_kernel<<<2, 32>>>(d);
    cudaMemcpy(host, d, 2 * sizeof(float), cudaMemcpyDeviceToHost);
    check("__shared__ memory poisoned between blocks (a read before any write is NaN)", isnan(host[1]));

    float pageable[4] = {0};
    check("cudaMemcpy with a host pointer as the device side refused",
          cudaMemcpy(pageable, d, sizeof(pageable), cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
    check("cudaMemcpy with a device pointer as the host side refused",
          cudaMemcpy(d, d + 8, 16, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue);
    check("cudaMemcpyDefault takes either", cudaMemcpy(pageable, d, sizeof(pageable), cudaMemcpyDefault) == cudaSuccess);
    (void)cudaGetLastError();

    // a query answers "not ready" while the work is queued, and leaves it as the last error
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaEvent_t e;
    cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    int saw_not_ready = 0, sticky = 0;
    for (int k = 0; k < 50 && !saw_not_ready; k++) {
        for (int j = 0; j < 20; j++) { fill_kernel<<<4, 32, 0, s>>>(d, 1.0f, 128); }
        cudaEventRecord(e, s);
        if (cudaEventQuery(e) == cudaErrorNotReady) {
            saw_not_ready = 1;
            sticky = cudaGetLastError() == cudaErrorNotReady && cudaGetLastError() == cudaSuccess;
        }
        cudaEventSynchronize(e);
    }
    check("cudaEventQuery says not ready while the stream's work is queued", saw_not_ready);
    check("...and leaves cudaErrorNotReady for one cudaGetLastError, as the runtime does", sticky);
    check("cudaEventQuery after cudaEventSynchronize: done", cudaEventQuery(e) == cudaSuccess);

    // ordering: a kernel after a wait on an event sees the work before the record
    float* a;
    cudaMalloc(&a, 256 * sizeof(float));
    cudaStream_t s2;
    cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
    int right = 1;
    for (int k = 0; k < 20; k++) {
        fill_kernel<<<1, 256, 0, s>>>(a, (float)k, 256);
        cudaEventRecord(e, s);
        cudaStreamWaitEvent(s2, e, 0);
        fill_kernel<<<1, 256, 0, s2>>>(d, 0.0f, 256);
        add_kernel<<<1, 256, 0, s2>>>(d, a, 256);
        cudaMemcpyAsync(host, d + 255, sizeof(float), cudaMemcpyDeviceToHost, s2);  // pageable: synchronous
        right &= host[0] == (float)k;
        cudaStreamSynchronize(s);
    }
    check("work after cudaStreamWaitEvent sees the recorded work (20 rounds)", right);
    cudaFree(a);
    cudaFree(d);
}

// One cuBLASLt product D (m,n) = op(A)^T (m,k) B (k,n) in fp32 (the forward's transposes),
// A at a_dev (k,m) and B at b_dev, through the algorithm the heuristic picks for the
// pointers' alignments (as llmc/matmul.cuh tells it; the rest 256). Returns the cuBLASLt
// status; the algorithm's id in *id.
static int lt_product(cublasLtHandle_t lt, const float* a_dev, const float* b_dev, float* d_dev, int m, int n, int k,
                      uint32_t align_a, int* id) {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulPreference_t pref;
    cublasOperation_t t = CUBLAS_OP_T;
    cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t));
    cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, k, m, k);
    cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, k, n, k);
    cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, m, n, m);
    cublasLtMatmulPreferenceCreate(&pref);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof(align_a));
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    int st = (int)cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld, pref, 1, &res, &found);
    *id = res.algo.id;
    float one = 1.0f, zero = 0.0f;
    if (st == 0) { st = (int)cublasLtMatmul(lt, desc, &one, a_dev, la, b_dev, lb, &zero, d_dev, ld, d_dev, ld, &res.algo, NULL, 0, 0); }
    cudaDeviceSynchronize();
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la); cublasLtMatrixLayoutDestroy(lb); cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulDescDestroy(desc);
    return st;
}

// The emulated cuBLASLt's algorithms sum in orders of their own (test/emu/cublasLt.h): the
// same operands at 64 and at 256 bytes give other bits, as on the GPU where the heuristic
// picks another kernel, and at one alignment the same bits, wherever the pointer is; both
// the true product to fp32 rounding. (The ZeRO engines' bit-identical comparisons across
// stages rest on this: without it the emulator cannot tell them apart.)
static void lt_alignment(void) {
    const int m = 48, n = 40, k = 256;
    std::vector<float> a((size_t)k * m), b((size_t)k * n);
    uint32_t x = 12345;  // an LCG's top 24 bits: uniform in [-0.5, 0.5)
    for (float& v : a) { x = x * 1664525u + 1013904223u; v = (float)(x >> 8) / 16777216.0f - 0.5f; }
    for (float& v : b) { x = x * 1664525u + 1013904223u; v = (float)(x >> 8) / 16777216.0f - 0.5f; }
    // A twice, at a 256-byte boundary and 64 bytes past another one; B and D at boundaries
    float *a_buf, *a2_buf, *b_dev, *d_dev;
    cudaMalloc(&a_buf, a.size() * sizeof(float) + 256);
    cudaMalloc(&a2_buf, a.size() * sizeof(float) + 256);
    cudaMalloc(&b_dev, b.size() * sizeof(float));
    cudaMalloc(&d_dev, (size_t)m * n * sizeof(float));
    float* a256 = a_buf;
    float* a256b = a2_buf;
    float* a64 = a2_buf + 16;
    cudaMemcpy(a256, a.data(), a.size() * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemcpy(b_dev, b.data(), b.size() * sizeof(float), cudaMemcpyHostToDevice);
    cublasLtHandle_t lt;
    cublasLtCreate(&lt);
    std::vector<float> d256((size_t)m * n), d256b(d256.size()), d256r(d256.size()), d64(d256.size());
    int id256, id256b, id64, st = 0;
    st |= lt_product(lt, a256, b_dev, d_dev, m, n, k, 256, &id256);
    cudaMemcpy(d256.data(), d_dev, d256.size() * sizeof(float), cudaMemcpyDeviceToHost);
    st |= lt_product(lt, a256, b_dev, d_dev, m, n, k, 256, &id256);
    cudaMemcpy(d256r.data(), d_dev, d256.size() * sizeof(float), cudaMemcpyDeviceToHost);
    cudaMemcpy(a256b, a.data(), a.size() * sizeof(float), cudaMemcpyHostToDevice);
    st |= lt_product(lt, a256b, b_dev, d_dev, m, n, k, 256, &id256b);
    cudaMemcpy(d256b.data(), d_dev, d256.size() * sizeof(float), cudaMemcpyDeviceToHost);
    cudaMemcpy(a64, a.data(), a.size() * sizeof(float), cudaMemcpyHostToDevice);
    st |= lt_product(lt, a64, b_dev, d_dev, m, n, k, 64, &id64);
    cudaMemcpy(d64.data(), d_dev, d256.size() * sizeof(float), cudaMemcpyDeviceToHost);
    check("cuBLASLt: the products ran", st == 0);
    check("cuBLASLt: the heuristic picks another algorithm for A at 64 bytes than at 256", id64 != id256 && id256 == id256b);
    int differ = 0;
    double err = 0.0;
    for (int j = 0; j < n; j++) {
        for (int i = 0; i < m; i++) {
            double ref = 0.0;
            for (int p = 0; p < k; p++) { ref += (double)a[(size_t)i * k + p] * b[(size_t)j * k + p]; }
            size_t e = (size_t)i + (size_t)j * m;
            differ += memcmp(&d64[e], &d256[e], sizeof(float)) != 0;
            double de = fabs(d64[e] - ref) > fabs(d256[e] - ref) ? fabs(d64[e] - ref) : fabs(d256[e] - ref);
            if (de > err) { err = de; }
        }
    }
    char what[160];
    snprintf(what, sizeof(what), "cuBLASLt: A at 64 bytes gives other bits than at 256 (%d of %d elements differ)", differ, m * n);
    check(what, differ > 0);
    check("cuBLASLt: one algorithm gives the same bits at every call and at another 256-byte address",
          memcmp(d256.data(), d256r.data(), d256.size() * sizeof(float)) == 0 &&
          memcmp(d256.data(), d256b.data(), d256.size() * sizeof(float)) == 0);
    snprintf(what, sizeof(what), "cuBLASLt: both orders are the product to fp32 rounding (max |error| %.2g <= 1e-5)", err);
    check(what, err <= 1e-5);
    cublasLtDestroy(lt);
    cudaFree(a_buf); cudaFree(a2_buf); cudaFree(b_dev); cudaFree(d_dev);
}

// the "thread" case's second host thread (as --dpu's CPU Adam): adds into `p` until stopped
struct HostWork { float* p; std::atomic<int> stop; };
static void* host_work_main(void* arg) {
    HostWork* w = (HostWork*)arg;
    while (!w->stop.load()) {
        for (int i = 0; i < 1024; i++) { w->p[i] += 1.0f; }
    }
    return NULL;
}

// the deliberate bugs: `ok` puts the missing wait back
static void race(const char* name, int ok) {
    float *d, *pinned;
    cudaMalloc(&d, 1024 * sizeof(float));
    cudaMallocHost(&pinned, 1024 * sizeof(float));
    cudaStream_t s1, s2;
    cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
    cudaEvent_t e;
    cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    if (!strcmp(name, "kernels")) {  // two streams write one buffer
        fill_kernel<<<4, 256, 0, s1>>>(d, 1.0f, 1024);
        if (ok) { cudaEventRecord(e, s1); cudaStreamWaitEvent(s2, e, 0); }
        fill_kernel<<<4, 256, 0, s2>>>(d, 2.0f, 1024);
    } else if (!strcmp(name, "copy")) {  // a copy on one stream reads what a kernel on another writes
        fill_kernel<<<4, 256, 0, s1>>>(d, 1.0f, 1024);
        if (ok) { cudaEventRecord(e, s1); cudaStreamWaitEvent(s2, e, 0); }
        cudaMemcpyAsync(pinned, d, 1024 * sizeof(float), cudaMemcpyDeviceToHost, s2);
    } else if (!strcmp(name, "stale-event")) {  // a wait captures the record before the one that matters
        cudaEventRecord(e, s1);
        cudaStreamWaitEvent(s2, e, 0);
        fill_kernel<<<4, 256, 0, s1>>>(d, 1.0f, 1024);
        cudaEventRecord(e, s1);  // too late for the wait above
        if (ok) { cudaStreamWaitEvent(s2, e, 0); }
        add_kernel<<<4, 256, 0, s2>>>(d, d, 1024);
    } else if (!strcmp(name, "host-pinned")) {  // the host rewrites a pinned source before the copy ran
        for (int i = 0; i < 1024; i++) { pinned[i] = 1.0f; }
        cudaMemcpyAsync(d, pinned, 512 * sizeof(float), cudaMemcpyHostToDevice, s1);
        if (ok) { cudaStreamSynchronize(s1); }
        for (int i = 0; i < 1024; i++) { pinned[i] = 2.0f; }
    } else if (!strcmp(name, "host-device")) {  // the host dereferences device memory
        cudaDeviceSynchronize();
        float x = 0.0f;
        if (ok) { cudaMemcpy(&x, d, sizeof(float), cudaMemcpyDeviceToHost); } else { x = *(volatile float*)d; }
        printf("read %g\n", x);
    } else if (!strcmp(name, "thread")) {
        // another host thread works while the GPU runs kernels on two unordered streams (on
        // disjoint halves): on pinned memory no kernel touches that is the host's business,
        // not a kernel's access (were it taken for one, the two streams' kernels would race on
        // it); on device memory it is the bug
        HostWork w;
        w.p = ok ? pinned : d;
        w.stop.store(0);
        float* big;  // (kernels long enough that the thread surely runs while one does)
        cudaMalloc(&big, 65536 * sizeof(float));
        pthread_t t;
        pthread_create(&t, NULL, host_work_main, &w);
        for (int k = 0; k < 50; k++) {
            fill_kernel<<<128, 256, 0, s1>>>(big, (float)k, 32768);
            fill_kernel<<<128, 256, 0, s2>>>(big + 32768, (float)k, 32768);
        }
        cudaDeviceSynchronize();
        w.stop.store(1);
        pthread_join(t, NULL);
        cudaFree(big);
    } else if (!strcmp(name, "legacy")) {  // a non-blocking stream does not wait for the legacy default stream
        cudaMemset(d, 0, 1024 * sizeof(float));  // (legacy stream)
        if (ok) { cudaDeviceSynchronize(); }
        fill_kernel<<<4, 256, 0, s1>>>(d, 1.0f, 1024);
    } else {
        fprintf(stderr, "test_emu: unknown case %s\n", name);
        exit(2);
    }
    cudaDeviceSynchronize();
    printf("no race stopped the run\n");
}

int main(int argc, char** argv) {
    if (argc == 3) {
        // the GPU runs nothing before the host waits (test/emu/emu_device.h's emu_tick): the
        // host's writes then land while the copy is surely queued
        if (!strcmp(argv[1], "host-pinned")) { setenv("EMU_MAX_PER_CALL", "-1", 1); }
        race(argv[1], !strcmp(argv[2], "ok"));
        return 0;
    }
    limits();
    lt_alignment();
    tensor_core_ops();
    printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
