/*
 Checkpoints and resume of a training run (llmc/trainer.h): the checkpoint header of a
 step, the check that -e is the checkpoint's model, resume (-y 1), the finiteness check
 of the parameters before a save, and the save with its pruning (-n, --keep-checkpoints).
 The files themselves are llmc/checkpoint.h's.
*/
#ifndef LLMC_TRAINER_CHECKPOINT_H
#define LLMC_TRAINER_CHECKPOINT_H

#include "llmc/trainer_setup.h" // Trainer, TrainerModel
#include "llmc/rand.h"        // Rng: the sampler's state in a checkpoint
#include <stddef.h>             // size_t

#ifdef __cplusplus
extern "C" {
#endif

// Resumes, when -y 1, from the newest checkpoint in -o whose files pass their checksums
// (llmc/checkpoint.h), at any world size and stage (checkpoint_resume); stops every rank
// when there are checkpoints but none passes. Returns the step to start from, and in
// *skipped the steps skipped before it
int trainer_resume(Trainer* t, const TrainerModel* m, Rng* sample_rng, int* skipped);

// Whether every parameter of the engine's fp32 master is finite: each rank checks its own
// range of each unit (zero_state_shard, one unit's range at a time), and the first
// non-finite parameter of the model (unit order) is found over the ranks: a checkpoint of a
// non-finite state would be resumed from and poison every step after it. Says which
// parameter (its tensor, element and place in unit order) and its value in *msg when not.
int trainer_params_finite(const Trainer* t, const TrainerModel* m, char* msg, size_t len);

// -n: checks the parameters are finite (else stops every rank), saves step's checkpoint
// (llmc/checkpoint.h), then prunes the older ones (--keep-checkpoints)
void trainer_checkpoint(Trainer* t, const TrainerModel* m, int step, int skipped, const Rng* sample_rng);

#ifdef __cplusplus
}
#endif

#endif // LLMC_TRAINER_CHECKPOINT_H
