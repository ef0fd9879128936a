/*
 The GPU trainer's activations: every buffer train_gpt2_zero3.cu allocates for a batch of
 B x T, and its size. One table for that allocation and for the estimate of the GPU's
 memory that --estimate prints (from either binary) and scripts/run_common.sh reads, so
 the two cannot drift apart. What is not here: the kernels' scratch (layernorm and bias
 partial sums, the encoder's sort buffers and per-chunk sums: a few MiB) and cuBLASLt's workspace.

 Per layer (L of them) the forward keeps qkv, atty, residual2, residual3, fch, the
 layernorms' statistics, and with the cuBLAS attention its (B, NH, T, T) probabilities and
 permuted q, k, v; with --attention flash a logsumexp per row instead. -r 1 recomputes
 the GELU (one layer's fch_gelu), -r 2 also the layernorms (one layer's ln1, ln2). The
 backward works one layer at a time. The classifier's logits are (B, T, Vp), or with
 --vocab-tile Vt one tile's (B, T, Vt) (at least (B, Vp): sampling's last positions) and
 three fp32 statistics per row.
*/
#ifndef LLMC_ACTIVATIONS_H
#define LLMC_ACTIVATIONS_H

#include <stddef.h>      // size_t
#include "llmc/gpt2.h"   // GPT2Config

// the buffers, in the order of the GPU trainer's DevActs
enum {
    ACT_ENCODED, ACT_LN1, ACT_LN1_MEAN, ACT_LN1_RSTD, ACT_QKV, ACT_QKVR, ACT_ATTY, ACT_ATT, ACT_ATTPROJ,
    ACT_RESIDUAL2, ACT_LN2, ACT_LN2_MEAN, ACT_LN2_RSTD, ACT_FCH, ACT_FCH_GELU, ACT_FCPROJ, ACT_RESIDUAL3,
    ACT_LNF, ACT_LNF_MEAN, ACT_LNF_RSTD, ACT_LOGITS, ACT_CLS_MAX, ACT_CLS_SUM, ACT_CLS_TARGET, ACT_LOSSES, ACT_LOSS_ACC,
    ACT_DRESIDUAL, ACT_DLN, ACT_DATTY, ACT_DQKV, ACT_DFCH, ACT_DQKVR, ACT_DATT, ACT_ATTN_SCRATCH,
    ACT_LSE, ACT_ATTN_FSCRATCH, ACT_INPUTS, ACT_TARGETS, ACT_INPUTS_ALT, ACT_TARGETS_ALT,
    ACT_COUNT
};

// the classifier's tile of vocabulary columns for --vocab-tile: at most Vp (one tile); 0: untiled
static int gpu_vocab_tile(const GPT2Config* c, int vocab_tile) {
    return vocab_tile < c->padded_vocab_size ? vocab_tile : c->padded_vocab_size;
}

// bytes[ACT_COUNT]: each buffer's size for batches of up to B x T with -r recompute, the
// flash attention or cuBLAS's, --vocab-tile, and x bytes per element of the compute type (2: bf16)
static void gpu_activations(const GPT2Config* c, int B, int T, int recompute, int flash, int vocab_tile, size_t x,
                            size_t* bytes) {
    size_t L = c->num_layers, NH = c->num_heads, C = c->channels, Vp = c->padded_vocab_size;
    size_t BT = (size_t)B * T, att = (size_t)B * NH * T * T, f = sizeof(float);
    size_t keep_gelu = recompute >= 1 ? 1 : L, keep_ln = recompute >= 2 ? 1 : L;
    size_t cub = flash ? 0 : 1, fl = flash ? 1 : 0;  // the cuBLAS attention's buffers, the flash kernel's
    size_t Vt = (size_t)gpu_vocab_tile(c, vocab_tile), tiled = Vt > 0 ? 1 : 0;
    size_t tile_logits = BT * Vt > (size_t)B * Vp ? BT * Vt : (size_t)B * Vp;
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
    bytes[ACT_LOGITS] = (tiled ? tile_logits : BT * Vp) * x;
    bytes[ACT_CLS_MAX] = tiled * BT * f;         // tiled: each row's running max, sum of exp(logit - max), target logit
    bytes[ACT_CLS_SUM] = tiled * BT * f;
    bytes[ACT_CLS_TARGET] = tiled * BT * f;
    bytes[ACT_LOSSES] = BT * f;
    bytes[ACT_LOSS_ACC] = sizeof(double);
    bytes[ACT_DRESIDUAL] = BT * C * x;
    bytes[ACT_DLN] = BT * C * x;
    bytes[ACT_DATTY] = BT * C * x;
    bytes[ACT_DQKV] = BT * 3 * C * x;
    bytes[ACT_DFCH] = BT * 4 * C * x;
    bytes[ACT_DQKVR] = cub * BT * 3 * C * x;
    bytes[ACT_DATT] = cub * att * x;
    bytes[ACT_ATTN_SCRATCH] = cub * BT * C * x;  // the output's gradient split into heads
    bytes[ACT_LSE] = fl * L * B * NH * T * f;    // each query row's logsumexp, from the forward to the backward
    bytes[ACT_ATTN_FSCRATCH] = fl * B * NH * T * f;
    bytes[ACT_INPUTS] = BT * sizeof(int);        // the batch in two slots (see batch_to_device)
    bytes[ACT_TARGETS] = BT * sizeof(int);
    bytes[ACT_INPUTS_ALT] = BT * sizeof(int);
    bytes[ACT_TARGETS_ALT] = BT * sizeof(int);
}

// their total in bytes
static double gpu_activations_total(const GPT2Config* c, int B, int T, int recompute, int flash, int vocab_tile, size_t x) {
    size_t bytes[ACT_COUNT];
    gpu_activations(c, B, T, recompute, flash, vocab_tile, x, bytes);
    double total = 0;
    for (int i = 0; i < ACT_COUNT; i++) { total += (double)bytes[i]; }
    return total;
}

#endif // LLMC_ACTIVATIONS_H
