/*
 train_gpt2_zero3 (CUDA): the GPU trainer. The same model code as the fp32 CPU trainer
 (train_gpt2_zero3.c), line for line, with the CUDA kernels (llmc/ .cuh files) in place of the
 CPU ops; the same flags, files, run and report (llmc/trainer.h).

 Parameters and gradients are floatX (bf16, or fp32 with -DENABLE_FP32), the master
 weights and AdamW moments fp32. The forward and backward reach them one layer unit at a
 time through the four unit hooks (params_fetch, params_release, grads_unit,
 grads_reduce), whatever engine holds the model states (--zero-backend):

 device   zero3/device.cuh: the states on the GPU, every stage, collectives over NCCL on
          their own stream ordered with events, optimizer offload to the CPU (--dpu too);
          one GPU per rank
 host     zero3/staged.cuh: the host engine of the CPU trainer, with the GPU computing on
          copies the hooks upload and download: NVMe and parameter offload, ranks that
          share a GPU (the multi-rank GPU tests)
 auto (the default) takes the device engine where it can.

 One compute stream; one cuBLAS handle (attention) and one cuBLASLt handle (matmuls).
*/
#include <stdio.h>       // printf
#include <stdlib.h>      // exit, malloc
#include <string.h>      // memset, strstr, strcmp
#include <stddef.h>      // offsetof
#include <math.h>        // exp, INFINITY
#include <mpi.h>         // ranks, the GPU of each
#include <omp.h>         // omp_set_num_threads: the CPU Adam's threads
#include <nvtx3/nvToolsExt.h>  // NVTX ranges (header-only)

// the CUDA kernels
#include "llmc/cuda_common.cuh"       // floatX, cudaCheck, cublasCheck
#include "llmc/encoder.cuh"           // encoder_forward/backward
#include "llmc/layernorm.cuh"         // layernorm, fused residual + layernorm
#include "llmc/gelu.cuh"              // gelu_forward (recompute)
#include "llmc/attention_flash.cuh"   // attention through cuBLAS (llmc/attention.cuh), or the fused flash kernel
#include "llmc/matmul.cuh"            // cuBLASLt matmuls with bias / GELU epilogues
#include "llmc/fused_classifier.cuh"  // softmax + cross-entropy + its backward, in place
#include "llmc/op_timer.cuh"          // --profile-ops: the ops' CUDA events
#include "llmc/trainer_proc.h" // params_fetch, grads_unit, grads_reduce, zeroCheck, mpiCheck, die_all: the unit hooks
#include "zero3/util.h"        // zero_errmsg

// the host building blocks, shared with the CPU trainer (C headers compiled as C++).
// nvcc's front end reports a false "set but never used" (#550) for a variable that
// zero3/config.h does use through (void)n: silenced for these headers only.
#pragma nv_diag_suppress 550
#include "llmc/utils.h"        // checked wrappers, llmc_error
#include "llmc/gpt2.h"         // GPT2Config, units, model files, init
#include "llmc/activations.h"  // the activations' sizes
#include "llmc/trainer.h"      // the run: start-up, data, the step loop, checkpoints, the report; the unit hooks
#pragma nv_diag_default 550
#include "zero3/device.h"      // the engines, compiled apart (zero3/device.cu): zero_dev_create, zero_staged_create, zero_gpu_wait

#define NVTX_PUSH(name) nvtxRangePushA(name)
#define NVTX_POP() nvtxRangePop()

// ----------------------------------------------------------------------------
// the model on the device

// pointers into one unit (parameters or gradients), as llmc/gpt2.h's for the CPU
typedef struct { floatX *wte, *wpe; } DevEmbed;
typedef struct {
    floatX *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb;
    floatX *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
} DevBlock;
typedef struct { floatX *lnfw, *lnfb; } DevFinal;

static DevEmbed gpt2_embed(const GPT2Config* c, void* unit) {
    floatX* p = (floatX*)unit;
    DevEmbed e = {p, p + (size_t)c->padded_vocab_size * c->channels};
    return e;
}

static DevBlock gpt2_block(const GPT2Config* c, void* unit) {
    floatX* p = (floatX*)unit;
    size_t o[NUM_BLOCK_TENSORS];
    gpt2_block_offsets(c, o);
    DevBlock b = {p + o[0], p + o[1], p + o[2], p + o[3], p + o[4], p + o[5],
                  p + o[6], p + o[7], p + o[8], p + o[9], p + o[10], p + o[11]};
    return b;
}

static DevFinal gpt2_final(const GPT2Config* c, void* unit) {
    floatX* p = (floatX*)unit;
    DevFinal f = {p, p + c->channels};
    return f;
}

// The activations, in llmc/activations.h's order (its table gives their sizes), then the
// kernels' scratch. (L, ...) means one per layer.
typedef struct {
    // forward (floatX unless marked fp32)
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
    floatX* fch;        // (L,B,T,4C) pre-GELU (the matmul's aux output in bf16, its output in fp32)
    floatX* fch_gelu;   // (L,B,T,4C), or one layer when -r >= 1
    floatX* fcproj;     // (B,T,C) scratch
    floatX* residual3;  // (L,B,T,C)
    floatX* lnf;        // (B,T,C)
    float* lnf_mean;    // (B,T) fp32
    float* lnf_rstd;    // (B,T) fp32
    floatX* logits;     // (B,T,Vp), or one vocabulary tile's (B,T,Vt) with --vocab-tile (at least (B,Vp), for
                        // sampling); the classifier kernels turn it into dlogits in place
    float* cls_max;     // (B,T) fp32, tiled: each row's running max of the logits (online softmax)
    float* cls_sum;     // (B,T) fp32, tiled: each row's running sum of exp(logit - max)
    float* cls_target;  // (B,T) fp32, tiled: each row's logit of its target
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
    int* inputs;           // (B,T) the batch, in two slots: one is filled while the GPU may
    int* targets;          // (B,T) still read the other (see batch_to_device)
    int* inputs_alt;       // (B,T)
    int* targets_alt;      // (B,T)
    // the kernels' scratch
    float* ln_scratch;     // layernorm_backward's partial sums
    float* dbias_scratch;  // matmul_backward's dbias partial sums
    void* enc_scratch;     // encoder_backward's sort buffers and partial sums
} DevActs;

typedef struct {
    GPT2Config config;
    size_t num_params;
    Zero* zero;                // parameters, gradients and AdamW state: the device or the host-staged engine
    DevActs acts;
    int B, T, recompute;
    int vocab_tile;            // the classifier's tile of vocabulary columns, <= Vp; 0: untiled
    int use_flash;             // --attention flash: the fused kernel, O(T) memory per row
    size_t bytes_acts;         // the activations and the kernels' scratch
    // the batch slot the kernels read (acts.inputs/targets or their _alt), its pinned
    // staging on the host, and per slot an event after the last work that used it
    int* cur_inputs;
    int* cur_targets;
    int slot;
    int* host_batch[2];        // (2*B*T) pinned: inputs then targets
    cudaEvent_t slot_free[2];
    float* host_losses;        // (B*T) pinned: an evaluation forward's per-position losses
    float* host_logits_f;      // (Vp) for sampling
    floatX* host_logits;       // (Vp) pinned
    cudaStream_t stream;
    cublasHandle_t cublas;
    MatmulCtx mm;              // cuBLASLt's handle, its workspace, and the stream (the matmuls' context)
    int gelu_fusion;           // -ge: 2 also fuses the GELU's backward into fcproj's dinp (DGELU epilogue, bf16)
    double peak_in_use;        // the most device memory in use seen (cudaMemGetInfo)
    OpTimer ops;               // --profile-ops: the ops' events on the stream (off unless a step is profiled)
} GPT2;

// the op timer (llmc/profile.h's OP): events on the stream around an op (NVTX too, for nsys)
static void op_begin(GPT2* m, const char* name, int layer) {
    if (m->ops.prof == NULL) { return; }
    NVTX_PUSH(name);
    op_timer_begin(&m->ops, name, layer);
}
static void op_end(GPT2* m) {
    if (m->ops.prof == NULL) { return; }
    op_timer_end(&m->ops);
    NVTX_POP();
}

static size_t g_device_alloc_bytes = 0;  // everything this program cudaMalloc'ed itself (the engine counts its own)

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

// The model and its engine: the device engine (device_engine) or the host-staged one, both
// built from `in` (trainer_engine's) and ordered after the model's stream.
static void gpt2_build(GPT2* m, const GPT2Config* c, ZeroInit in, int device_engine) {
    memset(m, 0, sizeof(*m));
    m->config = *c;
    m->num_params = gpt2_num_params(c);
    int rank = 0;
    mpiCheck(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    // every tensor must start 16-byte aligned for cuBLASLt and the vector loads: units
    // start on 256 bytes (zero3/plan.h) and all sizes are multiples of C, so a C of a
    // multiple of 8 (bf16) / 4 (fp32) ensures it
    if (((size_t)c->channels * sizeof(floatX)) % 16 != 0) {
        fprintf(stderr, "error: channels %d: the GPU trainer needs C to be a multiple of %zu\n",
                c->channels, 16 / sizeof(floatX));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    cudaCheck(cudaStreamCreate(&m->stream));
    op_timer_init(&m->ops, m->stream);
    in.stream = m->stream;
    in.param_bytes = sizeof(floatX);
    int rc = device_engine ? zero_dev_create(&m->zero, &in) : zero_staged_create(&m->zero, &in);
    if (rc != 0) {
        fprintf(stderr, "error: rank %d: %s\n", rank, zero_errmsg());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    cublasCheck(cublasCreate(&m->cublas));
    cublasCheck(cublasSetStream(m->cublas, m->stream));
    cublaslt_init(&m->mm, m->stream);
    g_device_alloc_bytes += m->mm.workspace_bytes;
    cudaCheck(cudaStreamSynchronize(m->stream));
}

// the activations for batches of up to B x T (llmc/activations.h's table), the kernels'
// scratch, and the batch's pinned staging on the host
static void gpt2_alloc_activations(GPT2* m, int B, int T, int recompute, int use_flash, int vocab_tile) {
    size_t C = m->config.channels, Vp = m->config.padded_vocab_size, BT = (size_t)B * T;
    DevActs* a = &m->acts;
    size_t before = g_device_alloc_bytes;
    size_t bytes[ACT_COUNT];
    gpt2_activations(&m->config, B, T, recompute, use_flash, vocab_tile, ACT_GPU, sizeof(floatX), bytes);
    void** slots = (void**)a;  // DevActs: the GPU's rows first, in the table's order
    size_t k = act_rows(ACT_GPU);
    if (k * sizeof(void*) != offsetof(DevActs, ln_scratch)) {
        fprintf(stderr, "error: llmc/activations.h has %zu rows for the GPU trainer, DevActs %zu buffers\n",
                k, offsetof(DevActs, ln_scratch) / sizeof(void*));
        exit(EXIT_FAILURE);
    }
    k = 0;
    for (int i = 0; i < ACT_COUNT; i++) {
        if (act_trainer[i] & ACT_GPU) { slots[k++] = dev_alloc(bytes[i]); }
    }
    a->ln_scratch = (float*)dev_alloc((size_t)2 * LN_BWD_MAX_CHUNKS * C * sizeof(float));
    a->dbias_scratch = (float*)dev_alloc(MATMUL_DBIAS_SCRATCH_FLOATS(4 * C) * sizeof(float));
    a->enc_scratch = dev_alloc(encoder_backward_scratch_bytes(B, T, (int)C));
    cudaCheck(cudaMemset(a->loss_acc, 0, sizeof(double)));  // the only activation read before written
    for (int k = 0; k < 2; k++) {
        cudaCheck(cudaMallocHost((void**)&m->host_batch[k], 2 * BT * sizeof(int)));
        cudaCheck(cudaEventCreateWithFlags(&m->slot_free[k], cudaEventDisableTiming));
    }
    m->cur_inputs = a->inputs;
    m->cur_targets = a->targets;
    m->slot = 0;
    m->bytes_acts = g_device_alloc_bytes - before;
    cudaCheck(cudaMallocHost((void**)&m->host_losses, BT * sizeof(float)));
    cudaCheck(cudaMallocHost((void**)&m->host_logits, Vp * sizeof(floatX)));
    m->host_logits_f = (float*)mallocCheck(Vp * sizeof(float));
    m->B = B;
    m->T = T;
    m->recompute = recompute;
    m->vocab_tile = gpt2_vocab_tile(&m->config, vocab_tile);
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
// forward: inputs and targets (B, T) on the device (batch_to_device); targets may be NULL
// (no loss). Any B <= m->B and T <= m->T: the layer strides follow the call's B and T.
// Inside an engine pass. dloss > 0: a training forward (gpt2_backward follows): the fused
// classifier leaves dloss * (softmax - onehot) in place of the logits (tiled: of the last
// tile's), and the mean loss is added into acts.loss_acc on the GPU (no host wait inside
// the step); otherwise the per-position losses go to host_losses. Tiled without targets (sampling):
// the logits of each sequence's last position only, (B,Vp).
static void gpt2_forward(GPT2* m, const int* inputs, const int* targets, int B, int T, float dloss) {
    NVTX_PUSH("forward");
    const GPT2Config* c = &m->config;
    int L = c->num_layers, NH = c->num_heads, C = c->channels, V = c->vocab_size, Vp = c->padded_vocab_size;
    size_t BT = (size_t)B * T, att = (size_t)B * NH * T * T;
    int bt = (int)BT;
    DevActs* a = &m->acts;
    cudaStream_t s = m->stream;
    const MatmulCtx* mm = &m->mm;  // on stream s

    DevEmbed emb = gpt2_embed(c, params_fetch(m->zero, 0));
    OP(m, "encoder", -1, encoder_forward(a->encoded, inputs, emb.wte, emb.wpe, B, T, C, s));  // (B,T,C)
    params_release(m->zero, 0);

    for (int l = 0; l < L; l++) {
        NVTX_PUSH("layer");
        DevBlock w = gpt2_block(c, params_fetch(m->zero, 1 + l));
        floatX* residual = l == 0 ? a->encoded : a->residual3 + (l - 1) * BT * C;  // (B,T,C)
        floatX* ln1 = a->ln1 + (m->recompute >= 2 ? 0 : l * BT * C);
        floatX* ln2 = a->ln2 + (m->recompute >= 2 ? 0 : l * BT * C);
        floatX* fch_gelu = a->fch_gelu + (m->recompute >= 1 ? 0 : l * BT * 4 * C);
        floatX* qkv = a->qkv + l * BT * 3 * C;
        floatX* atty = a->atty + l * BT * C;
        floatX* residual2 = a->residual2 + l * BT * C;
        floatX* fch = a->fch + l * BT * 4 * C;

        // ln1 = layernorm(residual). After layer 0 the residual is the previous layer's
        // residual2 + fcproj, added here fused with this layernorm: the add waits for this
        // layer because the layernorm needs this unit's weights (at stage 3 the previous
        // unit may be released, this one not yet gathered, at the end of the last layer)
        if (l == 0) {
            OP(m, "ln1", l, layernorm_forward(ln1, a->ln1_mean, a->ln1_rstd, residual, w.ln1w, w.ln1b, B, T, C, s));
        } else {
            OP(m, "residual+ln1", l, fused_residual_layernorm_forward(residual, ln1, a->ln1_mean + l * BT, a->ln1_rstd + l * BT,
                                                                      a->residual2 + (l - 1) * BT * C, a->fcproj, w.ln1w, w.ln1b, bt, C, s));
        }
        OP(m, "qkv", l, matmul_forward(qkv, ln1, w.qkvw, w.qkvb, bt, C, 3 * C, NULL, 0, mm));               // (B,T,3C)
        if (m->use_flash) {
            OP(m, "attention", l, attention_flash_forward(atty, a->lse + l * (size_t)B * NH * T, qkv, B, T, C, NH, s));  // (B,T,C)
        } else {
            OP(m, "attention", l, attention_forward(atty, a->qkvr + l * BT * 3 * C, a->att + l * att, qkv, B, T, C, NH, m->cublas, s));
        }
        OP(m, "attproj", l, matmul_forward(a->attproj, atty, w.attprojw, w.attprojb, bt, C, C, NULL, 0, mm));  // (B,T,C)
        // residual2 = residual + attproj; ln2 = layernorm(residual2)
        OP(m, "residual+ln2", l, fused_residual_layernorm_forward(residual2, ln2, a->ln2_mean + l * BT, a->ln2_rstd + l * BT,
                                                                  residual, a->attproj, w.ln2w, w.ln2b, bt, C, s));
        // fch_gelu = gelu(ln2 @ fcw^T + fcb), the pre-activation kept in fch: the CPU trainer's
        // matmul_forward + gelu_forward in one call, the GELU in cuBLASLt's epilogue in bf16,
        // and in fp32 by gelu_forward after the product, with llmc/gelu.h's formula (the
        // epilogue's is undocumented, and fp32 is held to the CPU's rounding; llmc/matmul.cuh)
        OP(m, "fc+gelu", l, matmul_forward(fch_gelu, ln2, w.fcw, w.fcb, bt, C, 4 * C, fch, 1, mm));             // (B,T,4C)
        // fcproj is added to residual2 by the next unit (the next layer's ln1, or lnf)
        OP(m, "fcproj", l, matmul_forward(a->fcproj, fch_gelu, w.fcprojw, w.fcprojb, bt, 4 * C, C, NULL, 0, mm)); // (B,T,C)
        params_release(m->zero, 1 + l);
        NVTX_POP();
    }

    // residual3 of the last layer = residual2 + fcproj, and lnf = layernorm(it)
    DevFinal fin = gpt2_final(c, params_fetch(m->zero, L + 1));
    OP(m, "residual+lnf", -1, fused_residual_layernorm_forward(a->residual3 + (L - 1) * BT * C, a->lnf, a->lnf_mean, a->lnf_rstd,
                                                                a->residual2 + (L - 1) * BT * C, a->fcproj, fin.lnfw, fin.lnfb, bt, C, s));
    params_release(m->zero, L + 1);
    // the classifier is tied to the token embedding: logits = lnf @ wte^T (all Vp columns)
    emb = gpt2_embed(c, params_fetch(m->zero, 0));
    op_begin(m, "classifier", -1);  // (the products, the softmax and the losses)
    int Vt = m->vocab_tile;
    if (Vt == 0) {
        matmul_forward(a->logits, a->lnf, emb.wte, NULL, bt, C, Vp, NULL, 0, mm);             // (B,T,Vp)
    } else if (targets != NULL) {
        // one tile of columns [v0, v0 + w) at a time, folded into each row's online softmax
        // (llmc/fused_classifier.cuh); the last tile's dlogits (or logits) stay for the backward
        for (int v0 = 0; v0 < Vp; v0 += Vt) {
            int w = Vp - v0 < Vt ? Vp - v0 : Vt;
            matmul_forward(a->logits, a->lnf, emb.wte + (size_t)v0 * C, NULL, bt, C, w, NULL, 0, mm);  // (B,T,w)
            classifier_tile_forward(a->logits, a->cls_max, a->cls_sum, a->cls_target, a->losses, targets, dloss, bt,
                                    v0, w, V, Vp, dloss > 0.0f, s);
        }
    } else {
        // no targets (sampling): the logits of each sequence's last position, (B,Vp)
        for (int b = 0; b < B; b++) {
            matmul_forward(a->logits + (size_t)b * Vp, a->lnf + ((size_t)b * T + T - 1) * C, emb.wte, NULL, 1, C, Vp,
                           NULL, 0, mm);
        }
    }
    params_release(m->zero, 0);

    if (targets != NULL && Vt == 0) {
        fused_classifier(a->logits, a->losses, targets, dloss, bt, V, Vp, dloss > 0.0f, s);
    }
    op_end(m);
    if (targets != NULL && dloss > 0.0f) {
        OP(m, "loss", -1, loss_mean_accumulate_kernel<<<1, 256, 0, s>>>(a->loss_acc, a->losses, BT));
        cudaCheck(cudaGetLastError());
    } else if (targets != NULL) {
        cudaCheck(cudaMemcpyAsync(m->host_losses, a->losses, BT * sizeof(float), cudaMemcpyDeviceToHost, s));
        zeroCheck(zero_gpu_wait(s, NULL, "waiting for the losses"));
    }
    NVTX_POP();
}

// backward of the last (training) forward with the same targets and dloss, in the same
// pass, whose fused classifier left dlogits in a->logits (tiled: the last tile's).
// ACCUMULATES into the unit gradients, which the engines hand out zeroed (after each
// step, or per unit and micro-step).
static void gpt2_backward(GPT2* m, const int* inputs, const int* targets, int B, int T, float dloss) {
    NVTX_PUSH("backward");
    const GPT2Config* c = &m->config;
    int L = c->num_layers, NH = c->num_heads, C = c->channels, V = c->vocab_size, Vp = c->padded_vocab_size;
    size_t BT = (size_t)B * T, att = (size_t)B * NH * T * T;
    int bt = (int)BT;
    DevActs* a = &m->acts;
    cudaStream_t s = m->stream;
    const MatmulCtx* mm = &m->mm;  // on stream s

    // classifier: dlnf = dlogits @ wte (overwrite), dwte += dlogits^T @ lnf. The
    // embedding's gradient stays open until the encoder's backward at the end.
    DevEmbed emb = gpt2_embed(c, params_fetch(m->zero, 0));
    DevEmbed demb = gpt2_embed(c, grads_unit(m->zero, 0));
    op_begin(m, "classifier_bwd", -1);
    int Vt = m->vocab_tile;
    if (Vt == 0) {
        matmul_backward(a->dln, demb.wte, NULL, a->logits, a->lnf, emb.wte, NULL, bt, C, Vp, NULL, 0, 0, mm);
    } else {
        // tile by tile from the last, whose dlogits the forward left: the others' logits again.
        // dlnf is accumulated over the tiles in its floatX buffer (one rounding per tile in bf16)
        int last = (Vp - 1) / Vt * Vt;
        for (int v0 = last; v0 >= 0; v0 -= Vt) {
            int w = Vp - v0 < Vt ? Vp - v0 : Vt;
            if (v0 != last) {
                matmul_forward(a->logits, a->lnf, emb.wte + (size_t)v0 * C, NULL, bt, C, w, NULL, 0, mm);  // (B,T,w)
                classifier_tile_backward(a->logits, a->cls_max, a->cls_sum, targets, dloss, bt, v0, w, V, Vp, s);
            }
            matmul_backward(a->dln, demb.wte + (size_t)v0 * C, NULL, a->logits, a->lnf, emb.wte + (size_t)v0 * C, NULL,
                            bt, C, w, NULL, v0 != last, 0, mm);
        }
    }
    op_end(m);
    params_release(m->zero, 0);

    // final layernorm: dresidual = its input gradient (layernorm_backward accumulates)
    DevFinal fin = gpt2_final(c, params_fetch(m->zero, L + 1));
    DevFinal dfin = gpt2_final(c, grads_unit(m->zero, L + 1));
    cudaCheck(cudaMemsetAsync(a->dresidual, 0, BT * C * sizeof(floatX), s));
    OP(m, "lnf_bwd", -1, layernorm_backward(a->dresidual, dfin.lnfw, dfin.lnfb, a->ln_scratch, a->dln, a->residual3 + (L - 1) * BT * C,
                                            fin.lnfw, a->lnf_mean, a->lnf_rstd, B, T, C, s));
    params_release(m->zero, L + 1);
    grads_reduce(m->zero, L + 1);

    // dresidual carries the gradient of the residual stream down through the blocks:
    // residual3 = residual2 + fcproj and residual2 = residual + attproj pass it through
    // unchanged, and each layernorm backward adds its branch into it.
    for (int l = L - 1; l >= 0; l--) {
        NVTX_PUSH("layer");
        DevBlock w = gpt2_block(c, params_fetch(m->zero, 1 + l));
        DevBlock dw = gpt2_block(c, grads_unit(m->zero, 1 + l));
        floatX* residual = l == 0 ? a->encoded : a->residual3 + (l - 1) * BT * C;
        floatX* residual2 = a->residual2 + l * BT * C;
        floatX* ln1 = a->ln1 + (m->recompute >= 2 ? 0 : l * BT * C);
        floatX* ln2 = a->ln2 + (m->recompute >= 2 ? 0 : l * BT * C);
        floatX* fch_gelu = a->fch_gelu + (m->recompute >= 1 ? 0 : l * BT * 4 * C);
        floatX* fch = a->fch + l * BT * 4 * C;
        floatX* qkv = a->qkv + l * BT * 3 * C;
        float* ln1_mean = a->ln1_mean + l * BT, *ln1_rstd = a->ln1_rstd + l * BT;
        float* ln2_mean = a->ln2_mean + l * BT, *ln2_rstd = a->ln2_rstd + l * BT;
        if (m->recompute >= 1) { OP(m, "gelu_recompute", l, gelu_forward(fch_gelu, fch, BT * 4 * C, s)); }
        if (m->recompute >= 2) {  // the same statistics as the forward stored: recomputed from the same inputs
            op_begin(m, "ln_recompute", l);
            layernorm_forward(ln1, ln1_mean, ln1_rstd, residual, w.ln1w, w.ln1b, B, T, C, s);
            layernorm_forward(ln2, ln2_mean, ln2_rstd, residual2, w.ln2w, w.ln2b, B, T, C, s);
            op_end(m);
        }

        // MLP: fcproj(gelu(fc(ln2(residual2)))); the GELU backward is fused into the
        // fcproj matmul's dinp through pre_gelu: dfch = (dresidual @ fcprojw) * gelu'(fch)
        OP(m, "fcproj+gelu_bwd", l, matmul_backward(a->dfch, dw.fcprojw, dw.fcprojb, a->dresidual, fch_gelu, w.fcprojw,
                                                    a->dbias_scratch, bt, 4 * C, C, fch, 0, m->gelu_fusion, mm));
        OP(m, "fc_bwd", l, matmul_backward(a->dln, dw.fcw, dw.fcb, a->dfch, ln2, w.fcw, a->dbias_scratch, bt, C, 4 * C, NULL, 0, 0, mm));
        OP(m, "ln2_bwd", l, layernorm_backward(a->dresidual, dw.ln2w, dw.ln2b, a->ln_scratch, a->dln, residual2, w.ln2w, ln2_mean,
                                               ln2_rstd, B, T, C, s));

        // attention: attproj(attention(qkv(ln1(residual))))
        OP(m, "attproj_bwd", l, matmul_backward(a->datty, dw.attprojw, dw.attprojb, a->dresidual, a->atty + l * BT * C, w.attprojw,
                                                a->dbias_scratch, bt, C, C, NULL, 0, 0, mm));
        op_begin(m, "attention_bwd", l);
        cudaCheck(cudaMemsetAsync(a->dqkv, 0, BT * 3 * C * sizeof(floatX), s));  // attention_backward accumulates
        if (m->use_flash) {
            attention_flash_backward(a->dqkv, a->attn_fscratch, a->datty, qkv, a->atty + l * BT * C,
                                     a->lse + l * (size_t)B * NH * T, B, T, C, NH, s);
        } else {
            attention_backward(a->dqkv, a->dqkvr, a->datt, a->attn_scratch, a->datty, a->qkvr + l * BT * 3 * C,
                               a->att + l * att, B, T, C, NH, m->cublas, s);
        }
        op_end(m);
        OP(m, "qkv_bwd", l, matmul_backward(a->dln, dw.qkvw, dw.qkvb, a->dqkv, ln1, w.qkvw, a->dbias_scratch, bt, C, 3 * C, NULL, 0, 0, mm));
        OP(m, "ln1_bwd", l, layernorm_backward(a->dresidual, dw.ln1w, dw.ln1b, a->ln_scratch, a->dln, residual, w.ln1w, ln1_mean,
                                               ln1_rstd, B, T, C, s));
        params_release(m->zero, 1 + l);
        grads_reduce(m->zero, 1 + l);  // its reduction overlaps the backward of the blocks below
        NVTX_POP();
    }

    // the encoder's backward needs the token ids, not the parameters: no fetch
    OP(m, "encoder_bwd", -1, encoder_backward(demb.wte, demb.wpe, a->enc_scratch, a->dresidual, inputs, B, T, C, s));
    grads_reduce(m->zero, 0);
    NVTX_POP();
}

static void gpt2_free(GPT2* m) {
    void** bufs = (void**)&m->acts;
    for (size_t i = 0; i < sizeof(DevActs) / sizeof(void*); i++) { cudaCheck(cudaFree(bufs[i])); }
    zero_free(&m->zero);
    cudaCheck(cudaFreeHost(m->host_losses));
    for (int k = 0; k < 2; k++) {
        cudaCheck(cudaFreeHost(m->host_batch[k]));
        cudaCheck(cudaEventDestroy(m->slot_free[k]));
    }
    cudaCheck(cudaFreeHost(m->host_logits));
    free(m->host_logits_f);
    cublaslt_free(&m->mm);
    cublasCheck(cublasDestroy(m->cublas));
    op_timer_free(&m->ops);
    cudaCheck(cudaStreamDestroy(m->stream));
}

// -r -1: the least recompute whose activations fit the GPU's memory free now that every
// rank's engine is built, less a margin, shared among the ranks on this GPU (the host
// backend's); every rank takes the most any needs, so that all run the same kernels
static int gpt2_recompute_pick(const GPT2Config* c, const TrainConfig* tc, int use_flash, int sharing) {
    const double GiB = 1073741824.0;
    size_t free_b = 0, total_b = 0;
    mpiCheck(MPI_Barrier(MPI_COMM_WORLD));  // (the other ranks' engines on this GPU counted)
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    double room = ((double)free_b - gpt2_recompute_reserve((double)total_b)) / sharing;
    int r = gpt2_recompute_auto(c, tc->B, tc->T, use_flash, tc->vocab_tile, sizeof(floatX), room);
    int mine = r, rank = 0;
    mpiCheck(MPI_Allreduce(&mine, &r, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    mpiCheck(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    if (rank == 0) {
        double need = gpt2_activations_total(c, tc->B, tc->T, r, use_flash, tc->vocab_tile, ACT_GPU, sizeof(floatX));
        printf("recompute: -r %d (-r -1: %s; activations %.2f GiB, room %.2f GiB: the %.2f GiB of %.2f free once the engine is "
               "built, less %.2f kept back, shared by %d rank%s)\n", r, r > mine ? "another rank's GPU has less room" :
               need > room ? "not even -r 2's fit, its allocation will say" : "the least that fits", need / GiB, room / GiB,
               (double)free_b / GiB, (double)total_b / GiB, gpt2_recompute_reserve((double)total_b) / GiB, sharing,
               sharing > 1 ? "s" : "");
    }
    return r;
}

// The run's model after trainer_model: the run set up (trainer_setup), the model built over
// its engine (the device engine's, or the host engine's staged) and its activations allocated,
// at -r -1 the recompute they fit at (sharing: the ranks on this GPU).
static void gpt2_setup(Trainer* t, GPT2* model, int device_engine, int use_flash, int sharing) {
    const TrainConfig* tc = &t->tc;
    trainer_setup(t);
    ZeroModel spec;
    gpt2_engine_model(&t->config, &spec);
    ZeroInit in = trainer_engine(t, &spec);
    gpt2_build(model, &t->config, in, device_engine);
    gpt2_engine_model_free(&spec);
    model->gelu_fusion = tc->gelu_fusion;
    if (tc->matmul_tune > 1) {  // the first step's new shapes time their candidates (llmc/matmul.cuh)
        g_device_alloc_bytes += cublaslt_tune(&model->mm, tc->matmul_tune);
    }
    if (tc->recompute < 0) { t->tc.recompute = gpt2_recompute_pick(&t->config, tc, use_flash, sharing); }
    gpt2_alloc_activations(model, tc->B, tc->T, tc->recompute, use_flash, tc->vocab_tile);
}

// ----------------------------------------------------------------------------
// the batch on the device

// n tokens (and targets, unless NULL) for the next forward. Two slots alternate: the
// work issued so far read the current one, so the next is filled, through its pinned
// host staging, once the work that last used it (one batch earlier) is done: the host
// rarely waits, and never for the batch the GPU is working on.
static void batch_to_device(GPT2* m, const int* inputs, const int* targets, size_t n) {
    cudaCheck(cudaEventRecord(m->slot_free[m->slot], m->stream));  // the end of the current slot's use
    m->slot ^= 1;
    zeroCheck(zero_gpu_wait(NULL, m->slot_free[m->slot], "waiting for a batch slot"));  // its staging and device buffers are free
    int* h = m->host_batch[m->slot];
    memcpy(h, inputs, n * sizeof(int));
    if (targets != NULL) { memcpy(h + n, targets, n * sizeof(int)); }
    m->cur_inputs = m->slot == 0 ? m->acts.inputs : m->acts.inputs_alt;
    m->cur_targets = m->slot == 0 ? m->acts.targets : m->acts.targets_alt;
    cudaCheck(cudaMemcpyAsync(m->cur_inputs, h, n * sizeof(int), cudaMemcpyHostToDevice, m->stream));
    if (targets != NULL) { cudaCheck(cudaMemcpyAsync(m->cur_targets, h + n, n * sizeof(int), cudaMemcpyHostToDevice, m->stream)); }
}

// ----------------------------------------------------------------------------
// the model's part of the run (llmc/trainer.h runs the loop)

static void train_micro(void* self, const int* inputs, const int* targets, int last_micro, int grad_accum) {
    GPT2* m = (GPT2*)self;
    size_t BT = (size_t)m->B * m->T;
    // every micro-step, also when overfitting one batch: validation and sampling use the
    // same device buffers
    batch_to_device(m, inputs, targets, BT);
    zeroCheck(zero_begin(m->zero, ZERO_PASS_TRAIN, last_micro));
    float dloss = 1.0f / ((float)BT * grad_accum);  // the mean over positions and micro-steps
    gpt2_forward(m, m->cur_inputs, m->cur_targets, m->B, m->T, dloss);
    gpt2_backward(m, m->cur_inputs, m->cur_targets, m->B, m->T, dloss);
    zeroCheck(zero_end(m->zero));
}

// --matmul-tune, after the first step (every rank): rank 0's choices become every rank's, so
// that all run the same kernels (their timings differ a little), and the tuning ends: a
// shape first met later takes the heuristic's first answer, and the scratch is freed
static void matmul_tune_share(GPT2* m) {
    int rank = 0;
    mpiCheck(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    size_t bytes = matmul_algo_table_bytes();
    void* table = mallocCheck(bytes);
    if (rank == 0) { memcpy(table, matmul_algo_table(), bytes); }
    mpiCheck(MPI_Bcast(table, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD));
    int differed = rank == 0 ? 0 : matmul_algo_adopt(table);
    free(table);
    mpiCheck(MPI_Reduce(rank == 0 ? MPI_IN_PLACE : &differed, &differed, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD));
    if (rank == 0) {
        printf("matmul tuning: %ld shapes timed, up to %d candidates each (%.0f ms); the heuristic's first answer was not the fastest in %ld; "
               "every rank takes rank 0's choices (%d of the other ranks' differed)\n", matmul_tuned_keys, m->mm.tune,
               matmul_tune_ms, matmul_tune_changed, differed);
    }
    g_device_alloc_bytes -= MATMUL_TUNE_SCRATCH_BYTES - cublaslt_tune(&m->mm, 0);  // tuning off: mm.tune 0
}

// the micro-steps' mean losses, summed on the GPU; waits for the step
static double train_loss(void* self) {
    GPT2* m = (GPT2*)self;
    double sum = 0.0;
    // the step first, watched (zero3/nccl_watch.cuh): a copy into pageable memory waits for it unwatched
    zeroCheck(zero_gpu_wait(m->stream, NULL, "waiting for the step"));
    cudaCheck(cudaMemcpyAsync(&sum, m->acts.loss_acc, sizeof(double), cudaMemcpyDeviceToHost, m->stream));
    cudaCheck(cudaMemsetAsync(m->acts.loss_acc, 0, sizeof(double), m->stream));
    cudaCheck(cudaStreamSynchronize(m->stream));
    cudaCheck(cudaGetLastError());
    if (m->mm.tune > 1) { matmul_tune_share(m); }  // (--matmul-tune: on until the first step's end)
    return sum;
}

// the forward's losses, copied to host_losses by gpt2_forward (dloss 0: no training)
static const float* eval_losses(void* self, const int* inputs, const int* targets) {
    GPT2* m = (GPT2*)self;
    batch_to_device(m, inputs, targets, (size_t)m->B * m->T);
    zeroCheck(zero_begin(m->zero, ZERO_PASS_FORWARD, 1));
    gpt2_forward(m, m->cur_inputs, m->cur_targets, m->B, m->T, 0.0f);
    zeroCheck(zero_end(m->zero));
    return m->host_losses;
}

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

// the last position's logits row to the host as floats (untiled: row t-1 of every
// position's, tiled: the only row), and its softmax over the real V
static const float* eval_next_probs(void* self, const int* tokens, int t) {
    GPT2* m = (GPT2*)self;
    int Vp = m->config.padded_vocab_size, V = m->config.vocab_size;
    batch_to_device(m, tokens, NULL, (size_t)t);
    zeroCheck(zero_begin(m->zero, ZERO_PASS_FORWARD, 1));
    gpt2_forward(m, m->cur_inputs, NULL, 1, t, 0.0f);
    zeroCheck(zero_end(m->zero));
    size_t row = m->vocab_tile == 0 ? (size_t)(t - 1) : 0;
    cudaCheck(cudaMemcpyAsync(m->host_logits, m->acts.logits + row * Vp, Vp * sizeof(floatX),
                              cudaMemcpyDeviceToHost, m->stream));
    zeroCheck(zero_gpu_wait(m->stream, NULL, "waiting for the logits"));
    float* x = m->host_logits_f;
    float maxv = -INFINITY;
    for (int i = 0; i < V; i++) {
        x[i] = floatx_to_float_host(m->host_logits[i]);
        maxv = x[i] > maxv ? x[i] : maxv;
    }
    double sum = 0.0;
    for (int i = 0; i < V; i++) { sum += exp((double)x[i] - maxv); }
    for (int i = 0; i < V; i++) { x[i] = (float)(exp((double)x[i] - maxv) / sum); }
    return x;
}

// device memory in use now (cudaMemGetInfo: the CUDA context and cuBLAS's own count), and
// the most seen
static double device_in_use(void* self) {
    GPT2* m = (GPT2*)self;
    size_t free_b = 0, total_b = 0;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    double in_use = (double)(total_b - free_b);
    if (in_use > m->peak_in_use) { m->peak_in_use = in_use; }
    return in_use;
}

// the activations and the kernels' scratch; the cuBLASLt workspace as a buffer; what this
// program and its engine allocated on the GPU, and the peak in use
static void memory_figures(void* self, const ZeroStats* zs, double* out) {
    GPT2* m = (GPT2*)self;
    device_in_use(m);
    out[MEM_BUFFERS] += (double)m->mm.workspace_bytes;
    out[MEM_ACTIVATIONS] = (double)m->bytes_acts;
    out[MEM_ALLOCATED] = (double)g_device_alloc_bytes + zs->mem_peak;
    out[MEM_PEAK] = m->peak_in_use;
}

// --profile-ops (TrainerModel's hooks): the step's ops timed by events on the stream
static double profile_begin(void* self, OpProfile* p) { return op_timer_step_begin(&((GPT2*)self)->ops, p); }
static void profile_end(void* self) { op_timer_step_end(&((GPT2*)self)->ops); }
static void trainer_op_begin(void* self, const char* name, int layer) { op_begin((GPT2*)self, name, layer); }
static void trainer_op_end(void* self) { op_end((GPT2*)self); }

static void range_push(const char* name) { NVTX_PUSH(name); }
static void range_pop(void) { NVTX_POP(); }

// peak dense bf16 tensor FLOP/s by device name; 0 when unknown
// the device's memory rate from its attributes: the memory clock (kHz) times the bus width,
// twice a clock (DDR), bytes/s; 0 when the driver does not say
static double peak_memory_bytes(int device) {
    int khz = 0, bits = 0;
    if (cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&bits, cudaDevAttrGlobalMemoryBusWidth, device) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0.0;
    }
    return 2.0 * khz * 1e3 * bits / 8.0;
}

static double peak_bf16_flops(const char* name) {
    if (strstr(name, "H200") != NULL) { return 989e12; }
    if (strstr(name, "H100") != NULL) {
        if (strstr(name, "PCIe") != NULL) { return 756e12; }
        if (strstr(name, "HBM3") != NULL || strstr(name, "SXM") != NULL) { return 989e12; }
        return 0.0;  // NVL and other variants: not in the table
    }
    if (strstr(name, "A100") != NULL) { return 312e12; }
    return 0.0;
}

// ----------------------------------------------------------------------------

int main(int argc, char** argv) {
    Trainer t;
    trainer_start(&t, &argc, &argv, "train_gpt2_zero3", MATMUL_GELU_EPILOGUE);  // llm.c's -ge: the forward's GELU fused or not
    const TrainConfig* tc = &t.tc;
    int rank = t.rank;
    if (tc->estimate != NULL) {  // the model's shape is all it needs: no GPU
        trainer_model(&t);
        return trainer_estimate(&t, sizeof(floatX), -1.0);
    }
    if (tc->zero.bf16 == 0 && sizeof(floatX) == 2 && rank == 0) {
        fprintf(stderr, "warning: bf16.enabled false is ignored: this build computes in bf16 (train_gpt2_zero3_fp32 computes in fp32)\n");
    }

    // The GPU of this rank: the local rank's among those it sees (round-robin when the
    // ranks on a node outnumber them; the host backend lets 2-4 ranks test the engine on
    // one GPU). A launcher may also give each rank its own single visible GPU.
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        fprintf(stderr, "error: rank %d: no CUDA device found\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Comm local;
    int local_rank = 0;
    mpiCheck(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local));
    mpiCheck(MPI_Comm_rank(local, &local_rank));
    int device = local_rank % ndev;
    cudaCheck(cudaSetDevice(device));
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, device));
    // do two ranks of this node drive the same GPU? (its UUID, not the device index: with
    // one visible GPU per rank every rank's index is 0)
    char* uuids = (char*)mallocCheck((size_t)t.local_size * sizeof(prop.uuid));
    mpiCheck(MPI_Allgather(&prop.uuid, (int)sizeof(prop.uuid), MPI_BYTE, uuids, (int)sizeof(prop.uuid), MPI_BYTE, local));
    int gpus_ok = 1, sharing = 1;  // sharing: the ranks on this GPU, this one among them
    for (int r = 0; r < t.local_size; r++) {
        if (r != local_rank && memcmp(uuids + (size_t)r * sizeof(prop.uuid), &prop.uuid, sizeof(prop.uuid)) == 0) {
            gpus_ok = 0;
            sharing++;
        }
    }
    free(uuids);
    MPI_Comm_free(&local);
    omp_set_num_threads(t.threads);  // the CPU Adam's (offload)

    // Where the model states live. The device engine: every stage, optimizer offload to
    // the CPU (stages 1-3) or NVMe (stage 3), parameter offload to the CPU or NVMe (stage
    // 3, with the optimizer's, no hpZ), one GPU per rank (NCCL). The host-staged engine:
    // ranks sharing a GPU, and what the device engine refuses. auto takes the device
    // engine where it can.
    const ZeroConfig* zc = &tc->zero;
    int device_ok = !(zc->offload_optimizer != ZERO_OFFLOAD_NONE && zc->stage == 0) &&
                    !(zc->offload_param != ZERO_OFFLOAD_NONE && (zc->offload_optimizer == ZERO_OFFLOAD_NONE || zc->hpz_partition_size > 1)) &&
                    !(zc->offload_param == ZERO_OFFLOAD_NVME && tc->dpu);
    mpiCheck(MPI_Allreduce(MPI_IN_PLACE, &gpus_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));  // every node
    int device_engine = !strcmp(tc->zero_backend, "device") || (!strcmp(tc->zero_backend, "auto") && device_ok && gpus_ok);
    if (device_engine && !device_ok) {
        char msg[512];
        snprintf(msg, sizeof(msg), "--zero-backend device offloads the optimizer at stages 1-3, and the parameters at stage 3 "
                 "with the optimizer's and without hpZ, --dpu not with the parameters on NVMe (got -z %d, offload optimizer %s, param %s, dpu %d): "
                 "use --zero-backend host (or auto)", zc->stage, zero_offload_name(zc->offload_optimizer),
                 zero_offload_name(zc->offload_param), tc->dpu);
        die_all(rank, msg);
    }
    if (device_engine && !gpus_ok) {
        char msg[512];
        snprintf(msg, sizeof(msg), "--zero-backend device needs one GPU per rank (NCCL), but ranks share a GPU "
                 "(%d ranks on a node that shows them %d): use --zero-backend host (or auto) to share GPUs", t.local_size, ndev);
        die_all(rank, msg);
    }
    if (tc->zero.comm_dtype == ZERO_COMM_BF16 && (sizeof(floatX) == 4 || !device_engine) && rank == 0) {
        fprintf(stderr, "warning: communication data type bf16 has no effect: %s\n", sizeof(floatX) == 4 ?
                "this build's gradients are fp32, reduced in fp32" : "the host backend reduces the gradients in fp32 on the host");
    }
    if (!device_engine && tc->dpu) {
        die_all(rank, "--dpu runs on the device backend (--offload-optimizer cpu, one GPU per rank)");
    }
    int use_flash = !strcmp(tc->attention, "flash");

    // the model: a file, or a descriptor with random init from --seed
    trainer_model(&t);
    const GPT2Config* c = &t.config;
    if ((c->padded_vocab_size * sizeof(floatX)) % 16 != 0) {
        char msg[256];
        snprintf(msg, sizeof(msg), "padded vocabulary %d: the GPU trainer needs a multiple of %zu", c->padded_vocab_size, 16 / sizeof(floatX));
        die_all(rank, msg);
    }
    if (tc->vocab_tile % (16 / (int)sizeof(floatX)) != 0) {
        char msg[256];
        snprintf(msg, sizeof(msg), "--vocab-tile %d: the GPU trainer needs a multiple of %zu (16-byte rows for cuBLASLt "
                 "and the classifier kernels)", tc->vocab_tile, 16 / sizeof(floatX));
        die_all(rank, msg);
    }
    if (use_flash && !attention_use_flash(tc->T, c->channels / c->num_heads)) {
        char msg[256];
        snprintf(msg, sizeof(msg), "--attention flash: head size %d is not one the kernels are built for (" ATTENTION_FLASH_HEAD_SIZES ")",
                 c->channels / c->num_heads);
        die_all(rank, msg);
    }
    GPT2 model;
    gpt2_setup(&t, &model, device_engine, use_flash, sharing);

    char notes[128];
    snprintf(notes, sizeof(notes), ", attention %s, vocab tile %d, %d GPUs per node, matmul tune %d", use_flash ? "flash" : "cublas",
             model.vocab_tile, ndev, tc->matmul_tune > 1 ? tc->matmul_tune : 0);
    TrainerModel run = {
        .self = &model, .zero = model.zero, .device = prop.name, .precision = PRECISION_MODE, .notes = notes, .peak_flops = peak_bf16_flops(prop.name),
        .train_micro = train_micro, .train_loss = train_loss, .eval_losses = eval_losses, .next_probs = eval_next_probs,
        .memory = memory_figures, .device_in_use = device_in_use, .range_push = range_push, .range_pop = range_pop,
        .profile_begin = profile_begin, .profile_end = profile_end, .op_begin = trainer_op_begin, .op_end = trainer_op_end,
        .peak_bytes = peak_memory_bytes(device),
    };
    trainer_run(&t, &run);
    gpt2_free(&model);
    trainer_finish(&t);
    return 0;
}
