/*
 train_gpt2_zero3 (CUDA): the GPU trainer. It mirrors the fp32 CPU trainer
 (train_gpt2_zero3.c): the same flags (llmc/args.h), model files and parameter layout
 (llmc/gpt2.h), data (llmc/dataloader.h), log lines and --report fields where they apply.

 Two backends for the model states (--zero-backend):

 device   the ZeRO engine on the GPUs (zero3/device.cuh), stages 0-3, one GPU per rank,
          collectives over NCCL on their own stream, ordered against the compute stream
          with events (the host never waits for a collective inside the step): per-unit
          reductions overlapped with the backward, at stage 3 units gathered into pooled
          buffers with the next ones prefetched. No offload.
 host     the ZeRO engine of the CPU trainer (zero3/engine.h) keeps the fp32 master,
          gradient accumulators and AdamW on the host and runs every stage and offload
          over MPI; the GPU computes on whole floatX copies that the unit hooks upload at
          fetch and download at reduce (synchronous copies). It is the backend for
          offload and for ranks sharing a GPU (the multi-rank GPU tests).
 auto (the default) takes the device backend where it can.

 Parameters and gradients are floatX (bf16, or fp32 with -DENABLE_FP32), the master
 weights and AdamW moments fp32, in flat buffers of units padded by zero3/plan.h.
 One compute stream; one cuBLAS handle (attention) and one cuBLASLt handle (matmuls).
*/
#include <stdio.h>       // printf
#include <stdlib.h>      // exit, malloc
#include <string.h>      // memset, strstr
#include <math.h>        // sqrt, expf
#include <mpi.h>         // ranks, the NCCL setup, the host backend's collectives
#include <cjson/cJSON.h> // the --report JSON
#include <nvtx3/nvToolsExt.h>  // NVTX ranges (header-only)
#include <unistd.h>      // sysconf: cores per node
#include <omp.h>         // omp_set_num_threads: the CPU Adam's threads

// the CUDA kernels
#include "llmc/cuda_common.cuh"
#include "llmc/encoder.cuh"
#include "llmc/layernorm.cuh"
#include "llmc/gelu.cuh"
#include "llmc/residual.cuh"
#include "llmc/attention.cuh"
#include "llmc/matmul.cuh"
#include "llmc/fused_classifier.cuh"
#include "llmc/adamw.cuh"

// the host building blocks, shared with the CPU trainer (C headers compiled as C++).
// nvcc's front end reports a false "set but never used" (#550) for a variable that
// zero3/config.h does use through (void)n: silenced for these headers only.
#pragma nv_diag_suppress 550
#include "llmc/utils.h"
#include "llmc/rand.h"
#include "llmc/args.h"
#include "llmc/gpt2.h"
#include "llmc/schedulers.h"
#include "llmc/dataloader.h"
#include "llmc/tokenizer.h"
#include "llmc/trainer.h"    // start-up, model, batch, output dir, loaders, tokenizer, main.log, checkpoints
#pragma nv_diag_default 550
#include "zero3/device.cuh"   // the device backend: the ZeRO engine on the GPUs, NCCL on its own stream

// ----------------------------------------------------------------------------
// small helpers




// floatX -> float on the host (bf16 is the top half of an fp32: exact)
static inline float floatx_to_float_host(floatX x) {
#if defined(ENABLE_FP32)
    return x;
#else
    __nv_bfloat16_raw raw = (__nv_bfloat16_raw)x;
    uint32_t bits = (uint32_t)raw.x << 16;
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
#endif
}

// NVTX ranges: push/pop pairs, names copied by the tool
#define NVTX_PUSH(name) nvtxRangePushA(name)
#define NVTX_POP() nvtxRangePop()

// ----------------------------------------------------------------------------
// the model on the device

// element offset of each tensor kind of a layer inside its unit
typedef struct { size_t off[NUM_PARAM_KINDS]; } KindOffsets;  // inside the layer's unit

typedef struct {
    floatX *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb;
    floatX *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
} DevBlock;

typedef struct {
    // forward (floatX unless marked fp32); (L, ...) means one per layer
    floatX* encoded;    // (B,T,C)
    floatX* ln1;        // (L,B,T,C), or one layer when -r 2
    float* ln1_mean;    // (L,B,T) fp32
    float* ln1_rstd;    // (L,B,T) fp32
    floatX* qkv;        // (L,B,T,3C)
    floatX* qkvr;       // (L,3,B,NH,T,hs) attention's permuted q,k,v, kept for the backward
    floatX* atty;       // (L,B,T,C)
    floatX* att;        // (L,B,NH,T,T)
    floatX* attproj;    // (B,T,C) scratch, consumed by the fused residual + layernorm
    floatX* residual2;  // (L,B,T,C)
    floatX* ln2;        // (L,B,T,C), or one layer when -r 2
    float* ln2_mean;    // (L,B,T) fp32
    float* ln2_rstd;    // (L,B,T) fp32
    floatX* fch;        // (L,B,T,4C) pre-GELU (the matmul's aux output)
    floatX* fch_gelu;   // (L,B,T,4C), or one layer when -r >= 1
    floatX* fcproj;     // (B,T,C) scratch
    floatX* residual3;  // (L,B,T,C)
    floatX* lnf;        // (B,T,C)
    float* lnf_mean;    // (B,T) fp32
    float* lnf_rstd;    // (B,T) fp32
    floatX* logits;     // (B,T,Vp); the fused classifier turns it into dlogits in place
    float* losses;      // (B,T) fp32
    double* loss_acc;   // (1,) the training micro-steps' mean losses, summed on the device until the step reads them
    // backward, one layer at a time
    floatX* dresidual;  // (B,T,C)
    floatX* dln;        // (B,T,C)
    floatX* datty;      // (B,T,C)
    floatX* dqkv;       // (B,T,3C)
    floatX* dfch;       // (B,T,4C)
    floatX* dqkvr;      // (3,B,NH,T,hs)
    floatX* datt;       // (B,NH,T,T)
    floatX* attn_scratch;  // (B,T,C)
    // --attention flash: instead of qkvr, att, dqkvr, datt and attn_scratch
    float* lse;            // (L,B,NH,T) fp32: each query row's logsumexp, from the forward to the backward
    float* attn_fscratch;  // (B,NH,T) fp32: the flash backward's per-row dot products
    float* ln_scratch;     // layernorm_backward's partial sums
    float* dbias_scratch;  // matmul_backward's dbias partial sums
    void* enc_scratch;     // encoder_backward's sort buffers
    float* norm_scratch;   // global_norm_squared's partial sums
    float* norm_out;       // (1,) fp32
    int* inputs;           // (B,T) the batch, in two slots: one is filled while the GPU may
    int* targets;          // (B,T) still read the other (see batch_to_device)
    int* inputs_alt;       // (B,T)
    int* targets_alt;      // (B,T)
} DevActs;

typedef struct {
    GPT2Config config;
    size_t num_params;
    int num_tensors;
    TensorRange* ranges;       // (num_tensors) unit order
    KindOffsets* layer_off;    // (L) offsets of the block tensors of each layer
    size_t wte_off, wpe_off, lnfw_off, lnfb_off;
    // the host backend's floatX copies (the device backend's state is in `dev`)
    floatX* params;            // (padded) units in the padded layout of `plan`
    floatX* grads;             // (padded)
    DevActs acts;
    int B, T, recompute;
    int use_flash;             // --attention flash: the fused kernel, O(T) memory per row
    size_t bytes_params, bytes_grads, bytes_optimizer, bytes_acts, bytes_buffers;
    float mean_loss;           // of the last evaluation forward
    float engine_norm;         // host backend: the last step's gradient norm
    // the batch slot the kernels read (acts.inputs/targets or their _alt), its pinned
    // staging on the host, and per slot an event after the last work that used it
    int* cur_inputs;
    int* cur_targets;
    int slot;
    int* host_batch[2];        // (2*B*T) pinned: inputs then targets
    cudaEvent_t slot_free[2];
    float* host_losses;        // (B*T) pinned
    float* host_logits_f;      // (Vp) for sampling
    floatX* host_logits;       // (Vp) pinned
    cudaStream_t stream;
    cublasHandle_t cublas;
    cublasLtHandle_t lt;
    void* lt_workspace;
    size_t lt_workspace_bytes;
    // the units (llmc/gpt2.h): where each starts in params/grads (padded by `plan`), its size
    int num_units;
    size_t* unit_off;          // (num_units)
    size_t* unit_numel;        // (num_units)
    ZeroPlan plan;             // host backend: the units padded (64-byte multiples) in params/grads
    size_t padded;             // host backend: elements of params and grads
    int zstage, world, rank;
    // --zero-backend device: the ZeRO engine on the GPUs (zero3/device.cuh)
    ZeroDev dev;
    // --zero-backend host: the ZeRO engine keeps the model states on the host
    int use_engine;
    ZeroEngine zero;
    int* unit_fresh;           // (num_units) the device copy equals the engine's (until the next step)
    float* dev_stage;          // (largest unit) fp32 on the device: the conversions to and from floatX
    float* host_stage;         // (largest unit) pinned fp32: a unit's gradient on its way to the engine
    double moved_h2d, moved_d2h;  // bytes the hooks copied to and from the GPU (cumulative)
    size_t bytes_stage;        // device buffers beside the activations: dev_stage (host backend), the engine's pools (device)
} GPT2;

static size_t g_device_alloc_bytes = 0;  // everything this program cudaMalloc'ed itself

static void* dev_alloc(size_t bytes) {
    void* p = NULL;
    cudaError_t err = cudaMalloc(&p, bytes > 0 ? bytes : 16);
    if (err != cudaSuccess) {
        fprintf(stderr, "error: out of GPU memory allocating %zu bytes (%s): try a smaller -b or -t, or -r 1/2\n",
                bytes, cudaGetErrorString(err));
        exit(EXIT_FAILURE);
    }
    g_device_alloc_bytes += bytes;
    return p;
}

// the tensors of layer l inside its unit (1 + l), whose copy starts at `unit` (the
// parameters or the gradients; for the engine, wherever the unit was gathered)
static DevBlock gpt2_block(const GPT2* m, floatX* unit, int l) {
    const size_t* o = m->layer_off[l].off;  // offsets inside the unit
    DevBlock b;
    b.ln1w = unit + o[P_LN1W];         b.ln1b = unit + o[P_LN1B];
    b.qkvw = unit + o[P_QKVW];         b.qkvb = unit + o[P_QKVB];
    b.attprojw = unit + o[P_ATTPROJW]; b.attprojb = unit + o[P_ATTPROJB];
    b.ln2w = unit + o[P_LN2W];         b.ln2b = unit + o[P_LN2B];
    b.fcw = unit + o[P_FCW];           b.fcb = unit + o[P_FCB];
    b.fcprojw = unit + o[P_FCPROJW];   b.fcprojb = unit + o[P_FCPROJB];
    return b;
}

// The model from an fp32 unit-major buffer on the host (rank 0's is used; NULL elsewhere
// is fine: both engines broadcast rank 0's). use_engine: the model states go to the
// ZeRO engine on the host (zc, over MPI_COMM_WORLD) and the GPU keeps floatX copies of
// the parameters and gradients. Otherwise the device engine (zero3/device.cuh) keeps them
// on this GPU, one GPU per rank, at the stage of zc.
static void gpt2_build(GPT2* m, const GPT2Config* c, const float* host_params, int use_engine,
                       const ZeroConfig* zc, float beta1, float beta2, float eps, int dpu, int omp_threads) {
    memset(m, 0, sizeof(*m));
    m->config = *c;
    m->num_params = gpt2_num_params(c);
    m->num_tensors = gpt2_num_tensors(c);
    m->num_units = gpt2_num_units(c);
    mpiCheck(MPI_Comm_rank(MPI_COMM_WORLD, &m->rank));
    mpiCheck(MPI_Comm_size(MPI_COMM_WORLD, &m->world));
    m->use_engine = use_engine;
    m->zstage = zc->stage;
    m->ranges = (TensorRange*)mallocCheck(m->num_tensors * sizeof(TensorRange));
    m->layer_off = (KindOffsets*)mallocCheck(c->num_layers * sizeof(KindOffsets));
    m->unit_off = (size_t*)mallocCheck(m->num_units * sizeof(size_t));
    m->unit_numel = (size_t*)mallocCheck(m->num_units * sizeof(size_t));
    m->unit_fresh = (int*)calloc(m->num_units, sizeof(int));
    size_t largest = 0;
    for (int u = 0; u < m->num_units; u++) {
        m->unit_numel[u] = gpt2_unit_size(c, u);
        if (m->unit_numel[u] > largest) { largest = m->unit_numel[u]; }
    }
    gpt2_tensor_ranges(c, m->ranges);
    for (int i = 0; i < m->num_tensors; i++) {  // the tensors' offsets inside their unit
        const TensorRange* r = &m->ranges[i];
        if (r->layer >= 0) { m->layer_off[r->layer].off[r->kind] = r->offset; }
        else if (r->kind == P_WTE) { m->wte_off = r->offset; }
        else if (r->kind == P_WPE) { m->wpe_off = r->offset; }
        else if (r->kind == P_LNFW) { m->lnfw_off = r->offset; }
        else if (r->kind == P_LNFB) { m->lnfb_off = r->offset; }
    }
    // every tensor must start 16-byte aligned for cuBLASLt and the vector loads: units
    // start on 64 bytes (zero3/plan.h) and all sizes are multiples of C, so a C of a
    // multiple of 8 (bf16) / 4 (fp32) ensures it
    if (((size_t)c->channels * sizeof(floatX)) % 16 != 0) {
        fprintf(stderr, "error: channels %d: the GPU trainer needs C to be a multiple of %zu\n",
                c->channels, 16 / sizeof(floatX));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    cudaCheck(cudaStreamCreate(&m->stream));
    if (use_engine) {
        // whole floatX copies on the GPU, units padded to 64 bytes; the engine holds the
        // fp32 master, the gradient accumulators and AdamW, and the parameters reach the
        // GPU at each unit's first fetch (unit_fresh all 0)
        if (zero_plan_init(&m->plan, m->unit_numel, m->num_units, 1, 0, sizeof(floatX)) != 0 ||
            gpt2_engine_init(&m->zero, c, host_params, zc, MPI_COMM_WORLD, beta1, beta2, eps) != 0) {
            fprintf(stderr, "error: %s\n", llmc_errmsg());
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        for (int u = 0; u < m->num_units; u++) { m->unit_off[u] = m->plan.units[u].full_offset; }
        m->padded = m->plan.padded_total;
        m->params = (floatX*)dev_alloc(m->padded * sizeof(floatX));
        m->grads = (floatX*)dev_alloc(m->padded * sizeof(floatX));
        cudaCheck(cudaMemset(m->params, 0, m->padded * sizeof(floatX)));
        cudaCheck(cudaMemset(m->grads, 0, m->padded * sizeof(floatX)));
        m->bytes_params = m->padded * sizeof(floatX);
        m->bytes_grads = m->padded * sizeof(floatX);
        m->dev_stage = (float*)dev_alloc(largest * sizeof(float));
        m->bytes_stage = largest * sizeof(float);
        cudaCheck(cudaMallocHost((void**)&m->host_stage, largest * sizeof(float)));
    } else {
        GPT2EngineSpec sp;  // the same units, tensors and schedules as the host engine's
        gpt2_engine_spec(c, &sp);
        if (zero_dev_init(&m->dev, zc, sp.unit_numel, sp.num_units, sp.tensors, sp.num_tensors, sp.train, sp.train_len,
                          sp.fwd, sp.fwd_len, host_params, m->stream, beta1, beta2, eps, dpu, omp_threads) != 0) {
            fprintf(stderr, "error: rank %d: %s\n", m->rank, llmc_errmsg());
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        gpt2_engine_spec_free(&sp);
        m->bytes_params = (size_t)m->dev.bytes_params;
        m->bytes_grads = (size_t)m->dev.bytes_grads;
        m->bytes_optimizer = (size_t)m->dev.bytes_optimizer;
        m->bytes_stage = (size_t)m->dev.bytes_buffers;  // the engine's pools and scratch
        g_device_alloc_bytes += (size_t)(m->dev.bytes_params + m->dev.bytes_grads + m->dev.bytes_optimizer + m->dev.bytes_buffers);
    }
    cublasCheck(cublasCreate(&m->cublas));
    cublasCheck(cublasSetStream(m->cublas, m->stream));
    cublaslt_init(&m->lt, &m->lt_workspace, &m->lt_workspace_bytes);
    g_device_alloc_bytes += m->lt_workspace_bytes;
    cudaCheck(cudaStreamSynchronize(m->stream));
}

// ----------------------------------------------------------------------------
// The unit hooks, as in the CPU trainer: every parameter and gradient access of the
// forward and backward goes through them, in the order of the engine's schedule
// (gpt2_schedule in llmc/trainer.h).
//
// Host-staged backend (use_engine): the engine gathers, releases, reduces and updates
// on the host over MPI, exactly as on the CPU trainer (whose tests cover that logic);
// the GPU holds a floatX copy of every unit and its gradient. A fetch uploads the
// engine's fp32 unit (converted on the GPU) whenever it may differ from the copy: at
// every fetch at stage 3 (the engine gathered it), once per step otherwise. A reduce
// downloads the unit's gradient as fp32, adds it into the engine's gradient buffer and
// zeroes the device copy, at every micro-step, so that every stage does the same
// arithmetic. The copies are synchronous: this backend is for correctness (several
// ranks on one GPU, offload) and for models whose states do not fit the GPU; the
// device-resident engine with NCCL is the fast path still to come.
// Device backend (!use_engine): the units are slices of m->params / m->grads.

// fp32 (n,) <- floatX (n,) on the device
__global__ void copy_to_float_kernel(float* dst, const floatX* src, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { dst[i] = (float)src[i]; }
}

static floatX* params_fetch(GPT2* m, int u) {
    if (!m->use_engine) {
        floatX* p = NULL;
        zeroCheck(zero_dev_fetch(&m->dev, u, &p));
        return p;
    }
    floatX* dst = m->params + m->unit_off[u];
    float* src = NULL;
    zeroCheck(zero_fetch(&m->zero, u, &src));
    if (m->zero.stage == 3 || !m->unit_fresh[u]) {
        NVTX_PUSH("upload unit");
        size_t n = m->unit_numel[u];
        // synchronous: the engine may reuse its buffer as soon as the unit is released
        cudaCheck(cudaMemcpyAsync(m->dev_stage, src, n * sizeof(float), cudaMemcpyHostToDevice, m->stream));
        cudaCheck(cudaStreamSynchronize(m->stream));
        copy_to_floatx_kernel<<<(unsigned)CEIL_DIV(n, (size_t)256), 256, 0, m->stream>>>(dst, m->dev_stage, n);
        cudaCheck(cudaGetLastError());
        m->unit_fresh[u] = 1;
        m->moved_h2d += (double)n * sizeof(float);
        NVTX_POP();
    }
    return dst;
}

static void params_release(GPT2* m, int u) {
    if (m->use_engine) { zeroCheck(zero_release(&m->zero, u)); }
    else { zeroCheck(zero_dev_release(&m->dev, u)); }
}

static floatX* grads_unit(GPT2* m, int u) {
    if (m->use_engine) { return m->grads + m->unit_off[u]; }
    floatX* g = NULL;
    zeroCheck(zero_dev_grad(&m->dev, u, &g));
    return g;
}


static void grads_reduce(GPT2* m, int u) {
    if (!m->use_engine) {
        zeroCheck(zero_dev_reduce(&m->dev, u));
        return;
    }
    NVTX_PUSH("download grads");
    size_t n = m->unit_numel[u];
    floatX* g = m->grads + m->unit_off[u];
    copy_to_float_kernel<<<(unsigned)CEIL_DIV(n, (size_t)256), 256, 0, m->stream>>>(m->dev_stage, g, n);
    cudaCheck(cudaGetLastError());
    cudaCheck(cudaMemcpyAsync(m->host_stage, m->dev_stage, n * sizeof(float), cudaMemcpyDeviceToHost, m->stream));
    cudaCheck(cudaMemsetAsync(g, 0, n * sizeof(floatX), m->stream));
    cudaCheck(cudaStreamSynchronize(m->stream));
    m->moved_d2h += (double)n * sizeof(float);
    float* acc = NULL;
    zeroCheck(zero_grad(&m->zero, u, &acc));
    const float* got = m->host_stage;
    #pragma omp parallel for if (n > (1 << 16))
    for (long i = 0; i < (long)n; i++) { acc[i] += got[i]; }
    zeroCheck(zero_reduce(&m->zero, u));
    NVTX_POP();
}

static void gpt2_alloc_activations(GPT2* m, int B, int T, int recompute, int use_flash) {
    size_t L = m->config.num_layers, NH = m->config.num_heads, C = m->config.channels;
    size_t Vp = m->config.padded_vocab_size;
    size_t BT = (size_t)B * T, att = (size_t)B * NH * T * T;
    size_t keep_gelu = recompute >= 1 ? 1 : L, keep_ln = recompute >= 2 ? 1 : L;
    // the cuBLAS attention keeps (B,NH,T,T) per layer; the flash kernel a float per row
    size_t cub = use_flash ? 0 : 1, fl = use_flash ? 1 : 0;
    DevActs* a = &m->acts;
    size_t before = g_device_alloc_bytes;
    struct { void** ptr; size_t bytes; } bufs[] = {
        {(void**)&a->encoded, BT * C * sizeof(floatX)},
        {(void**)&a->ln1, keep_ln * BT * C * sizeof(floatX)},
        {(void**)&a->ln1_mean, L * BT * sizeof(float)},
        {(void**)&a->ln1_rstd, L * BT * sizeof(float)},
        {(void**)&a->qkv, L * BT * 3 * C * sizeof(floatX)},
        {(void**)&a->qkvr, cub * L * BT * 3 * C * sizeof(floatX)},
        {(void**)&a->atty, L * BT * C * sizeof(floatX)},
        {(void**)&a->att, cub * L * att * sizeof(floatX)},
        {(void**)&a->attproj, BT * C * sizeof(floatX)},
        {(void**)&a->residual2, L * BT * C * sizeof(floatX)},
        {(void**)&a->ln2, keep_ln * BT * C * sizeof(floatX)},
        {(void**)&a->ln2_mean, L * BT * sizeof(float)},
        {(void**)&a->ln2_rstd, L * BT * sizeof(float)},
        {(void**)&a->fch, L * BT * 4 * C * sizeof(floatX)},
        {(void**)&a->fch_gelu, keep_gelu * BT * 4 * C * sizeof(floatX)},
        {(void**)&a->fcproj, BT * C * sizeof(floatX)},
        {(void**)&a->residual3, L * BT * C * sizeof(floatX)},
        {(void**)&a->lnf, BT * C * sizeof(floatX)},
        {(void**)&a->lnf_mean, BT * sizeof(float)},
        {(void**)&a->lnf_rstd, BT * sizeof(float)},
        {(void**)&a->logits, BT * Vp * sizeof(floatX)},
        {(void**)&a->losses, BT * sizeof(float)},
        {(void**)&a->loss_acc, sizeof(double)},
        {(void**)&a->dresidual, BT * C * sizeof(floatX)},
        {(void**)&a->dln, BT * C * sizeof(floatX)},
        {(void**)&a->datty, BT * C * sizeof(floatX)},
        {(void**)&a->dqkv, BT * 3 * C * sizeof(floatX)},
        {(void**)&a->dfch, BT * 4 * C * sizeof(floatX)},
        {(void**)&a->dqkvr, cub * BT * 3 * C * sizeof(floatX)},
        {(void**)&a->datt, cub * att * sizeof(floatX)},
        {(void**)&a->attn_scratch, cub * attention_backward_scratch_elems(B, T, (int)C) * sizeof(floatX)},
        {(void**)&a->lse, fl * L * attention_flash_lse_floats(B, (int)NH, T) * sizeof(float)},
        {(void**)&a->attn_fscratch, fl * attention_flash_backward_scratch_floats(B, (int)NH, T) * sizeof(float)},
        {(void**)&a->ln_scratch, (size_t)2 * LN_BWD_MAX_CHUNKS * C * sizeof(float)},
        {(void**)&a->dbias_scratch, MATMUL_DBIAS_SCRATCH_FLOATS(4 * C) * sizeof(float)},
        {(void**)&a->enc_scratch, encoder_backward_scratch_bytes(B, T)},
        {(void**)&a->norm_scratch, GLOBAL_NORM_SCRATCH_FLOATS * sizeof(float)},
        {(void**)&a->norm_out, 16},
        {(void**)&a->inputs, BT * sizeof(int)},
        {(void**)&a->targets, BT * sizeof(int)},
        {(void**)&a->inputs_alt, BT * sizeof(int)},
        {(void**)&a->targets_alt, BT * sizeof(int)},
    };
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) {
        *bufs[i].ptr = dev_alloc(bufs[i].bytes);
    }
    cudaCheck(cudaMemset(a->loss_acc, 0, sizeof(double)));  // the only activation read before written
    for (int k = 0; k < 2; k++) {
        cudaCheck(cudaMallocHost((void**)&m->host_batch[k], 2 * BT * sizeof(int)));
        cudaCheck(cudaEventCreateWithFlags(&m->slot_free[k], cudaEventDisableTiming));
    }
    m->cur_inputs = a->inputs;
    m->cur_targets = a->targets;
    m->slot = 0;
    m->bytes_acts = g_device_alloc_bytes - before;
    m->bytes_buffers = m->bytes_acts + m->lt_workspace_bytes + m->bytes_stage;
    cudaCheck(cudaMallocHost((void**)&m->host_losses, BT * sizeof(float)));
    cudaCheck(cudaMallocHost((void**)&m->host_logits, Vp * sizeof(floatX)));
    m->host_logits_f = (float*)mallocCheck(Vp * sizeof(float));
    m->B = B;
    m->T = T;
    m->recompute = recompute;
    m->use_flash = use_flash;
}

// acc[0] += mean of losses (n,): one block, sums in double in a fixed order (deterministic)
__global__ void loss_mean_accumulate_kernel(double* acc, const float* losses, size_t n) {
    __shared__ double part[256];
    double x = 0.0;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) { x += (double)losses[i]; }
    part[threadIdx.x] = x;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if ((int)threadIdx.x < stride) { part[threadIdx.x] += part[threadIdx.x + stride]; }
        __syncthreads();
    }
    if (threadIdx.x == 0) { acc[0] += part[0] / (double)n; }
}

// ----------------------------------------------------------------------------
// forward: inputs/targets (B,T) already on the device (batch_to_device); any
// B <= m->B and T <= m->T (the layer strides follow the call's B and T).
// with_targets: the fused classifier computes the losses (and, when train, writes
// dlogits = dloss * (softmax - onehot) in place of the logits for gpt2_backward). A
// training forward adds its mean loss into acts.loss_acc on the GPU (no host wait inside
// the step); an evaluation forward sets mean_loss.
// The units are used in the order of gpt2_schedule: the embedding, the blocks, the
// final layernorm, the embedding again as the classifier.
static void gpt2_forward(GPT2* m, int B, int T, int with_targets, int train, float dloss) {
    NVTX_PUSH("forward");
    const GPT2Config* c = &m->config;
    int L = c->num_layers, NH = c->num_heads, C = c->channels, V = c->vocab_size, Vp = c->padded_vocab_size;
    size_t BT = (size_t)B * T, att = (size_t)B * NH * T * T;
    int bt = (int)BT;
    DevActs* a = &m->acts;
    cudaStream_t s = m->stream;
    int rc_ln = m->recompute >= 2, rc_gelu = m->recompute >= 1;
    if (m->use_engine) { zeroCheck(zero_begin(&m->zero, train ? ZERO_PASS_TRAIN : ZERO_PASS_FORWARD)); }
    else { zeroCheck(zero_dev_begin(&m->dev, train ? ZERO_PASS_TRAIN : ZERO_PASS_FORWARD)); }

    floatX* emb = params_fetch(m, 0);
    encoder_forward(a->encoded, m->cur_inputs, emb + m->wte_off, emb + m->wpe_off, B, T, C, s);  // (B,T,C)
    params_release(m, 0);

    for (int l = 0; l < L; l++) {
        NVTX_PUSH("layer");
        DevBlock w = gpt2_block(m, params_fetch(m, 1 + l), l);
        floatX* residual = l == 0 ? a->encoded : a->residual3 + (l - 1) * BT * C;
        floatX* ln1 = a->ln1 + (rc_ln ? 0 : l * BT * C);
        floatX* ln2 = a->ln2 + (rc_ln ? 0 : l * BT * C);
        floatX* fch_gelu = a->fch_gelu + (rc_gelu ? 0 : l * BT * 4 * C);
        floatX* qkv = a->qkv + l * BT * 3 * C;
        floatX* qkvr = a->qkvr + l * BT * 3 * C;
        floatX* atty = a->atty + l * BT * C;
        floatX* residual2 = a->residual2 + l * BT * C;
        floatX* fch = a->fch + l * BT * 4 * C;

        // ln1 = layernorm(residual). After layer 0 the residual is the previous layer's
        // residual2 + fcproj, added here fused with this layernorm: the add waits for this
        // layer because the layernorm needs this unit's weights (at stage 3 the previous
        // unit may be released, this one not yet gathered, at the end of the last layer)
        if (l == 0) {
            layernorm_forward(ln1, a->ln1_mean, a->ln1_rstd, residual, w.ln1w, w.ln1b, B, T, C, s);
        } else {
            fused_residual_layernorm_forward(residual, ln1, a->ln1_mean + l * BT, a->ln1_rstd + l * BT,
                                             a->residual2 + (l - 1) * BT * C, a->fcproj, w.ln1w, w.ln1b, bt, C, s);
        }
        matmul_forward(qkv, ln1, w.qkvw, w.qkvb, bt, C, 3 * C, NULL, 0, m->lt, m->lt_workspace, m->lt_workspace_bytes, s);
        if (m->use_flash) {
            attention_flash_forward(atty, a->lse + l * (size_t)B * NH * T, qkv, B, T, C, NH, s);
        } else {
            attention_forward(atty, qkvr, a->att + l * att, qkv, B, T, C, NH, m->cublas, s);
        }
        matmul_forward(a->attproj, atty, w.attprojw, w.attprojb, bt, C, C, NULL, 0, m->lt, m->lt_workspace, m->lt_workspace_bytes, s);
        // residual2 = residual + attproj; ln2 = layernorm(residual2)
        fused_residual_layernorm_forward(residual2, ln2, a->ln2_mean + l * BT, a->ln2_rstd + l * BT,
                                         residual, a->attproj, w.ln2w, w.ln2b, bt, C, s);
        // fch_gelu = gelu(ln2 @ fcw^T + fcb), the pre-activation kept in fch
        matmul_forward(fch_gelu, ln2, w.fcw, w.fcb, bt, C, 4 * C, fch, 1, m->lt, m->lt_workspace, m->lt_workspace_bytes, s);
        // fcproj is added to residual2 by the next unit (the next layer's ln1, or lnf)
        matmul_forward(a->fcproj, fch_gelu, w.fcprojw, w.fcprojb, bt, 4 * C, C, NULL, 0, m->lt, m->lt_workspace, m->lt_workspace_bytes, s);
        params_release(m, 1 + l);
        NVTX_POP();
    }
    // residual3 of the last layer = residual2 + fcproj, and lnf = layernorm(it)
    floatX* fin = params_fetch(m, L + 1);
    fused_residual_layernorm_forward(a->residual3 + (L - 1) * BT * C, a->lnf, a->lnf_mean, a->lnf_rstd,
                                     a->residual2 + (L - 1) * BT * C, a->fcproj, fin + m->lnfw_off, fin + m->lnfb_off, bt, C, s);
    params_release(m, L + 1);
    // the classifier is tied to the token embedding: logits = lnf @ wte^T (all Vp columns)
    emb = params_fetch(m, 0);
    matmul_forward(a->logits, a->lnf, emb + m->wte_off, NULL, bt, C, Vp, NULL, 0, m->lt, m->lt_workspace, m->lt_workspace_bytes, s);
    params_release(m, 0);
    if (with_targets) {
        fused_classifier(a->logits, a->losses, m->cur_targets, dloss, bt, V, Vp, train, s);
    }
    if (with_targets && train) {
        loss_mean_accumulate_kernel<<<1, 256, 0, s>>>(a->loss_acc, a->losses, BT);
        cudaCheck(cudaGetLastError());
    } else if (with_targets) {
        cudaCheck(cudaMemcpyAsync(m->host_losses, a->losses, BT * sizeof(float), cudaMemcpyDeviceToHost, s));
        cudaCheck(cudaStreamSynchronize(s));
        double sum = 0.0;
        for (size_t i = 0; i < BT; i++) { sum += m->host_losses[i]; }
        m->mean_loss = (float)(sum / BT);
    }
    if (!train) {
        if (m->use_engine) { zeroCheck(zero_end(&m->zero)); } else { zeroCheck(zero_dev_end(&m->dev)); }
    }
    NVTX_POP();
}

// backward of the last (train) forward, whose fused classifier left dlogits in a->logits
// scaled by the loss scale (1 / (B*T*grad_accum)). ACCUMULATES into the unit gradients
// that the engines hand out zeroed (after each step, or per unit and micro-step).
// last_micro: this micro-step ends the accumulation (stages 0-1 reduce only then).
static void gpt2_backward(GPT2* m, int B, int T, int last_micro) {
    NVTX_PUSH("backward");
    const GPT2Config* c = &m->config;
    int L = c->num_layers, NH = c->num_heads, C = c->channels, Vp = c->padded_vocab_size;
    size_t BT = (size_t)B * T, att = (size_t)B * NH * T * T;
    int bt = (int)BT;
    DevActs* a = &m->acts;
    cudaStream_t s = m->stream;
    int rc_ln = m->recompute >= 2, rc_gelu = m->recompute >= 1;
    cublasLtHandle_t lt = m->lt;
    void* ws = m->lt_workspace;
    size_t wsb = m->lt_workspace_bytes;
    if (m->use_engine) { m->zero.last_micro = last_micro; } else { m->dev.last_micro = last_micro; }

    // classifier: dlnf = dlogits @ wte (overwrite), dwte += dlogits^T @ lnf. The
    // embedding's gradient stays open until the encoder's backward at the end.
    floatX* emb = params_fetch(m, 0);
    floatX* demb = grads_unit(m, 0);
    matmul_backward(a->dln, demb + m->wte_off, NULL, a->logits, a->lnf, emb + m->wte_off, NULL,
                    bt, C, Vp, NULL, 0, lt, ws, wsb, s);
    params_release(m, 0);
    // final layernorm: dresidual = its input gradient (layernorm_backward accumulates)
    floatX* fin = params_fetch(m, L + 1);
    floatX* dfin = grads_unit(m, L + 1);
    cudaCheck(cudaMemsetAsync(a->dresidual, 0, BT * C * sizeof(floatX), s));
    layernorm_backward(a->dresidual, dfin + m->lnfw_off, dfin + m->lnfb_off, a->ln_scratch, a->dln,
                       a->residual3 + (L - 1) * BT * C, fin + m->lnfw_off, a->lnf_mean, a->lnf_rstd, B, T, C, s);
    params_release(m, L + 1);
    grads_reduce(m, L + 1);

    // dresidual carries the residual stream's gradient down; each layernorm backward adds
    // its branch into it
    for (int l = L - 1; l >= 0; l--) {
        NVTX_PUSH("layer");
        DevBlock w = gpt2_block(m, params_fetch(m, 1 + l), l);
        DevBlock dw = gpt2_block(m, grads_unit(m, 1 + l), l);
        floatX* residual = l == 0 ? a->encoded : a->residual3 + (l - 1) * BT * C;
        floatX* residual2 = a->residual2 + l * BT * C;
        floatX* ln1 = a->ln1 + (rc_ln ? 0 : l * BT * C);
        floatX* ln2 = a->ln2 + (rc_ln ? 0 : l * BT * C);
        floatX* fch_gelu = a->fch_gelu + (rc_gelu ? 0 : l * BT * 4 * C);
        floatX* fch = a->fch + l * BT * 4 * C;
        floatX* qkvr = a->qkvr + l * BT * 3 * C;
        float* ln1_mean = a->ln1_mean + l * BT, *ln1_rstd = a->ln1_rstd + l * BT;
        float* ln2_mean = a->ln2_mean + l * BT, *ln2_rstd = a->ln2_rstd + l * BT;
        if (rc_gelu) { gelu_forward(fch_gelu, fch, BT * 4 * C, s); }
        if (rc_ln) {  // the same statistics as the forward stored: recomputed from the same inputs
            layernorm_forward(ln1, ln1_mean, ln1_rstd, residual, w.ln1w, w.ln1b, B, T, C, s);
            layernorm_forward(ln2, ln2_mean, ln2_rstd, residual2, w.ln2w, w.ln2b, B, T, C, s);
        }

        // MLP: fcproj(gelu(fc(ln2(residual2)))); the GELU backward is fused into the
        // fcproj matmul's dinp through pre_gelu: dfch = (dresidual @ fcprojw) * gelu'(fch)
        matmul_backward(a->dfch, dw.fcprojw, dw.fcprojb, a->dresidual, fch_gelu, w.fcprojw, a->dbias_scratch,
                        bt, 4 * C, C, fch, 0, lt, ws, wsb, s);
        matmul_backward(a->dln, dw.fcw, dw.fcb, a->dfch, ln2, w.fcw, a->dbias_scratch,
                        bt, C, 4 * C, NULL, 0, lt, ws, wsb, s);
        layernorm_backward(a->dresidual, dw.ln2w, dw.ln2b, a->ln_scratch, a->dln, residual2, w.ln2w,
                           ln2_mean, ln2_rstd, B, T, C, s);

        // attention: attproj(attention(qkv(ln1(residual))))
        matmul_backward(a->datty, dw.attprojw, dw.attprojb, a->dresidual, a->atty + l * BT * C, w.attprojw,
                        a->dbias_scratch, bt, C, C, NULL, 0, lt, ws, wsb, s);
        cudaCheck(cudaMemsetAsync(a->dqkv, 0, BT * 3 * C * sizeof(floatX), s));  // attention_backward accumulates
        if (m->use_flash) {
            attention_flash_backward(a->dqkv, a->attn_fscratch, a->datty, a->qkv + l * BT * 3 * C, a->atty + l * BT * C,
                                     a->lse + l * (size_t)B * NH * T, B, T, C, NH, s);
        } else {
            attention_backward(a->dqkv, a->dqkvr, a->datt, a->attn_scratch, a->datty, qkvr, a->att + l * att,
                               B, T, C, NH, m->cublas, s);
        }
        matmul_backward(a->dln, dw.qkvw, dw.qkvb, a->dqkv, ln1, w.qkvw, a->dbias_scratch,
                        bt, C, 3 * C, NULL, 0, lt, ws, wsb, s);
        layernorm_backward(a->dresidual, dw.ln1w, dw.ln1b, a->ln_scratch, a->dln, residual, w.ln1w,
                           ln1_mean, ln1_rstd, B, T, C, s);
        params_release(m, 1 + l);
        grads_reduce(m, 1 + l);  // the engine's reduction of this unit overlaps the layers below
        NVTX_POP();
    }
    // the encoder's backward needs the token ids, not the parameters: no fetch
    encoder_backward(demb + m->wte_off, demb + m->wpe_off, a->enc_scratch, a->dresidual, m->cur_inputs, B, T, C, s);
    grads_reduce(m, 0);
    if (m->use_engine) { zeroCheck(zero_end(&m->zero)); } else { zeroCheck(zero_dev_end(&m->dev)); }
    NVTX_POP();
}

// The optimizer step of either engine (their AdamW uses the betas and eps given at init):
// global norm of the mean gradient, clipping, AdamW on every tensor (weight decay per
// tensor as TensorRange.decay). seed: the device engine's stochastic rounding. Without
// offload the device engine queues it all on the GPU (with offload the host runs the CPU
// Adam); either way the norm is read with gpt2_step_norm once the stream has passed the step.
static void gpt2_update(GPT2* m, float lr, float weight_decay, float grad_clip, int t, uint64_t seed) {
    NVTX_PUSH("optimizer");
    if (m->use_engine) {
        // on the host: SIMD CPU Adam, NVMe when offloaded; every unit is uploaded again at
        // its next fetch
        zeroCheck(zero_step(&m->zero, lr, weight_decay, grad_clip, t, &m->engine_norm));
        for (int u = 0; u < m->num_units; u++) { m->unit_fresh[u] = 0; }
    } else {
        zeroCheck(zero_dev_step(&m->dev, lr, weight_decay, grad_clip, t, seed));
    }
    NVTX_POP();
}

// the norm of the last step's mean gradient (before clipping), once the stream has passed
// that step
static float gpt2_step_norm(const GPT2* m) { return m->use_engine ? m->engine_norm : zero_dev_norm(&m->dev); }

// this rank's time waiting on communication so far (ms): the host engine's waits for its
// collectives, or the device engine's GPU-measured waits (zero_dev_wait_ms). Between steps.
static double gpt2_comm_wait_ms(GPT2* m) {
    if (m->use_engine) { return m->zero.comm.wait_ms; }
    double ms = 0.0;
    zeroCheck(zero_dev_wait_ms(&m->dev, &ms));
    return ms;
}

static void gpt2_free(GPT2* m) {
    void** bufs = (void**)&m->acts;
    for (size_t i = 0; i < sizeof(DevActs) / sizeof(void*); i++) { cudaCheck(cudaFree(bufs[i])); }
    cudaCheck(cudaFree(m->params));  // cudaFree(NULL) is a no-op: the device backend has none of these
    cudaCheck(cudaFree(m->grads));
    cudaCheck(cudaFree(m->dev_stage));
    if (m->host_stage != NULL) { cudaCheck(cudaFreeHost(m->host_stage)); }
    if (m->use_engine) { zero_engine_free(&m->zero); } else { zero_dev_free(&m->dev); }
    zero_plan_free(&m->plan);
    free(m->unit_off);
    free(m->unit_numel);
    free(m->unit_fresh);
    cudaCheck(cudaFreeHost(m->host_losses));
    for (int k = 0; k < 2; k++) {
        cudaCheck(cudaFreeHost(m->host_batch[k]));
        cudaCheck(cudaEventDestroy(m->slot_free[k]));
    }
    cudaCheck(cudaFreeHost(m->host_logits));
    free(m->host_logits_f);
    cublaslt_free(m->lt, m->lt_workspace);
    cublasCheck(cublasDestroy(m->cublas));
    cudaCheck(cudaStreamDestroy(m->stream));
    free(m->ranges);
    free(m->layer_off);
}

// ----------------------------------------------------------------------------
// sampling: softmax over the real V columns of a logits row, in place on the host (the
// draw itself is llmc/trainer.h's sample_token, as in the CPU trainer)
static void softmax_row_host(float* x, int V) {
    float maxv = -INFINITY;
    for (int i = 0; i < V; i++) { maxv = x[i] > maxv ? x[i] : maxv; }
    double sum = 0.0;
    for (int i = 0; i < V; i++) { sum += exp((double)x[i] - maxv); }
    for (int i = 0; i < V; i++) { x[i] = (float)(exp((double)x[i] - maxv) / sum); }
}

// ----------------------------------------------------------------------------
// checkpoints: llm.c's model_%08d.bin (from the fp32 master), a state file
// gpu_state_%08d_%05d.bin with the master, AdamW m and v, the compute copy (so a resumed
// run is bit-identical: the bf16 compute copy comes from stochastic rounding), the
// dataloader position and the sampler RNG; a DONE_%08d marker written last.

#define GPU_STATE_MAGIC 20240328
#define GPU_STATE_VERSION 3  // 3: per rank, any stage, the device engine's padded layout

typedef struct {
    int32_t magic, version, rank, world_size, step, zero_stage, floatx_bytes, pad;
    uint64_t num_params, sample_rng;
    DataLoaderState loader;
    // what the data position means (as the CPU trainer): a resume must read the data the same way
    int32_t B, T, shuffle, grad_accum;
    uint64_t seed;
} GpuStateHeader;

static int write_device_array(FILE* fp, const void* dev, size_t bytes) {
    const size_t chunk = (size_t)64 << 20;
    char* buf = (char*)mallocCheck(bytes < chunk ? (bytes > 0 ? bytes : 1) : chunk);
    int ok = 1;
    for (size_t off = 0; off < bytes && ok; off += chunk) {
        size_t n = bytes - off < chunk ? bytes - off : chunk;
        cudaCheck(cudaMemcpy(buf, (const char*)dev + off, n, cudaMemcpyDefault));  // device or pinned host
        ok = fwrite(buf, 1, n, fp) == n;
    }
    free(buf);
    return ok;
}

static int read_device_array(FILE* fp, void* dev, size_t bytes) {
    const size_t chunk = (size_t)64 << 20;
    char* buf = (char*)mallocCheck(bytes < chunk ? (bytes > 0 ? bytes : 1) : chunk);
    int ok = 1;
    for (size_t off = 0; off < bytes && ok; off += chunk) {
        size_t n = bytes - off < chunk ? bytes - off : chunk;
        ok = fread(buf, 1, n, fp) == n;
        if (ok) { cudaCheck(cudaMemcpy((char*)dev + off, buf, n, cudaMemcpyDefault)); }  // device or pinned host
    }
    free(buf);
    return ok;
}

static void checkpoint_save(const char* dir, int step, GPT2* m, uint64_t sample_rng, const DataLoader* loader,
                            const TrainConfig* tc, int grad_accum) {
    char path[4096], tmp[4200];
    cudaCheck(cudaStreamSynchronize(m->stream));
    // the llm.c model file from the fp32 master, written by rank 0 (gathered from the
    // ranks' shards at stages 1-3); with --dpu, the pending update is applied first
    zeroCheck(zero_dev_flush(&m->dev));
    float* full = m->rank == 0 ? (float*)mallocCheck(m->num_params * sizeof(float)) : NULL;
    zeroCheck(zero_dev_master_gather(&m->dev, full));
    if (m->rank == 0) {
        snprintf(path, sizeof(path), "%s/model_%08d.bin", dir, step);
        if (gpt2_write_model(path, &m->config, full) != 0) {  // nothing of this checkpoint counts: no DONE marker
            fprintf(stderr, "error: checkpoint at step %d not saved: %s\n", step, llmc_errmsg());
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        free(full);
    }
    GpuStateHeader h;
    memset(&h, 0, sizeof(h));
    h.magic = GPU_STATE_MAGIC; h.version = GPU_STATE_VERSION; h.rank = m->rank; h.world_size = m->world; h.step = step;
    h.zero_stage = m->zstage; h.floatx_bytes = (int32_t)sizeof(floatX);
    h.num_params = m->num_params; h.sample_rng = sample_rng;
    dataloader_get_state(loader, &h.loader);
    h.B = tc->B; h.T = tc->T; h.shuffle = tc->shuffle && !tc->overfit_single_batch;
    h.grad_accum = grad_accum; h.seed = tc->seed;
    snprintf(path, sizeof(path), "%s/gpu_state_%08d_%05d.bin", dir, step, m->rank);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE* fp = fopen(tmp, "wb");
    size_t n = m->dev.opt_elems, np = 0;
    const floatX* pstate = zero_dev_param_state(&m->dev, &np);
    int ok = fp != NULL && fwrite(&h, sizeof(h), 1, fp) == 1 &&
             write_device_array(fp, m->dev.master, n * sizeof(float)) &&
             write_device_array(fp, m->dev.m, n * sizeof(float)) &&
             write_device_array(fp, m->dev.v, n * sizeof(float)) &&
             write_device_array(fp, pstate, np * sizeof(floatX));
    int err = errno;
    if (fp != NULL && fclose(fp) != 0 && ok) { ok = 0; err = errno; }
    if (!ok || rename(tmp, path) != 0) {
        if (ok) { err = errno; }
        remove(tmp);
        fprintf(stderr, "error: rank %d cannot write checkpoint %s: %s\n", m->rank, path, strerror(err));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    mpiCheck(MPI_Barrier(MPI_COMM_WORLD));  // every rank's file is complete before the marker
    if (m->rank == 0) {
        snprintf(path, sizeof(path), "%s/DONE_%08d", dir, step);
        FILE* done = fopenCheck(path, "w");
        fclose(done);
    }
}


static void checkpoint_load_state(const char* dir, int step, GPT2* m, uint64_t* sample_rng, DataLoaderState* loader,
                                  const TrainConfig* tc, int grad_accum) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/gpu_state_%08d_%05d.bin", dir, step, m->rank);
    FILE* fp = fopen(path, "rb");
    GpuStateHeader h;
    if (fp == NULL || fread(&h, sizeof(h), 1, fp) != 1) {
        fprintf(stderr, "error: cannot read checkpoint state %s: %s (a checkpoint of the CPU trainer or of --zero-backend "
                "host cannot be resumed by the device backend; its model_*.bin can be loaded with -e)\n", path,
                fp ? "truncated header" : strerror(errno));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (h.magic != GPU_STATE_MAGIC || h.version != GPU_STATE_VERSION) {
        fprintf(stderr, "error: %s is not a GPU train_gpt2_zero3 state file of this version (magic %d, version %d)\n", path, h.magic, h.version);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (h.world_size != m->world || h.rank != m->rank || h.zero_stage != m->zstage || h.num_params != m->num_params ||
        h.step != step || h.floatx_bytes != (int32_t)sizeof(floatX)) {
        fprintf(stderr, "error: %s was saved by rank %d of %d at stage %d for %llu parameters at step %d in %s; this run is "
                "rank %d of %d at stage %d with %zu parameters in %s (resuming needs the same ranks, stage, model and precision)\n",
                path, h.rank, h.world_size, h.zero_stage, (unsigned long long)h.num_params, h.step,
                h.floatx_bytes == 4 ? "fp32" : "bf16", m->rank, m->world, m->zstage, m->num_params, PRECISION_MODE);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    checkpoint_check_data(path, h.B, h.T, h.shuffle, h.grad_accum, h.seed, tc, grad_accum);
    size_t n = m->dev.opt_elems, np = 0;
    floatX* pstate = zero_dev_param_state(&m->dev, &np);
    int ok = read_device_array(fp, m->dev.master, n * sizeof(float)) &&
             read_device_array(fp, m->dev.m, n * sizeof(float)) &&
             read_device_array(fp, m->dev.v, n * sizeof(float)) &&
             read_device_array(fp, pstate, np * sizeof(floatX));
    fclose(fp);
    if (!ok) {
        fprintf(stderr, "error: checkpoint state %s is truncated\n", path);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    zeroCheck(zero_dev_after_load(&m->dev));
    *sample_rng = h.sample_rng;
    *loader = h.loader;
}

// ----------------------------------------------------------------------------
// the --report JSON (the CPU trainer's fields where they apply)


// this rank's memory in MEM_* order (llmc/trainer.h). Device: the floatX copies of the parameters and
// gradients, the device backend's fp32 master and AdamW moments, activations, scratch and
// the cuBLASLt workspace (buffers), what this program allocated, and the peak in use
// (cudaMemGetInfo's total - free: the CUDA context and cuBLAS's own memory count).
// Host: the engine's model states (host-staged backend: all of them live on the host,
// whatever the engine's own accounting calls device or host) and the swap file.
static void memory_figures(const GPT2* m, double peak_in_use, double* out) {
    memset(out, 0, MEM_FIELDS * sizeof(double));
    out[MEM_PARAMS] = (double)m->bytes_params;
    out[MEM_GRADS] = (double)m->bytes_grads;
    out[MEM_OPTIMIZER] = (double)m->bytes_optimizer;
    out[MEM_BUFFERS] = (double)m->bytes_buffers;
    out[MEM_ACTIVATIONS] = (double)m->bytes_acts;
    out[MEM_ALLOCATED] = (double)g_device_alloc_bytes;
    out[MEM_PEAK] = peak_in_use;
    if (!m->use_engine) {  // the device engine's pinned host arrays (optimizer offload)
        out[MEM_HOST_PARAMS] = m->dev.host_bytes_params;
        out[MEM_HOST_GRADS] = m->dev.host_bytes_grads;
        out[MEM_HOST_OPTIMIZER] = m->dev.host_bytes_optimizer;
        return;
    }
    const ZeroMemory* zm = &m->zero.mem;
    out[MEM_HOST_PARAMS] = zm->peak[ZERO_MEM_PARAMS] + zm->peak[ZERO_MEM_HOST_PARAMS];
    out[MEM_HOST_GRADS] = zm->peak[ZERO_MEM_GRADS] + zm->peak[ZERO_MEM_HOST_GRADS];
    out[MEM_HOST_OPTIMIZER] = zm->peak[ZERO_MEM_OPTIMIZER] + zm->peak[ZERO_MEM_HOST_OPTIMIZER];
    // + the pinned staging of one unit's gradient (host_stage: as large as dev_stage)
    out[MEM_HOST_BUFFERS] = zm->peak[ZERO_MEM_BUFFERS] + zm->peak[ZERO_MEM_HOST_BUFFERS] + (double)m->bytes_stage;
    out[MEM_NVME] = zm->nvme_bytes;
}

// mem: (world, MEM_FIELDS); comm_per_step: allgather, reduce_scatter, allreduce bytes and
// wait ms per step; moved: ZERO_NUM_MOVES bytes per step
static void report_write(const char* path, const TrainConfig* tc, const GPT2* m, int world, int grad_accum,
                         const StepRecord* steps, int nsteps, const ValRecord* vals, int nvals,
                         const double* mem, const char* device_name, double flops_per_token,
                         const double* comm_per_step, const double* moved, double update_ms) {
    cJSON* root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "world_size", world);
    cJSON_AddNumberToObject(root, "zero_stage", m->zstage);
    cJSON_AddNumberToObject(root, "num_parameters", (double)m->num_params);
    cJSON_AddNumberToObject(root, "num_parameters_padded", m->use_engine ? (double)m->zero.plan.padded_total : (double)m->dev.plan.padded_total);
    cJSON_AddStringToObject(root, "device", device_name);
    cJSON_AddStringToObject(root, "precision", PRECISION_MODE);
    cJSON_AddStringToObject(root, "zero_backend", m->use_engine ? "host" : "device");
    cJSON* cfg = report_add_run(root, tc, &m->config, grad_accum, steps, nsteps, vals, nvals);
    cJSON_AddNumberToObject(cfg, "recompute", m->recompute);
    char zdesc[512];
    zero_config_describe(m->use_engine ? &m->zero.cfg : &m->dev.cfg, zdesc, sizeof(zdesc));
    cJSON_AddStringToObject(cfg, "zero", zdesc);
    cJSON_AddNumberToObject(cfg, "flops_per_token", flops_per_token);
    report_add_memory(root, mem, world);
    report_add_traffic(root, comm_per_step, moved, update_ms);
    report_save(root, path);
}

// peak dense bf16 tensor TFLOP/s by device name; 0 when unknown
static double peak_bf16_tflops(const char* name) {
    if (strstr(name, "H200") != NULL) { return 989.0; }
    if (strstr(name, "H100") != NULL) {
        if (strstr(name, "PCIe") != NULL) { return 756.0; }
        if (strstr(name, "HBM3") != NULL || strstr(name, "SXM") != NULL) { return 989.0; }
        return 0.0;  // NVL and other variants: not in the table
    }
    if (strstr(name, "A100") != NULL) { return 312.0; }
    return 0.0;
}

// the model's part of validation and sampling (llmc/trainer.h runs the loops)
static void batch_to_device(GPT2* m, const int* inputs, const int* targets, size_t n);

static float eval_loss(void* model, const int* inputs, const int* targets) {
    GPT2* m = (GPT2*)model;
    batch_to_device(m, inputs, targets, (size_t)m->B * m->T);
    gpt2_forward(m, m->B, m->T, 1, 0, 0.0f);
    return m->mean_loss;
}

// the last position's logits row to the host, as floats, softmax over the real V there
static const float* eval_next_probs(void* model, const int* tokens, int t) {
    GPT2* m = (GPT2*)model;
    int Vp = m->config.padded_vocab_size;
    batch_to_device(m, tokens, NULL, (size_t)t);
    gpt2_forward(m, 1, t, 0, 0, 0.0f);
    cudaCheck(cudaMemcpyAsync(m->host_logits, m->acts.logits + (size_t)(t - 1) * Vp, Vp * sizeof(floatX),
                              cudaMemcpyDeviceToHost, m->stream));
    cudaCheck(cudaStreamSynchronize(m->stream));
    for (int i = 0; i < Vp; i++) { m->host_logits_f[i] = floatx_to_float_host(m->host_logits[i]); }
    softmax_row_host(m->host_logits_f, m->config.vocab_size);
    return m->host_logits_f;
}

// n tokens (and targets, unless NULL) for the next forward. Two slots alternate: the
// work issued so far read the current one, so the next is filled, through its pinned
// host staging, once the work that last used it (one batch earlier) is done: the host
// rarely waits, and never for the batch the GPU is working on.
static void batch_to_device(GPT2* m, const int* inputs, const int* targets, size_t n) {
    cudaCheck(cudaEventRecord(m->slot_free[m->slot], m->stream));  // the end of the current slot's use
    m->slot ^= 1;
    cudaCheck(cudaEventSynchronize(m->slot_free[m->slot]));  // its staging and device buffers are free
    int* h = m->host_batch[m->slot];
    memcpy(h, inputs, n * sizeof(int));
    if (targets != NULL) { memcpy(h + n, targets, n * sizeof(int)); }
    m->cur_inputs = m->slot == 0 ? m->acts.inputs : m->acts.inputs_alt;
    m->cur_targets = m->slot == 0 ? m->acts.targets : m->acts.targets_alt;
    cudaCheck(cudaMemcpyAsync(m->cur_inputs, h, n * sizeof(int), cudaMemcpyHostToDevice, m->stream));
    if (targets != NULL) { cudaCheck(cudaMemcpyAsync(m->cur_targets, h + n, n * sizeof(int), cudaMemcpyHostToDevice, m->stream)); }
}

static double device_bytes_in_use(void) {
    size_t free_b = 0, total_b = 0;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    return (double)(total_b - free_b);
}

// ----------------------------------------------------------------------------

int main(int argc, char** argv) {
    TrainConfig tc;
    int rank, world;
    trainer_start(&argc, &argv, &tc, &rank, &world);
    if (tc.estimate != NULL) { die_all(rank, "--estimate is in train_gpt2_zero3_cpu (it needs no GPU)"); }

    // The GPU of this rank: the local rank's among those it sees (round-robin when the
    // ranks on a node outnumber them; the host backend lets 2-4 ranks test the engine on
    // one GPU). A launcher may also give each rank its own single visible GPU.
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        fprintf(stderr, "error: rank %d: no CUDA device found\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Comm local;
    int local_rank = 0, local_size = 1;
    mpiCheck(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local));
    mpiCheck(MPI_Comm_rank(local, &local_rank));
    mpiCheck(MPI_Comm_size(local, &local_size));
    int device = local_rank % ndev;
    cudaCheck(cudaSetDevice(device));
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, device));
    // do two ranks of this node drive the same GPU? (its UUID, not the device index: with
    // one visible GPU per rank every rank's index is 0)
    char* uuids = (char*)mallocCheck((size_t)local_size * sizeof(prop.uuid));
    mpiCheck(MPI_Allgather(&prop.uuid, (int)sizeof(prop.uuid), MPI_BYTE, uuids, (int)sizeof(prop.uuid), MPI_BYTE, local));
    int gpus_ok = 1;
    for (int r = 0; r < local_size; r++) {
        if (r != local_rank && memcmp(uuids + (size_t)r * sizeof(prop.uuid), &prop.uuid, sizeof(prop.uuid)) == 0) { gpus_ok = 0; }
    }
    free(uuids);
    MPI_Comm_free(&local);
    // the CPU Adam's threads (offload): the node's cores split among its ranks unless the
    // user chose (OMP_NUM_THREADS), as in the CPU trainer
    int omp_threads = 0;
    if (getenv("OMP_NUM_THREADS") == NULL) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        omp_threads = (int)(cores / local_size) > 0 ? (int)(cores / local_size) : 1;
        omp_set_num_threads(omp_threads);
    }

    // Where the model states live. The device backend (zero3/device.cuh): every stage,
    // optimizer offload to the CPU, one GPU per rank (NCCL). The host-staged backend (the
    // ZeRO engine on the host): also NVMe and parameter offload, ranks sharing a GPU.
    // auto takes the device backend where it can.
    int device_ok = tc.zero.offload_param == ZERO_OFFLOAD_NONE && tc.zero.offload_optimizer != ZERO_OFFLOAD_NVME &&
                    !(tc.zero.offload_optimizer == ZERO_OFFLOAD_CPU && tc.zero.stage == 0);
    mpiCheck(MPI_Allreduce(MPI_IN_PLACE, &gpus_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));  // every node
    int use_engine = !strcmp(tc.zero_backend, "host") || (!strcmp(tc.zero_backend, "auto") && !(device_ok && gpus_ok));
    if (!use_engine && !device_ok) {
        char msg[512];
        snprintf(msg, sizeof(msg), "--zero-backend device offloads the optimizer to the CPU at stages 1-3 only (got -z %d, "
                 "offload optimizer %s, param %s): use --zero-backend host (or auto) for NVMe and parameter offload",
                 tc.zero.stage, zero_offload_name(tc.zero.offload_optimizer), zero_offload_name(tc.zero.offload_param));
        die_all(rank, msg);
    }
    if (!use_engine && !gpus_ok) {
        char msg[512];
        snprintf(msg, sizeof(msg), "--zero-backend device needs one GPU per rank (NCCL), but ranks share a GPU "
                 "(%d ranks on a node that shows them %d): use --zero-backend host (or auto) to share GPUs", local_size, ndev);
        die_all(rank, msg);
    }

    // the model: a file, or a descriptor with random init from --seed
    GPT2Config config;
    float* params = NULL;
    trainer_model(&tc, rank, 1, &config, &params);
    if ((config.padded_vocab_size * sizeof(floatX)) % 16 != 0) {
        char msg[256];
        snprintf(msg, sizeof(msg), "padded vocabulary %d: the GPU trainer needs a multiple of %zu",
                 config.padded_vocab_size, 16 / sizeof(floatX));
        die_all(rank, msg);
    }

    long tokens_per_micro = (long)tc.B * tc.T * world;
    long total_batch = trainer_total_batch(&tc, rank, world);
    int grad_accum = (int)(total_batch / tokens_per_micro);
    check_ranks_agree(&tc, &config, total_batch, rank, world);

    trainer_output_dir(&tc, rank);
    GPT2 model;
    if (use_engine && tc.dpu) { die_all(rank, "--dpu runs on the device backend (--offload-optimizer cpu, no NVMe or parameter offload, one GPU per rank)"); }
    gpt2_build(&model, &config, params, use_engine, &tc.zero, tc.beta1, tc.beta2, tc.eps, tc.dpu, omp_threads);
    free(params);

    DataLoader train_loader, val_loader;
    int val_steps, max_steps;
    trainer_loaders(&tc, rank, world, grad_accum, &train_loader, &val_loader, &val_steps, &max_steps);
    int use_val = tc.val_every > 0;
    Tokenizer tokenizer;
    int start_token;
    int have_tokenizer = trainer_tokenizer(&tc, rank, config.vocab_size, &tokenizer, &start_token);
    int use_flash = !strcmp(tc.attention, "flash");
    if (use_flash && !attention_use_flash(tc.T, config.channels / config.num_heads)) {
        char msg[256];
        snprintf(msg, sizeof(msg), "--attention flash: head size %d is not one the kernel is built for (64, 96, 128)",
                 config.channels / config.num_heads);
        die_all(rank, msg);
    }
    gpt2_alloc_activations(&model, tc.B, tc.T, tc.recompute, use_flash);

    LRScheduler sched;
    memset(&sched, 0, sizeof(sched));
    llmcCheck(lr_scheduler_init(&sched, tc.lr_schedule, tc.lr, tc.warmup, max_steps, tc.final_lr_frac));

    Rng sample_rng;
    rng_init(&sample_rng, tc.seed ^ 0xA5A5A5A5ull);

    int start_step = 0;
    if (tc.resume) {
        int latest = checkpoint_latest(tc.output_dir);
        mpiCheck(MPI_Bcast(&latest, 1, MPI_INT, 0, MPI_COMM_WORLD));  // rank 0's view decides
        if (latest < 0) {
            if (rank == 0) { printf("no checkpoint in %s: starting from step 0\n", tc.output_dir); }
        } else {
            DataLoaderState ls;
            if (use_engine) {
                checkpoint_load_zero(tc.output_dir, latest, &model.zero, model.num_params, rank, world,
                                     &sample_rng.state, &ls, &tc, grad_accum);
                for (int u = 0; u < model.num_units; u++) { model.unit_fresh[u] = 0; }
            } else {
                checkpoint_load_state(tc.output_dir, latest, &model, &sample_rng.state, &ls, &tc, grad_accum);
            }
            if (dataloader_set_state(&train_loader, &ls) != 0) {
                fprintf(stderr, "error: rank %d: %s\n", rank, llmc_errmsg());
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
            start_step = latest;
            if (rank == 0) { printf("resumed from %s at step %d\n", tc.output_dir, latest); }
        }
    }

    // MFU: FLOPs per token = 6 * (parameters in matmuls) + 12 * L * T * C, where the
    // matmul parameters are the 12 C^2 of each block's qkv, attproj, fc and fcproj
    // weights plus the classifier's Vp * C (the padded columns are computed too); the
    // second term is the attention's Q K^T and att V (forward + backward)
    double Cd = config.channels, Ld = config.num_layers;
    double matmul_params = Ld * 12.0 * Cd * Cd + (double)config.padded_vocab_size * Cd;
    double flops_per_token = 6.0 * matmul_params + 12.0 * Ld * tc.T * Cd;
    double peak_tflops = peak_bf16_tflops(prop.name);

    if (rank == 0) {
        char zdesc[512];
        zero_config_describe(&tc.zero, zdesc, sizeof(zdesc));
        size_t len = strlen(zdesc);
        snprintf(zdesc + len, sizeof(zdesc) - len, ", %s backend", use_engine ? "host-staged" : "device");
        trainer_print_header(&tc, &config, model.num_params, world, grad_accum, total_batch, max_steps, zdesc);
        printf("| device, precision     | %s (%d per node), %s, recompute %d, attention %s\n", prop.name, ndev, PRECISION_MODE,
               tc.recompute, use_flash ? "flash" : "cublas");
        if (peak_tflops > 0) {
            printf("| MFU basis             | %.3g FLOP/token (6*matmul params + 12*L*T*C), peak bf16 %.0f TFLOP/s\n", flops_per_token, peak_tflops);
        } else {
            printf("| MFU basis             | %.3g FLOP/token (6*matmul params + 12*L*T*C), peak bf16 n/a for this device\n", flops_per_token);
        }
        printf("+-----------------------+\n");
    }
    double peak_bytes = device_bytes_in_use();
    double* mem_all = (double*)mallocCheck(MEM_FIELDS * world * sizeof(double));
    {   // one memory line per rank, in rank order
        double mine[MEM_FIELDS];
        memory_figures(&model, peak_bytes, mine);
        memory_gather(mine, mem_all, rank, world, 1, "GPU ");
    }

    StepRecord* steps = (StepRecord*)mallocCheck((max_steps + 1) * sizeof(StepRecord));
    ValRecord* vals = (ValRecord*)mallocCheck((max_steps + 2) * sizeof(ValRecord));
    int nsteps = 0, nvals = 0;
    int have_batch = 0;
    size_t BT = (size_t)tc.B * tc.T;
    // the engine's counters at the start, for per-step figures in the report
    double comm0[ZERO_NUM_COLLECTIVES] = {0}, moved0[ZERO_NUM_MOVES] = {0};
    if (use_engine) { memcpy(comm0, model.zero.comm.bytes, sizeof(comm0)); memcpy(moved0, model.zero.moved, sizeof(moved0)); }
    else if (model.dev.use_nccl) { memcpy(comm0, model.dev.nccl.bytes, sizeof(comm0)); }
    double update0 = use_engine ? model.zero.update_ms : model.dev.update_ms;
    double h2d0 = use_engine ? model.moved_h2d : model.dev.moved_h2d, d2h0 = use_engine ? model.moved_d2h : model.dev.moved_d2h;
    double wait_total = 0.0;

    for (int step = start_step; step <= max_steps; step++) {
        int last_step = step == max_steps;
        // --dpu: the last update is still on its thread; the final evaluation, samples and
        // checkpoint see it applied
        if (last_step && !use_engine) { zeroCheck(zero_dev_flush(&model.dev)); }

        trainer_validate(&tc, step, last_step, rank, world, &val_loader, val_steps, eval_loss, &model, vals, &nvals);
        trainer_sample(&tc, step, last_step, rank, config.vocab_size, start_token, have_tokenizer ? &tokenizer : NULL,
                       &sample_rng, eval_next_probs, &model);

        if (tc.checkpoint_every > 0 && step > start_step && (step % tc.checkpoint_every == 0 || last_step)) {
            if (use_engine) {
                checkpoint_save_zero(tc.output_dir, step, &model.zero, &model.config, model.num_params, rank, world,
                                     sample_rng.state, &train_loader, &tc, grad_accum);
            } else {
                checkpoint_save(tc.output_dir, step, &model, sample_rng.state, &train_loader, &tc, grad_accum);
            }
            if (rank == 0) { printf("saved checkpoint at step %d in %s\n", step, tc.output_dir); }
        }
        if (last_step) { break; }

        NVTX_PUSH("step");
        cudaCheck(cudaStreamSynchronize(model.stream));
        double wait0 = gpt2_comm_wait_ms(&model), t0 = now_ms();
        float dloss = 1.0f / ((float)BT * grad_accum);  // the mean over B*T positions and the micro-steps
        for (int micro = 0; micro < grad_accum; micro++) {
            if (!tc.overfit_single_batch || !have_batch) {
                llmcCheck(dataloader_next_batch(&train_loader));
                have_batch = 1;
            }
            // every micro-step, also when overfitting one batch: validation and sampling
            // use the same device buffers
            batch_to_device(&model, train_loader.inputs, train_loader.targets, BT);
            gpt2_forward(&model, tc.B, tc.T, 1, 1, dloss);
            gpt2_backward(&model, tc.B, tc.T, micro == grad_accum - 1);
        }
        float lr = lr_scheduler_get(&sched, step);
        gpt2_update(&model, lr, tc.weight_decay, tc.grad_clip, step + 1, tc.seed);
        double loss_sum = 0.0;  // the micro-steps' mean losses, summed on the GPU
        cudaCheck(cudaMemcpyAsync(&loss_sum, model.acts.loss_acc, sizeof(double), cudaMemcpyDeviceToHost, model.stream));
        cudaCheck(cudaMemsetAsync(model.acts.loss_acc, 0, sizeof(double), model.stream));
        cudaCheck(cudaStreamSynchronize(model.stream));
        cudaCheck(cudaGetLastError());
        float loss = allreduce_mean((float)(loss_sum / grad_accum), world);
        double ms = now_ms() - t0;
        float norm = gpt2_step_norm(&model);
        double wait = gpt2_comm_wait_ms(&model) - wait0;
        wait_total += wait;
        NVTX_POP();
        double tps = total_batch / (ms / 1e3);
        // MFU per GPU: this rank's share of the tokens on its device's peak
        double mfu = peak_tflops > 0 ? flops_per_token * (tps / world) / (peak_tflops * 1e12) : -1.0;
        double in_use = device_bytes_in_use();
        if (in_use > peak_bytes) { peak_bytes = in_use; }
        char mfu_s[32];
        if (mfu >= 0) { snprintf(mfu_s, sizeof(mfu_s), "%.1f%%", 100.0 * mfu); } else { snprintf(mfu_s, sizeof(mfu_s), "n/a"); }
        if (rank == 0) {
            printf("step %4d/%d | loss %.6f | lr %.2e | norm %.4f | %.1f ms | %.0f tok/s | MFU %s | GPU mem %.0f MiB | comm wait %.1f ms\n",
                   step + 1, max_steps, loss, lr, norm, ms, tps, mfu_s, in_use / 1048576.0, wait);
        }
        log_line(tc.output_dir, rank, "s:%d trl:%f\n", step, loss);
        steps[nsteps++] = (StepRecord){step, loss, ms, tps, lr, norm, wait, mfu};
    }

    {   // memory peaks over the whole run
        double mine[MEM_FIELDS];
        memory_figures(&model, peak_bytes, mine);
        memory_gather(mine, mem_all, rank, world, 0, "");
    }
    if (rank == 0 && tc.report != NULL) {
        // per training step, averaged (validation, sampling and checkpoints included)
        int n = nsteps > 0 ? nsteps : 1;
        double comm[4] = {0, 0, 0, wait_total / n}, moved[ZERO_NUM_MOVES] = {0};
        double update_ms = 0.0;
        if (use_engine) {
            comm[0] = (model.zero.comm.bytes[ZERO_ALLGATHER] - comm0[ZERO_ALLGATHER]) / n;
            comm[1] = (model.zero.comm.bytes[ZERO_REDUCE_SCATTER] - comm0[ZERO_REDUCE_SCATTER]) / n;
            comm[2] = (model.zero.comm.bytes[ZERO_ALLREDUCE] - comm0[ZERO_ALLREDUCE]) / n;
            for (int k = 0; k < ZERO_NUM_MOVES; k++) { moved[k] = (model.zero.moved[k] - moved0[k]) / n; }
            // the GPU's own traffic: the units up, the gradients down
            moved[ZERO_MOVE_H2D] = (model.moved_h2d - h2d0) / n;
            moved[ZERO_MOVE_D2H] = (model.moved_d2h - d2h0) / n;
            update_ms = (model.zero.update_ms - update0) / n;
        } else {
            for (int k = 0; model.dev.use_nccl && k < 3; k++) {  // ZERO_ALLGATHER, ZERO_REDUCE_SCATTER, ZERO_ALLREDUCE
                comm[k] = (model.dev.nccl.bytes[k] - comm0[k]) / n;
            }
            // optimizer offload: the gradient shards out, the updated shards in, the CPU Adam
            moved[ZERO_MOVE_H2D] = (model.dev.moved_h2d - h2d0) / n;
            moved[ZERO_MOVE_D2H] = (model.dev.moved_d2h - d2h0) / n;
            update_ms = (model.dev.update_ms - update0) / n;
        }
        report_write(tc.report, &tc, &model, world, grad_accum, steps, nsteps, vals, nvals, mem_all, prop.name,
                     flops_per_token, comm, moved, update_ms);
    }

    free(steps); free(vals); free(mem_all);
    if (have_tokenizer) { tokenizer_free(&tokenizer); }
    dataloader_free(&train_loader);
    if (use_val) { dataloader_free(&val_loader); }
    gpt2_free(&model);
    MPI_Finalize();
    return 0;
}
