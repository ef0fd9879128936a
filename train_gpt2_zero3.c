/*
 train_gpt2_zero3_cpu: the fp32 CPU GPT-2/GPT-3 trainer. It is the reference that the
 GPU trainer is measured against, and it trains for real on machines without a GPU.
 Data parallel over MPI through the ZeRO engine (zero3/host.h): stages 0-3 partition the
 optimizer state, the gradients and the parameters over the ranks, with optimizer
 and parameter offload to the host or NVMe.

 The forward and backward reach parameters and gradients one *layer unit* at a time
 (see llmc/gpt2.h for the units) through four hooks, params_fetch / params_release /
 grads_unit / grads_reduce (llmc/trainer.h): the places where the engine gathers,
 releases and reduces, in the order of gpt2_schedule. A training micro-step is one engine
 pass (zero_begin ... zero_end) around the forward and the backward. The run itself
 (flags, data, the step loop, checkpoints, the report) is llmc/trainer.h's.
*/
#include <stdio.h>       // printf
#include <stdlib.h>      // calloc, free
#include <string.h>      // memset, strcmp
#include <omp.h>         // omp_set_num_threads
#include <cblas.h>       // openblas_set_num_threads

#include "llmc/utils.h"       // checked wrappers, llmc_error
#include "llmc/gpt2.h"        // GPT2Config, units, model files, init
#include "llmc/encoder.h"     // encoder_forward/backward: wte + wpe
#include "llmc/layernorm.h"   // layernorm_forward/backward
#include "llmc/matmul.h"      // matmul_forward/backward through sgemm
#include "llmc/blas.h"        // blas_select_kernels: OpenBLAS's kernels for this CPU
#include "llmc/attention.h"   // causal multi-head attention
#include "llmc/gelu.h"        // GELU, tanh form
#include "llmc/residual.h"    // residual_forward
#include "llmc/classifier.h"  // softmax, cross-entropy and their backward
#include "llmc/activations.h" // the activations' table (both trainers'): which, their sizes
#include "llmc/trainer.h"     // the run: start-up, data, the step loop, checkpoints, the report; the unit hooks
#include "zero3/host.h"       // the host engine: fetch, release, reduce, step over MPI
#include "llmc/trainer_proc.h" // params_fetch, grads_unit, grads_reduce, zeroCheck, die_all: the unit hooks
#include "zero3/util.h"        // zero_errmsg, zero_now_ms: the op timer's clock

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
    float* logits;     // (B, T, Vp), or one vocabulary tile's (B, T, Vt) with --vocab-tile
    float* probs;      // (B, T, Vp), or tiled (B, Vp): each sequence's last position (sampling)
    float* cls_max;    // (B, T) tiled: each row's running max of the logits (online softmax)
    float* cls_sum;    // (B, T) tiled: each row's running sum of exp(logit - max)
    float* cls_target; // (B, T) tiled: each row's logit of its target
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
    float* dlogits;    // (B, T, Vp); tiled: none (each tile's gradient replaces its logits)
    float* dlosses;    // (B, T)
} Activations;

typedef struct {
    GPT2Config config;
    size_t num_params;
    Zero* zero;           // parameters, gradients and AdamW state, partitioned by ZeRO stage (the host engine)
    Activations acts;
    size_t acts_bytes;
    int B, T;             // the batch shape the activations were allocated for
    int recompute;
    int vocab_tile;       // the classifier's tile of vocabulary columns, <= Vp; 0: untiled
    float mean_loss;      // mean loss of the last forward with targets, this rank
    double loss_sum;      // the training micro-steps' mean losses since train_loss read them
    // --profile-ops: the step being timed (NULL: off), its start and the open op, on the
    // host's clock (the CPU's ops are synchronous: the clock is their time)
    OpProfile* prof;
    double prof_t0, op_t0;
    const char* op_name;
    int op_layer;
} GPT2;

// the op timer (llmc/profile.h's OP): an op's span from its start to its end
static void op_begin(GPT2* m, const char* name, int layer) {
    if (m->prof == NULL) { return; }
    m->op_name = name;
    m->op_layer = layer;
    m->op_t0 = zero_now_ms();
}
static void op_end(GPT2* m) {
    if (m->prof == NULL) { return; }
    op_profile_span(m->prof, m->op_name, m->op_layer, OP_TRACK_COMPUTE, m->op_t0 - m->prof_t0, zero_now_ms() - m->prof_t0);
}

// builds the model and its host engine (in: trainer_engine's, for this model)
static int gpt2_build(GPT2* m, const GPT2Config* c, const ZeroInit* in) {
    memset(m, 0, sizeof(*m));
    m->config = *c;
    m->num_params = gpt2_num_params(c);
    return zero_host_create(&m->zero, in);
}

// the activations' bytes at B x T (what gpt2_alloc_activations allocates: llmc/activations.h's table)
static double gpt2_activation_bytes(const GPT2Config* c, int B, int T, int recompute, int vocab_tile) {
    return gpt2_activations_total(c, B, T, recompute, 0, vocab_tile, ACT_CPU, sizeof(float));
}

// allocates the activations for batches of up to B x T: llmc/activations.h's rows that
// are the CPU's, in its order, which is Activations'. recompute 1 keeps one layer of
// GELU outputs, recompute 2 also one layer of layernorm outputs; vocab_tile > 0 computes
// the classifier in tiles of that many vocabulary columns (at most Vp: one tile).
static void gpt2_alloc_activations(GPT2* m, int B, int T, int recompute, int vocab_tile) {
    size_t bytes[ACT_COUNT];
    gpt2_activations(&m->config, B, T, recompute, 0, vocab_tile, ACT_CPU, sizeof(float), bytes);
    float** slots = (float**)&m->acts;
    size_t k = act_rows(ACT_CPU), nslots = sizeof(Activations) / sizeof(float*);
    if (k != nslots) {
        fprintf(stderr, "error: llmc/activations.h has %zu rows for the CPU trainer, Activations %zu buffers\n", k, nslots);
        exit(EXIT_FAILURE);
    }
    k = 0;
    m->acts_bytes = 0;
    for (int i = 0; i < ACT_COUNT; i++) {
        if (!(act_trainer[i] & ACT_CPU)) { continue; }
        slots[k] = (float*)calloc(bytes[i] / sizeof(float), sizeof(float));
        if (slots[k] == NULL && bytes[i] > 0) {
            fprintf(stderr, "error: out of memory for activations (B=%d, T=%d): try a smaller -b or -t, or -r 2\n", B, T);
            exit(EXIT_FAILURE);
        }
        m->acts_bytes += bytes[i];
        k++;
    }
    m->B = B;
    m->T = T;
    m->recompute = recompute;
    int Vp = m->config.padded_vocab_size;
    m->vocab_tile = vocab_tile <= 0 ? 0 : vocab_tile < Vp ? vocab_tile : Vp;  // the table's Vt
}

// ----------------------------------------------------------------------------
// forward: inputs and targets (B, T); targets may be NULL (no loss). Any B <= m->B
// and T <= m->T: the layer strides follow the call's B and T. Inside an engine pass: a
// training one when gpt2_backward follows, else a forward one (validation, sampling).
static void gpt2_forward(GPT2* m, const int* inputs, const int* targets, int B, int T) {
    const GPT2Config* c = &m->config;
    int L = c->num_layers, NH = c->num_heads, C = c->channels, V = c->vocab_size, Vp = c->padded_vocab_size;
    size_t BT = (size_t)B * T, att = (size_t)B * NH * T * T;
    Activations* a = &m->acts;

    EmbedTensors emb = gpt2_embed_tensors(c, params_fetch(m->zero, 0));
    OP(m, "encoder", -1, encoder_forward(a->encoded, inputs, emb.wte, emb.wpe, B, T, C));  // (B, T, C)
    params_release(m->zero, 0);

    for (int l = 0; l < L; l++) {
        BlockTensors w = gpt2_block_tensors(c, params_fetch(m->zero, 1 + l));
        float* residual = l == 0 ? a->encoded : a->residual3 + (l - 1) * BT * C;  // (B, T, C)
        float* ln1 = a->ln1 + (m->recompute >= 2 ? 0 : l * BT * C);
        float* ln2 = a->ln2 + (m->recompute >= 2 ? 0 : l * BT * C);
        float* fch_gelu = a->fch_gelu + (m->recompute >= 1 ? 0 : l * BT * 4 * C);
        float* qkv = a->qkv + l * BT * 3 * C;
        float* atty = a->atty + l * BT * C;
        float* residual2 = a->residual2 + l * BT * C;
        float* fch = a->fch + l * BT * 4 * C;

        OP(m, "ln1", l, layernorm_forward(ln1, a->ln1_mean + l * BT, a->ln1_rstd + l * BT, residual, w.ln1w, w.ln1b, B, T, C));
        OP(m, "qkv", l, matmul_forward(qkv, ln1, w.qkvw, w.qkvb, B, T, C, 3 * C));                   // (B, T, 3C)
        OP(m, "attention", l, attention_forward(atty, a->preatt, a->att + l * att, qkv, B, T, C, NH)); // (B, T, C)
        OP(m, "attproj", l, matmul_forward(a->attproj, atty, w.attprojw, w.attprojb, B, T, C, C));    // (B, T, C)
        OP(m, "residual", l, residual_forward(residual2, residual, a->attproj, BT * C));
        OP(m, "ln2", l, layernorm_forward(ln2, a->ln2_mean + l * BT, a->ln2_rstd + l * BT, residual2, w.ln2w, w.ln2b, B, T, C));
        OP(m, "fc", l, matmul_forward(fch, ln2, w.fcw, w.fcb, B, T, C, 4 * C));                      // (B, T, 4C)
        OP(m, "gelu", l, gelu_forward(fch_gelu, fch, BT * 4 * C));
        OP(m, "fcproj", l, matmul_forward(a->fcproj, fch_gelu, w.fcprojw, w.fcprojb, B, T, 4 * C, C)); // (B, T, C)
        OP(m, "residual", l, residual_forward(a->residual3 + l * BT * C, residual2, a->fcproj, BT * C));
        params_release(m->zero, 1 + l);
    }

    FinalTensors fin = gpt2_final_tensors(c, params_fetch(m->zero, L + 1));
    float* residual = a->residual3 + (L - 1) * BT * C;
    OP(m, "lnf", -1, layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, residual, fin.lnfw, fin.lnfb, B, T, C));
    params_release(m->zero, L + 1);
    // the classifier is tied to the token embedding: logits = lnf @ wte^T
    emb = gpt2_embed_tensors(c, params_fetch(m->zero, 0));
    op_begin(m, "classifier", -1);  // (the products, the softmax and the losses)
    int Vt = m->vocab_tile;
    if (Vt == 0) {
        matmul_forward(a->logits, a->lnf, emb.wte, NULL, B, T, C, Vp);                     // (B, T, Vp)
    } else if (targets != NULL) {
        // one tile of columns [v0, v0 + w) at a time, folded into each row's online softmax
        // (classifier.h); the last tile's logits stay for the backward
        for (int v0 = 0; v0 < Vp; v0 += Vt) {
            int w = Vp - v0 < Vt ? Vp - v0 : Vt;
            matmul_forward(a->logits, a->lnf, emb.wte + (size_t)v0 * C, NULL, B, T, C, w);  // (B, T, w)
            classifier_tile_stats(a->cls_max, a->cls_sum, a->cls_target, a->logits, targets, B, T, v0, w, V);
        }
    } else {
        // no targets (sampling): the logits of each sequence's last position, (B, Vp)
        for (int b = 0; b < B; b++) {
            matmul_forward(a->probs + (size_t)b * Vp, a->lnf + ((size_t)b * T + T - 1) * C, emb.wte, NULL, 1, 1, C, Vp);
        }
    }
    params_release(m->zero, 0);
    if (Vt == 0) {
        softmax_forward(a->probs, a->logits, B, T, V, Vp);
    } else if (targets == NULL) {
        softmax_forward(a->probs, a->probs, 1, B, V, Vp);  // in place: each element is read before it is written
    }

    if (targets != NULL) {
        if (Vt == 0) {
            crossentropy_forward(a->losses, a->probs, targets, B, T, Vp);
        } else {
            classifier_tile_losses(a->losses, a->cls_max, a->cls_sum, a->cls_target, B, T);
        }
        double sum = 0.0;
        for (size_t i = 0; i < BT; i++) { sum += a->losses[i]; }
        m->mean_loss = (float)(sum / BT);
    }
    op_end(m);
}

// backward of the last forward, in the same training pass; accumulates the gradient of
// loss_scale * mean loss, so micro-steps of gradient accumulation pass 1/steps.
static void gpt2_backward(GPT2* m, const int* inputs, const int* targets, int B, int T, float loss_scale) {
    const GPT2Config* c = &m->config;
    int L = c->num_layers, NH = c->num_heads, C = c->channels, V = c->vocab_size, Vp = c->padded_vocab_size;
    size_t BT = (size_t)B * T, att = (size_t)B * NH * T * T;
    Activations* a = &m->acts;

    // the mean over B*T positions: each loss gets an equal share
    op_begin(m, "classifier_bwd", -1);  // (the losses' and the softmax's backward, the products)
    for (size_t i = 0; i < BT; i++) { a->dlosses[i] = loss_scale / (float)BT; }
    int Vt = m->vocab_tile;
    if (Vt == 0) {
        memset(a->dlogits, 0, BT * Vp * sizeof(float));
        crossentropy_softmax_backward(a->dlogits, a->dlosses, a->probs, targets, B, T, V, Vp);
    }

    // classifier: dlnf = dlogits @ wte, dwte += dlogits^T @ lnf
    EmbedTensors emb = gpt2_embed_tensors(c, params_fetch(m->zero, 0));
    EmbedTensors demb = gpt2_embed_tensors(c, grads_unit(m->zero, 0));  // live until the encoder's backward
    memset(a->dln, 0, BT * C * sizeof(float));
    if (Vt == 0) {
        matmul_backward(a->dln, demb.wte, NULL, a->dlogits, a->lnf, emb.wte, B, T, C, Vp);
    } else {
        // tile by tile from the last, whose logits the forward left: the others' again
        int last = (Vp - 1) / Vt * Vt;
        for (int v0 = last; v0 >= 0; v0 -= Vt) {
            int w = Vp - v0 < Vt ? Vp - v0 : Vt;
            if (v0 != last) { matmul_forward(a->logits, a->lnf, emb.wte + (size_t)v0 * C, NULL, B, T, C, w); }  // (B, T, w)
            classifier_tile_backward(a->logits, a->dlosses, a->cls_max, a->cls_sum, targets, B, T, v0, w, V);
            matmul_backward(a->dln, demb.wte + (size_t)v0 * C, NULL, a->logits, a->lnf, emb.wte + (size_t)v0 * C, B, T, C, w);
        }
    }
    op_end(m);
    params_release(m->zero, 0);

    FinalTensors fin = gpt2_final_tensors(c, params_fetch(m->zero, L + 1));
    FinalTensors dfin = gpt2_final_tensors(c, grads_unit(m->zero, L + 1));
    memset(a->dresidual, 0, BT * C * sizeof(float));
    OP(m, "lnf_bwd", -1, layernorm_backward(a->dresidual, dfin.lnfw, dfin.lnfb, a->dln, a->residual3 + (L - 1) * BT * C,
                                            fin.lnfw, a->lnf_mean, a->lnf_rstd, B, T, C));
    params_release(m->zero, L + 1);
    grads_reduce(m->zero, L + 1);

    // dresidual carries the gradient of the residual stream down through the blocks:
    // residual3 = residual2 + fcproj and residual2 = residual + attproj pass it through
    // unchanged, and each layernorm backward adds its branch into it.
    for (int l = L - 1; l >= 0; l--) {
        BlockTensors w = gpt2_block_tensors(c, params_fetch(m->zero, 1 + l));
        BlockTensors dw = gpt2_block_tensors(c, grads_unit(m->zero, 1 + l));
        float* residual = l == 0 ? a->encoded : a->residual3 + (l - 1) * BT * C;
        float* residual2 = a->residual2 + l * BT * C;
        float* ln1 = a->ln1 + (m->recompute >= 2 ? 0 : l * BT * C);
        float* ln2 = a->ln2 + (m->recompute >= 2 ? 0 : l * BT * C);
        float* fch_gelu = a->fch_gelu + (m->recompute >= 1 ? 0 : l * BT * 4 * C);
        float* fch = a->fch + l * BT * 4 * C;
        float* qkv = a->qkv + l * BT * 3 * C;
        float* ln1_mean = a->ln1_mean + l * BT, *ln1_rstd = a->ln1_rstd + l * BT;
        float* ln2_mean = a->ln2_mean + l * BT, *ln2_rstd = a->ln2_rstd + l * BT;
        if (m->recompute >= 1) { OP(m, "gelu_recompute", l, gelu_forward(fch_gelu, fch, BT * 4 * C)); }
        if (m->recompute >= 2) {
            op_begin(m, "ln_recompute", l);
            layernorm_forward(ln1, ln1_mean, ln1_rstd, residual, w.ln1w, w.ln1b, B, T, C);
            layernorm_forward(ln2, ln2_mean, ln2_rstd, residual2, w.ln2w, w.ln2b, B, T, C);
            op_end(m);
        }

        // MLP: fcproj(gelu(fc(ln2(residual2))))
        memset(a->dfch_gelu, 0, BT * 4 * C * sizeof(float));
        OP(m, "fcproj_bwd", l, matmul_backward(a->dfch_gelu, dw.fcprojw, dw.fcprojb, a->dresidual, fch_gelu, w.fcprojw, B, T, 4 * C, C));
        memset(a->dfch, 0, BT * 4 * C * sizeof(float));
        OP(m, "gelu_bwd", l, gelu_backward(a->dfch, fch, a->dfch_gelu, BT * 4 * C));
        memset(a->dln, 0, BT * C * sizeof(float));
        OP(m, "fc_bwd", l, matmul_backward(a->dln, dw.fcw, dw.fcb, a->dfch, ln2, w.fcw, B, T, C, 4 * C));
        OP(m, "ln2_bwd", l, layernorm_backward(a->dresidual, dw.ln2w, dw.ln2b, a->dln, residual2, w.ln2w, ln2_mean, ln2_rstd, B, T, C));

        // attention: attproj(attention(qkv(ln1(residual))))
        memset(a->datty, 0, BT * C * sizeof(float));
        OP(m, "attproj_bwd", l, matmul_backward(a->datty, dw.attprojw, dw.attprojb, a->dresidual, a->atty + l * BT * C, w.attprojw,
                                                B, T, C, C));
        memset(a->dqkv, 0, BT * 3 * C * sizeof(float));
        OP(m, "attention_bwd", l, attention_backward(a->dqkv, a->dpreatt, a->datt, a->datty, qkv, a->att + l * att, B, T, C, NH));
        memset(a->dln, 0, BT * C * sizeof(float));
        OP(m, "qkv_bwd", l, matmul_backward(a->dln, dw.qkvw, dw.qkvb, a->dqkv, ln1, w.qkvw, B, T, C, 3 * C));
        OP(m, "ln1_bwd", l, layernorm_backward(a->dresidual, dw.ln1w, dw.ln1b, a->dln, residual, w.ln1w, ln1_mean, ln1_rstd, B, T, C));
        params_release(m->zero, 1 + l);
        grads_reduce(m->zero, 1 + l);  // its reduction overlaps the backward of the blocks below
    }

    OP(m, "encoder_bwd", -1, encoder_backward(demb.wte, demb.wpe, a->dresidual, inputs, B, T, C));
    grads_reduce(m->zero, 0);
}

static void gpt2_free(GPT2* m) {
    float** bufs = (float**)&m->acts;
    for (size_t i = 0; i < sizeof(Activations) / sizeof(float*); i++) { free(bufs[i]); }
    zero_free(&m->zero);
}

// The run's model after trainer_model: the run set up (trainer_setup), the model built over
// its engine and its activations allocated. main's, and the tests' that include this file.
static void gpt2_setup(Trainer* t, GPT2* model) {
    const TrainConfig* tc = &t->tc;
    trainer_setup(t);
    ZeroModel spec;
    gpt2_engine_model(&t->config, &spec);
    ZeroInit in = trainer_engine(t, &spec);
    if (gpt2_build(model, &t->config, &in) != 0) {
        fprintf(stderr, "error: rank %d: %s\n", t->rank, zero_errmsg());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    gpt2_engine_model_free(&spec);
    gpt2_alloc_activations(model, tc->B, tc->T, tc->recompute, tc->vocab_tile);
}

#ifndef TESTING
// ----------------------------------------------------------------------------
// the model's part of the run (llmc/trainer.h runs the loop)

static void train_micro(void* self, const int* inputs, const int* targets, int last_micro, int grad_accum) {
    GPT2* m = (GPT2*)self;
    zeroCheck(zero_begin(m->zero, ZERO_PASS_TRAIN, last_micro));
    gpt2_forward(m, inputs, targets, m->B, m->T);
    gpt2_backward(m, inputs, targets, m->B, m->T, 1.0f / grad_accum);
    zeroCheck(zero_end(m->zero));
    m->loss_sum += m->mean_loss;
}

static double train_loss(void* self) {
    GPT2* m = (GPT2*)self;
    double sum = m->loss_sum;
    m->loss_sum = 0.0;
    return sum;
}

static const float* eval_losses(void* self, const int* inputs, const int* targets) {
    GPT2* m = (GPT2*)self;
    zeroCheck(zero_begin(m->zero, ZERO_PASS_FORWARD, 1));
    gpt2_forward(m, inputs, targets, m->B, m->T);
    zeroCheck(zero_end(m->zero));
    return m->acts.losses;
}

static const float* eval_next_probs(void* self, const int* tokens, int t) {
    GPT2* m = (GPT2*)self;
    zeroCheck(zero_begin(m->zero, ZERO_PASS_FORWARD, 1));
    gpt2_forward(m, tokens, NULL, 1, t);
    zeroCheck(zero_end(m->zero));
    // untiled: every position's probabilities, tiled: the last position's only
    return m->acts.probs + (m->vocab_tile == 0 ? (size_t)(t - 1) * m->config.padded_vocab_size : 0);
}

// everything is this process's own host memory: what it allocated is its peak
static void memory_figures(void* self, const ZeroStats* zs, double* out) {
    GPT2* m = (GPT2*)self;
    out[MEM_ACTIVATIONS] = (double)m->acts_bytes;
    out[MEM_PEAK] = zs->mem_peak + (double)m->acts_bytes;
    out[MEM_ALLOCATED] = out[MEM_PEAK];
}

// --profile-ops (TrainerModel's hooks): the step's ops timed from now, on the host's clock
static double profile_begin(void* self, OpProfile* p) {
    GPT2* m = (GPT2*)self;
    m->prof = p;
    m->prof_t0 = zero_now_ms();
    return m->prof_t0;
}
static void profile_end(void* self) { ((GPT2*)self)->prof = NULL; }
static void trainer_op_begin(void* self, const char* name, int layer) { op_begin((GPT2*)self, name, layer); }
static void trainer_op_end(void* self) { op_end((GPT2*)self); }

int main(int argc, char** argv) {
    Trainer t;
    trainer_start(&t, &argc, &argv, "train_gpt2_zero3_cpu", 0);  // GELU apart from the matmul (llm.c's -ge 0)
    const TrainConfig* tc = &t.tc;
    if (!strcmp(tc->zero_backend, "device")) { die_all(t.rank, "--zero-backend device is the GPU trainer's; the CPU trainer keeps everything on the host"); }
    if (tc->dpu) { die_all(t.rank, "--dpu overlaps the CPU Adam with the GPU's next step: the GPU trainer's (train_gpt2_zero3)"); }
    if (tc->zero.bf16 == 1 && t.rank == 0) {
        fprintf(stderr, "warning: bf16.enabled is ignored: the CPU trainer computes in fp32\n");
    }
    if (tc->zero.comm_dtype == ZERO_COMM_BF16 && t.rank == 0) {
        fprintf(stderr, "warning: communication data type bf16 has no effect: the CPU trainer's gradients are fp32, reduced in fp32\n");
    }
    // OpenBLAS's sgemm runs on the OpenMP ops' threads (the Makefile links its OpenMP build),
    // with the kernels this CPU can run (llmc/blas.h): chosen before any product
    char blas_note[256];
    if (blas_select_kernels(blas_note, sizeof(blas_note)) && t.rank == 0) { fprintf(stderr, "note: %s\n", blas_note); }
    omp_set_num_threads(t.threads);
    openblas_set_num_threads(t.threads);

    // the model (--estimate needs only its shape: the memory of the GPU trainer in bf16, and
    // of this run on the host engine)
    trainer_model(&t);
    int recompute = tc->recompute < 0 ? 1 : tc->recompute;  // -r -1: llm.c's 1 here (--estimate says the GPU trainer's choice)
    if (tc->estimate != NULL) { return trainer_estimate(&t, 2, gpt2_activation_bytes(&t.config, tc->B, tc->T, recompute, tc->vocab_tile)); }
    t.tc.recompute = recompute;
    GPT2 model;
    gpt2_setup(&t, &model);

    char notes[96];
    const char* kernels = blas_kernels();
    snprintf(notes, sizeof(notes), ", vocab tile %d%s%s%s", model.vocab_tile, *kernels ? ", OpenBLAS " : "", kernels,
             *kernels ? " kernels" : "");
    TrainerModel run = {
        .self = &model, .zero = model.zero, .device = "cpu", .precision = "fp32", .notes = notes, .peak_flops = -1.0,
        .train_micro = train_micro, .train_loss = train_loss, .eval_losses = eval_losses, .next_probs = eval_next_probs,
        .memory = memory_figures, .device_in_use = NULL, .range_push = NULL, .range_pop = NULL,
        .profile_begin = profile_begin, .profile_end = profile_end, .op_begin = trainer_op_begin, .op_end = trainer_op_end,
        .peak_bytes = 0.0,
    };
    trainer_run(&t, &run);
    gpt2_free(&model);
    trainer_finish(&t);
    return 0;
}
#endif // TESTING
