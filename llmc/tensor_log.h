/*
 --log-tensors N: every N steps, per tensor and per layer: the norm and the largest
 magnitude of the step's mean gradient (before clipping), and after the update of the fp32
 master, of AdamW's m and of v, and the update's norm over the parameters' after it (the
 update-to-parameter ratio), as one line of main.jsonl:

   {"step": S, "tensors": {"wte": {"param_norm": .., "param_max": .., "m_norm": .., "m_max": ..,
    "v_norm": .., "v_max": .., "grad_norm": .., "grad_max": .., "update_ratio": ..}, "wpe": {..},
    "ln1w.0": {..}, ...},
    "layers": [{"layer": 0, <the same keys over the block's 12 tensors>}, ...]}

 S is 0-based, as main.jsonl's other lines; a line is written after steps S with
 (S + 1) % N == 0, whose update was made (a skipped step's ratio is 0). Each rank reads its
 own range of every unit from the engine (zero_state_shard: wherever it keeps them, GPU,
 host or NVMe), sums squares in double and takes maxima over the parts of the tensors in it,
 and rank 0 gets the model's figures in two reductions (a sum and a max), not one per
 tensor. The ratio needs the parameters from before the step: on those steps only, each
 rank copies its range of the master first, 4 bytes per parameter / world size of host
 memory, freed after; with --dpu a logged step waits for its update. The gradient is read
 before the update, in its phase (zero3/zero.h's [Note: phases]).
*/
#ifndef LLMC_TENSOR_LOG_H
#define LLMC_TENSOR_LOG_H

#include <stddef.h>           // size_t
#include "llmc/gpt2.h"        // GPT2Config, TensorRange: the tensors and where they are
#include "zero3/zero.h"       // Zero, zero_state_shard

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int every;                 // N; 0: off
    int nt, nu;                // tensors, units
    TensorRange* ranges;       // (nt)
    size_t* begin;             // (nu) this rank's range of each unit: [begin[u], begin[u] + n[u])
    size_t* n;
    size_t* at;                // (nu) where unit u's range starts in `before`
    float* before;             // this rank's master ranges before a logged step's update, or NULL
    float* buf;                // (the largest range) one unit's state
    double* sums;              // (nt, TL_SUMS) a logged step's sums of squares, then summed over ranks
    double* maxes;             // (nt, TL_MAXES) its largest magnitudes
} TensorLog;

// Sets up the log of every N steps (0: off, and the other calls do nothing).
void tensor_log_init(TensorLog* tl, const GPT2Config* c, Zero* z, int every);

// whether the step (0-based) is one that is logged
int tensor_log_due(const TensorLog* tl, int step);

// Before a logged step's update: this rank's master ranges, for the ratio, and the
// gradient's figures. Every rank.
void tensor_log_before(TensorLog* tl, Zero* z);

// After it: the figures, reduced to rank 0, which writes the line into dir's main.jsonl
// (dir NULL: nowhere). Every rank.
void tensor_log_after(TensorLog* tl, const GPT2Config* c, Zero* z, int step, int rank, const char* dir);

void tensor_log_free(TensorLog* tl);

#ifdef __cplusplus
}
#endif

#endif // LLMC_TENSOR_LOG_H
