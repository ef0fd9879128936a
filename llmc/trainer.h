/*
 The training run, shared by the two trainers (train_gpt2_zero3.c on the CPU, .cu on the
 GPU): everything of a run that is not the model's own code or the device set-up.

   trainer_start    MPI, the flags (-h prints the usage and exits), ranks on this node
   trainer_model    the model of -e: an llm.c file, or a descriptor with a random init
   trainer_setup    the batch arithmetic, the check that all ranks run the same thing,
                    the output directory, the data loaders, the tokenizer for samples
   trainer_engine   what a ZeRO engine is built from (zero3/zero.h's ZeroInit) for GPT-2
   trainer_run      resume, the header, the step loop (validation, samples, checkpoints,
                    micro-steps, the optimizer step, the step line, main.log), the report
   trainer_finish   frees the run and ends MPI

 The run is in five files: llmc/trainer_proc.h (failures, main.log, the unit hooks),
 llmc/trainer_setup.h (the Trainer, start-up to the engine, --estimate, the end),
 llmc/trainer_report.h (the table, memory, the --report JSON), llmc/trainer_checkpoint.h
 (checkpoints and resume), and this one: evaluation and the step loop. A trainer includes
 this one.

 A trainer hands trainer_run its model as a TrainerModel: the engine and a few functions
 (a training micro-step, the losses, evaluation, memory). The model's forward and
 backward reach the engine through the four unit hooks below (params_fetch, ...).
 Errors that every rank sees alike stop the job with one line from rank 0 (die_all);
 others with MPI_Abort.
*/
#ifndef LLMC_TRAINER_H
#define LLMC_TRAINER_H

#include "llmc/trainer_setup.h"      // Trainer, TrainerModel, trainer_start ... trainer_finish
#include "llmc/trainer_report.h"     // the header, memory, kernel figures, trainer_report
#include "llmc/rand.h"               // Rng: the sampler's coins
#include "llmc/schedulers.h"         // LRScheduler
#include "llmc/outlier.h"            // OutlierDetector: -sl, -sg
#include "llmc/tensor_log.h"         // TensorLog: --log-tensors

#ifdef __cplusplus
extern "C" {
#endif

// ----------------------------------------------------------------------------
// evaluation between steps

// ----------------------------------------------------------------------------
// the step loop

// what trainer_run carries from step to step
typedef struct {
    LRScheduler sched;
    Rng sample_rng;
    int start_step;
    int skipped;                // optimizer steps skipped so far (non-finite loss or norm, or -sl/-sg): AdamW's t did not advance
    OutlierDetector loss_z, norm_z;  // -sl, -sg: the windows of the last losses and norms (llmc/outlier.h)
    int skipped_before, skipped_in_a_row, signalled;
    int outliers;               // of which skipped by -sl/-sg
    double t_start;             // zero_now_ms at the first step of this run: the step line's elapsed time and ETA
    int nan_step;               // test hook (docs/TESTING.md): the last rank's loss of this step is NaN, as an overflow would make it
    int change_step;            // test hook (docs/TESTING.md): after this step the states are changed through the engine's calls
    double flops_per_token;
    double* mem_all;            // (world, MEM_FIELDS) on rank 0
    double mine[MEM_FIELDS];
    StepRecord* steps;
    ValRecord* vals;
    EvalRecord* evals;          // -h 1's results
    int nsteps, nvals, nevals, have_batch;
    TrainerTraffic traffic;
    double kernel[KERNEL_FIELDS];
    TensorLog tensors;          // --log-tensors
    OpProfile* ops;             // --profile-ops: the ops' times of the last steps (NULL: off)
} TrainerLoop;

// The run: resume, the header and the memory table, then per step validation (-v),
// HellaSwag (-h 1), samples (-s) and checkpoints (-n) where asked, the micro-steps of
// gradient accumulation, the engine's optimizer step, the step line and main.log; at the
// end the report.
void trainer_run(Trainer* t, const TrainerModel* m);

#ifdef __cplusplus
}
#endif

#endif // LLMC_TRAINER_H
