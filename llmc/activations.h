/*
 The activations of both trainers: every buffer train_gpt2_zero3.c and train_gpt2_zero3.cu
 allocate for a batch of B x T, which trainer has it, and its size. One table for the
 allocation and for --estimate (the GPU's figure from either binary, which
 scripts/run_common.sh reads), so none of them can drift apart. Each trainer's struct of
 activations (Activations, DevActs) lists its buffers in the table's order. What is not
 here: the GPU kernels' scratch (layernorm and bias partial sums, the encoder's sort
 buffers and per-chunk sums: a few MiB) and cuBLASLt's workspace.

 Per layer (L of them) the forward keeps qkv, atty, residual2, residual3, fch, the
 layernorms' statistics, and with the cuBLAS attention (the CPU's too) its (B, NH, T, T)
 probabilities, on the GPU with the permuted q, k, v; with --attention flash a logsumexp
 per row instead. -r 1 recomputes the GELU (one layer's fch_gelu), -r 2 also the
 layernorms (one layer's ln1, ln2). The backward works one layer at a time. The
 classifier's logits are (B, T, Vp), or with --vocab-tile Vt one tile's (B, T, Vt) and
 three fp32 statistics per row; the GPU's tile holds at least (B, Vp) (sampling's last
 positions), the CPU keeps those in probs. The CPU's buffers are all fp32.
*/
#ifndef LLMC_ACTIVATIONS_H
#define LLMC_ACTIVATIONS_H

#include <stddef.h>      // size_t
#include "llmc/gpt2.h"   // GPT2Config

// the buffers, in the order of both trainers' structs (ACT_CPU, ACT_GPU: whose it is)
enum {
    ACT_ENCODED, ACT_LN1, ACT_LN1_MEAN, ACT_LN1_RSTD, ACT_QKV, ACT_QKVR, ACT_ATTY, ACT_ATT, ACT_ATTPROJ,
    ACT_RESIDUAL2, ACT_LN2, ACT_LN2_MEAN, ACT_LN2_RSTD, ACT_FCH, ACT_FCH_GELU, ACT_FCPROJ, ACT_RESIDUAL3,
    ACT_LNF, ACT_LNF_MEAN, ACT_LNF_RSTD, ACT_LOGITS, ACT_PROBS, ACT_CLS_MAX, ACT_CLS_SUM, ACT_CLS_TARGET,
    ACT_LOSSES, ACT_LOSS_ACC, ACT_PREATT, ACT_DRESIDUAL, ACT_DLN, ACT_DATTY, ACT_DQKV, ACT_DFCH, ACT_DFCH_GELU,
    ACT_DPREATT, ACT_DQKVR, ACT_DATT, ACT_ATTN_SCRATCH, ACT_LSE, ACT_ATTN_FSCRATCH, ACT_DLOGITS, ACT_DLOSSES,
    ACT_INPUTS, ACT_TARGETS, ACT_INPUTS_ALT, ACT_TARGETS_ALT,
    ACT_COUNT
};
enum { ACT_CPU = 1, ACT_GPU = 2, ACT_BOTH = 3 };

// whose each buffer is, in ACT_* order (a list, not designators: C++ includes this too)
#define B_ ACT_BOTH
static const unsigned char act_trainer[ACT_COUNT] = {
    B_, B_, B_, B_, B_, ACT_GPU, B_, B_, B_,                            // encoded .. attproj (qkvr)
    B_, B_, B_, B_, B_, B_, B_, B_,                                     // residual2 .. residual3
    B_, B_, B_, B_, ACT_CPU, B_, B_, B_,                                // lnf .. cls_target (probs)
    B_, ACT_GPU, ACT_CPU, B_, B_, B_, B_, B_, ACT_CPU,                  // losses .. dfch_gelu (loss_acc, preatt)
    ACT_CPU, ACT_GPU, B_, ACT_GPU, ACT_GPU, ACT_GPU, ACT_CPU, ACT_CPU,   // dpreatt .. dlosses
    ACT_GPU, ACT_GPU, ACT_GPU, ACT_GPU,                                 // inputs .. targets_alt
};
#undef B_

// the classifier's tile of vocabulary columns for --vocab-tile: at most Vp (one tile); 0: untiled
static int gpt2_vocab_tile(const GPT2Config* c, int vocab_tile) {
    return vocab_tile < c->padded_vocab_size ? vocab_tile : c->padded_vocab_size;
}

// bytes[ACT_COUNT]: each of `trainer`'s buffers' size (0 for the other's) for batches of up
// to B x T with -r recompute, the flash attention or cuBLAS's (the CPU's: flash 0),
// --vocab-tile, and x bytes per element of the compute type (2: bf16; the CPU's 4)
static void gpt2_activations(const GPT2Config* c, int B, int T, int recompute, int flash, int vocab_tile, int trainer,
                             size_t x, size_t* bytes) {
    size_t L = c->num_layers, NH = c->num_heads, C = c->channels, Vp = c->padded_vocab_size;
    size_t BT = (size_t)B * T, att = (size_t)B * NH * T * T, f = sizeof(float);
    size_t keep_gelu = recompute >= 1 ? 1 : L, keep_ln = recompute >= 2 ? 1 : L;
    size_t cub = flash ? 0 : 1, fl = flash ? 1 : 0;  // the cuBLAS attention's buffers, the flash kernel's
    size_t Vt = (size_t)(vocab_tile > 0 ? gpt2_vocab_tile(c, vocab_tile) : 0), tiled = Vt > 0 ? 1 : 0;
    size_t gpu_tile = BT * Vt > (size_t)B * Vp ? BT * Vt : (size_t)B * Vp;  // the GPU samples from the tile
    bytes[ACT_ENCODED] = BT * C * x;
    bytes[ACT_LN1] = keep_ln * BT * C * x;
    bytes[ACT_LN1_MEAN] = L * BT * f;
    bytes[ACT_LN1_RSTD] = L * BT * f;
    bytes[ACT_QKV] = L * BT * 3 * C * x;
    bytes[ACT_QKVR] = cub * L * BT * 3 * C * x;
    bytes[ACT_ATTY] = L * BT * C * x;
    bytes[ACT_ATT] = cub * L * att * x;
    bytes[ACT_ATTPROJ] = BT * C * x;
    bytes[ACT_RESIDUAL2] = L * BT * C * x;
    bytes[ACT_LN2] = keep_ln * BT * C * x;
    bytes[ACT_LN2_MEAN] = L * BT * f;
    bytes[ACT_LN2_RSTD] = L * BT * f;
    bytes[ACT_FCH] = L * BT * 4 * C * x;
    bytes[ACT_FCH_GELU] = keep_gelu * BT * 4 * C * x;
    bytes[ACT_FCPROJ] = BT * C * x;
    bytes[ACT_RESIDUAL3] = L * BT * C * x;
    bytes[ACT_LNF] = BT * C * x;
    bytes[ACT_LNF_MEAN] = BT * f;
    bytes[ACT_LNF_RSTD] = BT * f;
    bytes[ACT_LOGITS] = (tiled ? (trainer == ACT_GPU ? gpu_tile : BT * Vt) : BT * Vp) * x;
    bytes[ACT_PROBS] = (tiled ? (size_t)B : BT) * Vp * x;  // tiled: each sequence's last position (sampling)
    bytes[ACT_CLS_MAX] = tiled * BT * f;         // tiled: each row's running max, sum of exp(logit - max), target logit
    bytes[ACT_CLS_SUM] = tiled * BT * f;
    bytes[ACT_CLS_TARGET] = tiled * BT * f;
    bytes[ACT_LOSSES] = BT * f;
    bytes[ACT_LOSS_ACC] = sizeof(double);
    bytes[ACT_PREATT] = att * x;                 // the CPU's attention scores before the softmax
    bytes[ACT_DRESIDUAL] = BT * C * x;
    bytes[ACT_DLN] = BT * C * x;
    bytes[ACT_DATTY] = BT * C * x;
    bytes[ACT_DQKV] = BT * 3 * C * x;
    bytes[ACT_DFCH] = BT * 4 * C * x;
    bytes[ACT_DFCH_GELU] = BT * 4 * C * x;
    bytes[ACT_DPREATT] = att * x;
    bytes[ACT_DQKVR] = cub * BT * 3 * C * x;
    bytes[ACT_DATT] = cub * att * x;
    bytes[ACT_ATTN_SCRATCH] = cub * BT * C * x;  // the output's gradient split into heads
    bytes[ACT_LSE] = fl * L * B * NH * T * f;    // each query row's logsumexp, from the forward to the backward
    bytes[ACT_ATTN_FSCRATCH] = fl * B * NH * T * f;
    bytes[ACT_DLOGITS] = (1 - tiled) * BT * Vp * x;  // tiled: each tile's gradient replaces its logits
    bytes[ACT_DLOSSES] = BT * f;
    bytes[ACT_INPUTS] = BT * sizeof(int);        // the batch in two slots (see batch_to_device)
    bytes[ACT_TARGETS] = BT * sizeof(int);
    bytes[ACT_INPUTS_ALT] = BT * sizeof(int);
    bytes[ACT_TARGETS_ALT] = BT * sizeof(int);
    for (int i = 0; i < ACT_COUNT; i++) {
        if (!(act_trainer[i] & trainer)) { bytes[i] = 0; }
    }
}

// how many of the table's rows are the trainer's (ACT_CPU or ACT_GPU): the number of
// buffers its activations struct must have, which each trainer checks at allocation
static inline size_t act_rows(int trainer) {
    size_t k = 0;
    for (int i = 0; i < ACT_COUNT; i++) { k += (act_trainer[i] & trainer) != 0; }
    return k;
}

// their total in bytes
static double gpt2_activations_total(const GPT2Config* c, int B, int T, int recompute, int flash, int vocab_tile,
                                     int trainer, size_t x) {
    size_t bytes[ACT_COUNT];
    gpt2_activations(c, B, T, recompute, flash, vocab_tile, trainer, x, bytes);
    double total = 0;
    for (int i = 0; i < ACT_COUNT; i++) { total += (double)bytes[i]; }
    return total;
}

// -r -1 (auto, the GPU trainer's default): the memory kept back from the activations on a GPU
// of total bytes (cuBLAS's and NCCL's own, the kernels' scratch, the allocator's slack):
// 5%, at least 1 GiB
static double gpt2_recompute_reserve(double total) { return total * 0.05 > 1073741824.0 ? total * 0.05 : 1073741824.0; }

// -r -1: the least recompute whose activations (the GPU trainer's, x bytes an element) fit
// in room bytes; 2 when none does (its allocation then fails, saying so). Recomputing costs
// time (the GELU's forward again in each layer's backward, and the layernorms' at 2), so
// the least that fits is the fastest that runs.
static int gpt2_recompute_auto(const GPT2Config* c, int B, int T, int flash, int vocab_tile, size_t x, double room) {
    for (int r = 0; r < 2; r++) {
        if (gpt2_activations_total(c, B, T, r, flash, vocab_tile, ACT_GPU, x) <= room) { return r; }
    }
    return 2;
}

#endif // LLMC_ACTIVATIONS_H
