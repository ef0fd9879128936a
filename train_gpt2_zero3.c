/*
 train_gpt2_zero3_cpu: the fp32 CPU GPT-2/GPT-3 trainer. It is the reference that the
 GPU trainer is measured against, and it trains for real on machines without a GPU.
 Data parallel over MPI through the ZeRO engine (zero3/): stages 0-3 partition the
 optimizer state, the gradients and the parameters over the ranks, with optimizer
 and parameter offload to the host or NVMe.

 The forward and backward reach parameters and gradients one *layer unit* at a time
 (see llmc/gpt2.h for the units) through params_fetch / params_release / grads_unit /
 grads_reduce: the places where the engine gathers, releases and reduces, in the order
 registered by gpt2_schedule.
*/
#include <stdio.h>       // printf, FILE
#include <stdlib.h>      // exit, calloc
#include <string.h>      // memset, memcpy
#include <math.h>        // sqrt, logf
#include <unistd.h>      // sysconf: cores per node
#include <omp.h>         // omp_set_num_threads
#include <cblas.h>       // openblas_set_num_threads
#include <mpi.h>         // data parallelism: all-reduce of gradients and losses
#include <cjson/cJSON.h> // the --report JSON

#include "llmc/utils.h"       // checked wrappers, llmc_error
#include "llmc/rand.h"        // Rng for sampling
#include "llmc/args.h"        // TrainConfig, args_parse
#include "llmc/gpt2.h"        // GPT2Config, units, model files, init
#include "llmc/encoder.h"     // encoder_forward/backward: wte + wpe
#include "llmc/layernorm.h"   // layernorm_forward/backward
#include "llmc/matmul.h"      // matmul_forward/backward through sgemm
#include "llmc/attention.h"   // causal multi-head attention
#include "llmc/gelu.h"        // GELU, tanh form
#include "llmc/residual.h"    // residual_forward
#include "llmc/classifier.h"  // softmax, cross-entropy and their backward
#include "llmc/adamw.h"       // adamw_update, grad_norm_squared
#include "llmc/schedulers.h"  // learning-rate schedules
#include "llmc/dataloader.h"  // llm.c token shards
#include "llmc/tokenizer.h"   // decoding samples
#include "zero3/engine.h"     // ZeRO: fetch, release, reduce, step over MPI
#include "llmc/trainer.h"     // start-up, model, batch, output dir, loaders, tokenizer, main.log, checkpoints

// ----------------------------------------------------------------------------
// activations

typedef struct {
    float* encoded;    // (B, T, C)
    float* ln1;        // (L, B, T, C), or one layer's (B, T, C) when recomputed
    float* ln1_mean;   // (L, B, T)
    float* ln1_rstd;   // (L, B, T)
    float* qkv;        // (L, B, T, 3C)
    float* atty;       // (L, B, T, C)
    float* att;        // (L, B, NH, T, T)
    float* attproj;    // (B, T, C) scratch: consumed by the residual at once
    float* residual2;  // (L, B, T, C)
    float* ln2;        // (L, B, T, C), or (B, T, C) when recomputed
    float* ln2_mean;   // (L, B, T)
    float* ln2_rstd;   // (L, B, T)
    float* fch;        // (L, B, T, 4C)
    float* fch_gelu;   // (L, B, T, 4C), or (B, T, 4C) when recomputed
    float* fcproj;     // (B, T, C) scratch
    float* residual3;  // (L, B, T, C)
    float* lnf;        // (B, T, C)
    float* lnf_mean;   // (B, T)
    float* lnf_rstd;   // (B, T)
    float* logits;     // (B, T, Vp)
    float* probs;      // (B, T, Vp)
    float* losses;     // (B, T)
    // backward scratch, one layer at a time
    float* preatt;     // (B, NH, T, T) forward scratch, not needed by the backward
    float* dresidual;  // (B, T, C) gradient of the residual stream
    float* dln;        // (B, T, C)
    float* datty;      // (B, T, C)
    float* dqkv;       // (B, T, 3C)
    float* dfch;       // (B, T, 4C)
    float* dfch_gelu;  // (B, T, 4C)
    float* dpreatt;    // (B, NH, T, T)
    float* datt;       // (B, NH, T, T)
    float* dlogits;    // (B, T, Vp)
    float* dlosses;    // (B, T)
} Activations;

typedef struct {
    GPT2Config config;
    size_t num_params;
    ZeroEngine zero;      // parameters, gradients and AdamW state, partitioned by ZeRO stage
    Activations acts;
    size_t acts_bytes;
    int B, T;             // the batch shape the activations were allocated for
    int recompute;
    float mean_loss;      // mean loss of the last forward with targets, this rank
} GPT2;

static inline float* params_fetch(GPT2* m, int u) {
    float* p = NULL;
    zeroCheck(zero_fetch(&m->zero, u, &p));
    return p;
}
static inline void params_release(GPT2* m, int u) { zeroCheck(zero_release(&m->zero, u)); }
static inline float* grads_unit(GPT2* m, int u) {
    float* g = NULL;
    zeroCheck(zero_grad(&m->zero, u, &g));
    return g;
}
static inline void grads_reduce(GPT2* m, int u) { zeroCheck(zero_reduce(&m->zero, u)); }

// builds the model over `comm` with ZeRO configuration zc; params (unit order) are
// used on rank 0 and broadcast to the others
static int gpt2_build(GPT2* m, const GPT2Config* c, const float* params, const ZeroConfig* zc,
                      MPI_Comm comm, float beta1, float beta2, float eps) {
    m->config = *c;
    m->num_params = gpt2_num_params(c);
    int rc = gpt2_engine_init(&m->zero, c, params, zc, comm, beta1, beta2, eps);
    memset(&m->acts, 0, sizeof(m->acts));
    m->B = m->T = 0;
    return rc;
}

// allocates activations for batches of up to B x T; recompute 1 keeps one layer of
// GELU outputs, recompute 2 also one layer of layernorm outputs
static void gpt2_alloc_activations(GPT2* m, int B, int T, int recompute) {
    size_t L = m->config.num_layers, NH = m->config.num_heads, C = m->config.channels;
    size_t Vp = m->config.padded_vocab_size;
    size_t BT = (size_t)B * T, att = (size_t)B * NH * T * T;
    size_t keep_gelu = recompute >= 1 ? 1 : L, keep_ln = recompute >= 2 ? 1 : L;
    struct { float** ptr; size_t n; } bufs[] = {
        {&m->acts.encoded, BT * C},           {&m->acts.ln1, keep_ln * BT * C},
        {&m->acts.ln1_mean, L * BT},          {&m->acts.ln1_rstd, L * BT},
        {&m->acts.qkv, L * BT * 3 * C},       {&m->acts.atty, L * BT * C},
        {&m->acts.att, L * att},              {&m->acts.attproj, BT * C},
        {&m->acts.residual2, L * BT * C},     {&m->acts.ln2, keep_ln * BT * C},
        {&m->acts.ln2_mean, L * BT},          {&m->acts.ln2_rstd, L * BT},
        {&m->acts.fch, L * BT * 4 * C},       {&m->acts.fch_gelu, keep_gelu * BT * 4 * C},
        {&m->acts.fcproj, BT * C},            {&m->acts.residual3, L * BT * C},
        {&m->acts.lnf, BT * C},               {&m->acts.lnf_mean, BT},
        {&m->acts.lnf_rstd, BT},              {&m->acts.logits, BT * Vp},
        {&m->acts.probs, BT * Vp},            {&m->acts.losses, BT},
        {&m->acts.preatt, att},               {&m->acts.dresidual, BT * C},
        {&m->acts.dln, BT * C},               {&m->acts.datty, BT * C},
        {&m->acts.dqkv, BT * 3 * C},          {&m->acts.dfch, BT * 4 * C},
        {&m->acts.dfch_gelu, BT * 4 * C},     {&m->acts.dpreatt, att},
        {&m->acts.datt, att},                 {&m->acts.dlogits, BT * Vp},
        {&m->acts.dlosses, BT},
    };
    m->acts_bytes = 0;
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) {
        *bufs[i].ptr = (float*)calloc(bufs[i].n, sizeof(float));
        if (*bufs[i].ptr == NULL) {
            fprintf(stderr, "error: out of memory for activations (B=%d, T=%d): try a smaller -b or -t, or -r 2\n", B, T);
            exit(EXIT_FAILURE);
        }
        m->acts_bytes += bufs[i].n * sizeof(float);
    }
    m->B = B;
    m->T = T;
    m->recompute = recompute;
}

// ----------------------------------------------------------------------------
// forward: inputs and targets (B, T); targets may be NULL (no loss). Any B <= m->B
// and T <= m->T: the layer strides follow the call's B and T. pass is ZERO_PASS_TRAIN
// when gpt2_backward follows (the engine keeps to the training schedule), else
// ZERO_PASS_FORWARD (validation, sampling).
static void gpt2_forward(GPT2* m, const int* inputs, const int* targets, int B, int T, int pass) {
    const GPT2Config* c = &m->config;
    int L = c->num_layers, NH = c->num_heads, C = c->channels, V = c->vocab_size, Vp = c->padded_vocab_size;
    size_t BT = (size_t)B * T, att = (size_t)B * NH * T * T;
    Activations* a = &m->acts;

    zeroCheck(zero_begin(&m->zero, pass));
    EmbedTensors emb = gpt2_embed_tensors(c, params_fetch(m, 0));
    encoder_forward(a->encoded, inputs, emb.wte, emb.wpe, B, T, C);  // (B, T, C)
    params_release(m, 0);

    for (int l = 0; l < L; l++) {
        BlockTensors w = gpt2_block_tensors(c, params_fetch(m, 1 + l));
        float* residual = l == 0 ? a->encoded : a->residual3 + (l - 1) * BT * C;  // (B, T, C)
        float* ln1 = a->ln1 + (m->recompute >= 2 ? 0 : l * BT * C);
        float* ln2 = a->ln2 + (m->recompute >= 2 ? 0 : l * BT * C);
        float* fch_gelu = a->fch_gelu + (m->recompute >= 1 ? 0 : l * BT * 4 * C);
        float* qkv = a->qkv + l * BT * 3 * C;
        float* atty = a->atty + l * BT * C;
        float* residual2 = a->residual2 + l * BT * C;
        float* fch = a->fch + l * BT * 4 * C;

        layernorm_forward(ln1, a->ln1_mean + l * BT, a->ln1_rstd + l * BT, residual, w.ln1w, w.ln1b, B, T, C);
        matmul_forward(qkv, ln1, w.qkvw, w.qkvb, B, T, C, 3 * C);                         // (B, T, 3C)
        attention_forward(atty, a->preatt, a->att + l * att, qkv, B, T, C, NH);            // (B, T, C)
        matmul_forward(a->attproj, atty, w.attprojw, w.attprojb, B, T, C, C);              // (B, T, C)
        residual_forward(residual2, residual, a->attproj, BT * C);
        layernorm_forward(ln2, a->ln2_mean + l * BT, a->ln2_rstd + l * BT, residual2, w.ln2w, w.ln2b, B, T, C);
        matmul_forward(fch, ln2, w.fcw, w.fcb, B, T, C, 4 * C);                           // (B, T, 4C)
        gelu_forward(fch_gelu, fch, BT * 4 * C);
        matmul_forward(a->fcproj, fch_gelu, w.fcprojw, w.fcprojb, B, T, 4 * C, C);        // (B, T, C)
        residual_forward(a->residual3 + l * BT * C, residual2, a->fcproj, BT * C);
        params_release(m, 1 + l);
    }

    FinalTensors fin = gpt2_final_tensors(c, params_fetch(m, L + 1));
    float* residual = a->residual3 + (L - 1) * BT * C;
    layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, residual, fin.lnfw, fin.lnfb, B, T, C);
    params_release(m, L + 1);
    // the classifier is tied to the token embedding: logits = lnf @ wte^T
    emb = gpt2_embed_tensors(c, params_fetch(m, 0));
    matmul_forward(a->logits, a->lnf, emb.wte, NULL, B, T, C, Vp);                         // (B, T, Vp)
    params_release(m, 0);
    softmax_forward(a->probs, a->logits, B, T, V, Vp);
    if (pass == ZERO_PASS_FORWARD) { zeroCheck(zero_end(&m->zero)); }

    if (targets != NULL) {
        crossentropy_forward(a->losses, a->probs, targets, B, T, Vp);
        double sum = 0.0;
        for (size_t i = 0; i < BT; i++) { sum += a->losses[i]; }
        m->mean_loss = (float)(sum / BT);
    }
}

// backward of the last forward (a ZERO_PASS_TRAIN one); accumulates the gradient of
// loss_scale * mean loss, so micro-steps of gradient accumulation pass 1/steps.
// last_micro: this micro-step ends the accumulation (stages 0-1 reduce only then).
static void gpt2_backward(GPT2* m, const int* inputs, const int* targets, int B, int T, float loss_scale, int last_micro) {
    const GPT2Config* c = &m->config;
    int L = c->num_layers, NH = c->num_heads, C = c->channels, V = c->vocab_size, Vp = c->padded_vocab_size;
    size_t BT = (size_t)B * T, att = (size_t)B * NH * T * T;
    Activations* a = &m->acts;

    // the mean over B*T positions: each loss gets an equal share
    for (size_t i = 0; i < BT; i++) { a->dlosses[i] = loss_scale / (float)BT; }
    memset(a->dlogits, 0, BT * Vp * sizeof(float));
    crossentropy_softmax_backward(a->dlogits, a->dlosses, a->probs, targets, B, T, V, Vp);

    m->zero.last_micro = last_micro;
    // classifier: dlnf = dlogits @ wte, dwte += dlogits^T @ lnf
    EmbedTensors emb = gpt2_embed_tensors(c, params_fetch(m, 0));
    EmbedTensors demb = gpt2_embed_tensors(c, grads_unit(m, 0));  // live until the encoder's backward
    memset(a->dln, 0, BT * C * sizeof(float));
    matmul_backward(a->dln, demb.wte, NULL, a->dlogits, a->lnf, emb.wte, B, T, C, Vp);
    params_release(m, 0);

    FinalTensors fin = gpt2_final_tensors(c, params_fetch(m, L + 1));
    FinalTensors dfin = gpt2_final_tensors(c, grads_unit(m, L + 1));
    memset(a->dresidual, 0, BT * C * sizeof(float));
    layernorm_backward(a->dresidual, dfin.lnfw, dfin.lnfb, a->dln, a->residual3 + (L - 1) * BT * C,
                       fin.lnfw, a->lnf_mean, a->lnf_rstd, B, T, C);
    params_release(m, L + 1);
    grads_reduce(m, L + 1);

    // dresidual carries the gradient of the residual stream down through the blocks:
    // residual3 = residual2 + fcproj and residual2 = residual + attproj pass it through
    // unchanged, and each layernorm backward adds its branch into it.
    for (int l = L - 1; l >= 0; l--) {
        BlockTensors w = gpt2_block_tensors(c, params_fetch(m, 1 + l));
        BlockTensors dw = gpt2_block_tensors(c, grads_unit(m, 1 + l));
        float* residual = l == 0 ? a->encoded : a->residual3 + (l - 1) * BT * C;
        float* residual2 = a->residual2 + l * BT * C;
        float* ln1 = a->ln1 + (m->recompute >= 2 ? 0 : l * BT * C);
        float* ln2 = a->ln2 + (m->recompute >= 2 ? 0 : l * BT * C);
        float* fch_gelu = a->fch_gelu + (m->recompute >= 1 ? 0 : l * BT * 4 * C);
        float* fch = a->fch + l * BT * 4 * C;
        float* qkv = a->qkv + l * BT * 3 * C;
        float* ln1_mean = a->ln1_mean + l * BT, *ln1_rstd = a->ln1_rstd + l * BT;
        float* ln2_mean = a->ln2_mean + l * BT, *ln2_rstd = a->ln2_rstd + l * BT;
        if (m->recompute >= 1) { gelu_forward(fch_gelu, fch, BT * 4 * C); }
        if (m->recompute >= 2) {
            layernorm_forward(ln1, ln1_mean, ln1_rstd, residual, w.ln1w, w.ln1b, B, T, C);
            layernorm_forward(ln2, ln2_mean, ln2_rstd, residual2, w.ln2w, w.ln2b, B, T, C);
        }

        // MLP: fcproj(gelu(fc(ln2(residual2))))
        memset(a->dfch_gelu, 0, BT * 4 * C * sizeof(float));
        matmul_backward(a->dfch_gelu, dw.fcprojw, dw.fcprojb, a->dresidual, fch_gelu, w.fcprojw, B, T, 4 * C, C);
        memset(a->dfch, 0, BT * 4 * C * sizeof(float));
        gelu_backward(a->dfch, fch, a->dfch_gelu, BT * 4 * C);
        memset(a->dln, 0, BT * C * sizeof(float));
        matmul_backward(a->dln, dw.fcw, dw.fcb, a->dfch, ln2, w.fcw, B, T, C, 4 * C);
        layernorm_backward(a->dresidual, dw.ln2w, dw.ln2b, a->dln, residual2, w.ln2w, ln2_mean, ln2_rstd, B, T, C);

        // attention: attproj(attention(qkv(ln1(residual))))
        memset(a->datty, 0, BT * C * sizeof(float));
        matmul_backward(a->datty, dw.attprojw, dw.attprojb, a->dresidual, a->atty + l * BT * C, w.attprojw, B, T, C, C);
        memset(a->dqkv, 0, BT * 3 * C * sizeof(float));
        attention_backward(a->dqkv, a->dpreatt, a->datt, a->datty, qkv, a->att + l * att, B, T, C, NH);
        memset(a->dln, 0, BT * C * sizeof(float));
        matmul_backward(a->dln, dw.qkvw, dw.qkvb, a->dqkv, ln1, w.qkvw, B, T, C, 3 * C);
        layernorm_backward(a->dresidual, dw.ln1w, dw.ln1b, a->dln, residual, w.ln1w, ln1_mean, ln1_rstd, B, T, C);
        params_release(m, 1 + l);
        grads_reduce(m, 1 + l);  // its reduction overlaps the backward of the blocks below
    }

    encoder_backward(demb.wte, demb.wpe, a->dresidual, inputs, B, T, C);
    grads_reduce(m, 0);
    zeroCheck(zero_end(&m->zero));
}

static void gpt2_free(GPT2* m) {
    float** bufs = (float**)&m->acts;
    for (size_t i = 0; i < sizeof(Activations) / sizeof(float*); i++) { free(bufs[i]); }
    zero_engine_free(&m->zero);
}

#ifndef TESTING
// ----------------------------------------------------------------------------
// the model's part of validation and sampling (llmc/trainer.h runs the loops)

static float eval_loss(void* model, const int* inputs, const int* targets) {
    GPT2* m = (GPT2*)model;
    gpt2_forward(m, inputs, targets, m->B, m->T, ZERO_PASS_FORWARD);
    return m->mean_loss;
}

static const float* eval_next_probs(void* model, const int* tokens, int t) {
    GPT2* m = (GPT2*)model;
    gpt2_forward(m, tokens, NULL, 1, t, ZERO_PASS_FORWARD);
    return m->acts.probs + (size_t)(t - 1) * m->config.padded_vocab_size;
}

// ----------------------------------------------------------------------------
// the --report JSON

// this rank's memory figures in MEM_* order (peaks over the run so far)
static void memory_figures(const GPT2* m, double* out) {
    const ZeroMemory* zm = &m->zero.mem;
    out[MEM_PARAMS] = zm->peak[ZERO_MEM_PARAMS];
    out[MEM_GRADS] = zm->peak[ZERO_MEM_GRADS];
    out[MEM_OPTIMIZER] = zm->peak[ZERO_MEM_OPTIMIZER];
    out[MEM_BUFFERS] = zm->peak[ZERO_MEM_BUFFERS];
    out[MEM_ACTIVATIONS] = (double)m->acts_bytes;
    out[MEM_PEAK] = zm->total_peak + m->acts_bytes;
    out[MEM_ALLOCATED] = out[MEM_PEAK];  // everything is the program's own allocations
    out[MEM_HOST_PARAMS] = zm->peak[ZERO_MEM_HOST_PARAMS];
    out[MEM_HOST_GRADS] = zm->peak[ZERO_MEM_HOST_GRADS];
    out[MEM_HOST_OPTIMIZER] = zm->peak[ZERO_MEM_HOST_OPTIMIZER];
    out[MEM_HOST_BUFFERS] = zm->peak[ZERO_MEM_HOST_BUFFERS];
    out[MEM_NVME] = zm->nvme_bytes;
}

static void report_write(const char* path, const TrainConfig* tc, const GPT2* m, int world, int grad_accum,
                         const StepRecord* steps, int nsteps, const ValRecord* vals, int nvals,
                         const double* mem /* (world, MEM_FIELDS) */, const double* comm_per_step /* (4) */,
                         const double* moved_per_step /* (ZERO_NUM_MOVES) */, double update_ms_per_step) {
    cJSON* root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "world_size", world);
    cJSON_AddNumberToObject(root, "zero_stage", m->zero.stage);
    cJSON_AddNumberToObject(root, "num_parameters", (double)m->num_params);
    cJSON_AddNumberToObject(root, "num_parameters_padded", (double)m->zero.plan.padded_total);
    cJSON* cfg = report_add_run(root, tc, &m->config, grad_accum, steps, nsteps, vals, nvals);
    char zdesc[512];
    zero_config_describe(&m->zero.cfg, zdesc, sizeof(zdesc));
    cJSON_AddStringToObject(cfg, "zero", zdesc);
    // params, grads and optimizer: the engine's persistent model states (peak bytes);
    // buffers: its working set (gathered units, unit gradients, receive buffers) at its
    // peak; activations: the trainer's; peak: the engine's peak total plus activations
    report_add_memory(root, mem, world);
    report_add_traffic(root, comm_per_step, moved_per_step, update_ms_per_step);
    report_save(root, path);
}

// ----------------------------------------------------------------------------

// --estimate NODES:GPUS: DeepSpeed-style model-state memory table, then exit
static int estimate_print(const TrainConfig* tc, const GPT2Config* c) {
    int nodes = 0, gpus = 0;
    char tail;
    if (sscanf(tc->estimate, "%d:%d%c", &nodes, &gpus, &tail) != 2 || nodes < 1 || gpus < 1) {
        return llmc_error("flag --estimate: '%s' should be NODES:GPUS_PER_NODE, for example 1:8", tc->estimate);
    }
    double largest = 0;
    for (int u = 0; u < gpt2_num_units(c); u++) {
        double n = (double)gpt2_unit_size(c, u);
        if (n > largest) { largest = n; }
    }
    zero_estimate_print(stdout, tc->model, (double)gpt2_num_params(c), largest, nodes, gpus);
    return 0;
}

int main(int argc, char** argv) {
    TrainConfig tc;
    int rank, world;
    trainer_start(&argc, &argv, &tc, &rank, &world);
    if (!strcmp(tc.zero_backend, "device")) { die_all(rank, "--zero-backend device is the GPU trainer's; the CPU trainer keeps everything on the host"); }
    if (tc.dpu) { die_all(rank, "--dpu overlaps the CPU Adam with the GPU's next step: the GPU trainer's (train_gpt2_zero3)"); }
    if (tc.zero.bf16 == 1 && rank == 0) {
        fprintf(stderr, "warning: bf16.enabled is ignored: the CPU trainer computes in fp32\n");
    }

    // threads: split the node's cores among the ranks on it unless the user chose
    MPI_Comm local;
    int local_size = 1;
    mpiCheck(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local));
    mpiCheck(MPI_Comm_size(local, &local_size));
    MPI_Comm_free(&local);
    if (getenv("OMP_NUM_THREADS") == NULL) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        int threads = (int)(cores / local_size) > 0 ? (int)(cores / local_size) : 1;
        omp_set_num_threads(threads);
        openblas_set_num_threads(threads);
    } else {
        openblas_set_num_threads(omp_get_max_threads());
    }

    // the model: a file, or a descriptor with random init from --seed (not for --estimate,
    // which needs only the shape)
    GPT2Config config;
    float* params = NULL;
    trainer_model(&tc, rank, tc.estimate == NULL, &config, &params);
    if (tc.estimate != NULL) {
        if (rank == 0 && estimate_print(&tc, &config) != 0) { fprintf(stderr, "error: %s\n", llmc_errmsg()); MPI_Abort(MPI_COMM_WORLD, 1); }
        MPI_Finalize();
        return 0;
    }

    long tokens_per_micro = (long)tc.B * tc.T * world;
    long total_batch = trainer_total_batch(&tc, rank, world);
    int grad_accum = (int)(total_batch / tokens_per_micro);
    check_ranks_agree(&tc, &config, total_batch, rank, world);

    trainer_output_dir(&tc, rank);

    GPT2 model;
    if (gpt2_build(&model, &config, params, &tc.zero, MPI_COMM_WORLD, tc.beta1, tc.beta2, tc.eps) != 0) {
        fprintf(stderr, "error: rank %d: %s\n", rank, llmc_errmsg());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    free(params);

    DataLoader train_loader, val_loader;
    int val_steps, max_steps;
    trainer_loaders(&tc, rank, world, grad_accum, &train_loader, &val_loader, &val_steps, &max_steps);
    int use_val = tc.val_every > 0;

    Tokenizer tokenizer;
    int start_token;
    int have_tokenizer = trainer_tokenizer(&tc, rank, config.vocab_size, &tokenizer, &start_token);
    gpt2_alloc_activations(&model, tc.B, tc.T, tc.recompute);

    LRScheduler sched = {0};
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
            checkpoint_load_zero(tc.output_dir, latest, &model.zero, model.num_params, rank, world, &sample_rng.state, &ls, &tc, grad_accum);
            if (dataloader_set_state(&train_loader, &ls) != 0) { fprintf(stderr, "error: rank %d: %s\n", rank, llmc_errmsg()); MPI_Abort(MPI_COMM_WORLD, 1); }
            start_step = latest;
            if (rank == 0) { printf("resumed from %s at step %d\n", tc.output_dir, latest); }
        }
    }

    if (rank == 0) {
        char zdesc[512];
        zero_config_describe(&tc.zero, zdesc, sizeof(zdesc));
        trainer_print_header(&tc, &config, model.num_params, world, grad_accum, total_batch, max_steps, zdesc);
        printf("+-----------------------+\n");
    }
    double* mem_all = (double*)mallocCheck(MEM_FIELDS * world * sizeof(double));
    {   // one memory line per rank, in rank order
        double mine[MEM_FIELDS];
        memory_figures(&model, mine);
        memory_gather(mine, mem_all, rank, world, 1, "");
    }

    StepRecord* steps = (StepRecord*)mallocCheck((max_steps + 1) * sizeof(StepRecord));
    ValRecord* vals = (ValRecord*)mallocCheck((max_steps + 2) * sizeof(ValRecord));
    int nsteps = 0, nvals = 0;
    int have_batch = 0;
    double comm_bytes0[ZERO_NUM_COLLECTIVES], moved0[ZERO_NUM_MOVES];
    memcpy(comm_bytes0, model.zero.comm.bytes, sizeof(comm_bytes0));
    memcpy(moved0, model.zero.moved, sizeof(moved0));
    double update_ms0 = model.zero.update_ms;
    double wait_total = 0.0;

    for (int step = start_step; step <= max_steps; step++) {
        int last_step = step == max_steps;

        trainer_validate(&tc, step, last_step, rank, world, &val_loader, val_steps, eval_loss, &model, vals, &nvals);
        trainer_sample(&tc, step, last_step, rank, config.vocab_size, start_token, have_tokenizer ? &tokenizer : NULL,
                       &sample_rng, eval_next_probs, &model);

        if (tc.checkpoint_every > 0 && step > start_step && (step % tc.checkpoint_every == 0 || last_step)) {
            checkpoint_save_zero(tc.output_dir, step, &model.zero, &model.config, model.num_params, rank, world, sample_rng.state, &train_loader, &tc, grad_accum);
            if (rank == 0) { printf("saved checkpoint at step %d in %s\n", step, tc.output_dir); }
        }
        if (last_step) { break; }

        double t0 = now_ms(), wait0 = model.zero.comm.wait_ms;
        double loss_sum = 0.0;
        for (int micro = 0; micro < grad_accum; micro++) {
            if (!tc.overfit_single_batch || !have_batch) {
                llmcCheck(dataloader_next_batch(&train_loader));
                have_batch = 1;
            }
            gpt2_forward(&model, train_loader.inputs, train_loader.targets, tc.B, tc.T, ZERO_PASS_TRAIN);
            gpt2_backward(&model, train_loader.inputs, train_loader.targets, tc.B, tc.T, 1.0f / grad_accum, micro == grad_accum - 1);
            loss_sum += model.mean_loss;
        }
        float lr = lr_scheduler_get(&sched, step);
        float norm = 0.0f;
        zeroCheck(zero_step(&model.zero, lr, tc.weight_decay, tc.grad_clip, step + 1, &norm));
        float loss = allreduce_mean((float)(loss_sum / grad_accum), world);
        double ms = now_ms() - t0;
        double wait = model.zero.comm.wait_ms - wait0;
        wait_total += wait;
        double tps = total_batch / (ms / 1e3);
        if (rank == 0) {
            printf("step %4d/%d | loss %.6f | lr %.2e | norm %.4f | %.1f ms | %.0f tok/s | comm wait %.1f ms\n",
                   step + 1, max_steps, loss, lr, norm, ms, tps, wait);
        }
        log_line(tc.output_dir, rank, "s:%d trl:%f\n", step, loss);
        steps[nsteps++] = (StepRecord){step, loss, ms, tps, lr, norm, wait, -1.0};
    }

    // report: memory peaks over the whole run (gathered again: the working set grows
    // during the steps), and the training steps' communication per step
    {
        double mine[MEM_FIELDS];
        memory_figures(&model, mine);
        memory_gather(mine, mem_all, rank, world, 0, "");
    }
    if (rank == 0 && tc.report != NULL) {
        // per training step, averaged; the traffic of validation, sampling and
        // checkpoints between steps is included (run with -v 0 -s 0 -n 0 to leave it out)
        double per_step[4] = {0, 0, 0, 0};
        int n = nsteps > 0 ? nsteps : 1;
        per_step[0] = (model.zero.comm.bytes[ZERO_ALLGATHER] - comm_bytes0[ZERO_ALLGATHER]) / n;
        per_step[1] = (model.zero.comm.bytes[ZERO_REDUCE_SCATTER] - comm_bytes0[ZERO_REDUCE_SCATTER]) / n;
        per_step[2] = (model.zero.comm.bytes[ZERO_ALLREDUCE] - comm_bytes0[ZERO_ALLREDUCE]) / n;
        per_step[3] = wait_total / n;
        double moved[ZERO_NUM_MOVES];
        for (int k = 0; k < ZERO_NUM_MOVES; k++) { moved[k] = (model.zero.moved[k] - moved0[k]) / n; }
        report_write(tc.report, &tc, &model, world, grad_accum, steps, nsteps, vals, nvals, mem_all, per_step, moved,
                     (model.zero.update_ms - update_ms0) / n);
    }

    free(steps); free(vals); free(mem_all);
    if (have_tokenizer) { tokenizer_free(&tokenizer); }
    dataloader_free(&train_loader);
    if (use_val) { dataloader_free(&val_loader); }
    gpt2_free(&model);
    MPI_Finalize();
    return 0;
}
#endif // TESTING
