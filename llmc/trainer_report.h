/*
 What a training run reports (llmc/trainer.h): the run's table (trainer_print_header),
 memory per rank (trainer_memory, memory_gather), the kernel's figures of the process
 (kernel_steps_begin/end), the per-step records and the --report JSON (trainer_report).
*/
#ifndef LLMC_TRAINER_REPORT_H
#define LLMC_TRAINER_REPORT_H

#include "llmc/trainer_setup.h" // Trainer, TrainerModel, MEM_*
#include "zero3/zero.h"       // zero_stats, ZeroStats

#ifdef __cplusplus
extern "C" {
#endif

// ----------------------------------------------------------------------------
// memory and the report

// this rank's memory in MEM_* order: the engine's peaks, then the model's
void trainer_memory(const TrainerModel* m, double* out);

// gathers every rank's figures to rank 0 (all: (world, MEM_FIELDS)); print: rank 0
// prints one line per rank, `where` naming the compute memory ("" or "GPU ")
void memory_gather(const double* mine, double* all, int rank, int world, int print, const char* where);

// What the kernel says of this process, not the engines' accounting: the peak resident
// memory (VmHWM) of start-up and of the steps, and the bytes it made the storage read and
// write during the steps (/proc/self/io, O_DIRECT and io_uring's workers included).
enum { KERNEL_RSS_STARTUP, KERNEL_RSS_STEPS, KERNEL_READ, KERNEL_WRITE, KERNEL_FIELDS };
static const char* const kernel_names[KERNEL_FIELDS] = {"peak_rss_startup", "peak_rss_steps", "read_bytes_per_step",
                                                        "write_bytes_per_step"};

// start-up's peak is read and the kernel's high-water mark reset (writing 5 to clear_refs,
// Linux >= 4.0), so that the steps' peak is the steps' own; without the reset the steps'
// figure includes start-up
void kernel_steps_begin(double* k);

// this process's resident memory now (VmRSS, bytes), -1 if unknown: main.jsonl's per step
double kernel_rss_now(void);

// the steps' peak resident memory, and their read and written bytes per step
void kernel_steps_end(double* k, int steps);

// one training step and one validation, as the report records them
typedef struct { int step; float loss; double ms, tokens_per_s; float lr, norm; double wait_ms, mfu; int skipped, outlier, profiled; } StepRecord;  // mfu < 0: unknown; outlier: skipped by -sl/-sg; profiled: timed op by op (--profile-ops)
typedef struct { int step; float loss; } ValRecord;
// -h 1: HellaSwag's accuracy at a step (rank 0's; the correct examples of all)
typedef struct { int step; float accuracy; int correct, examples; } EvalRecord;

// What the report says about the run's engine per training step, averaged: the bytes each
// collective sent, the wait, the tiers' traffic and the update's time. The traffic of
// validation, sampling and checkpoints between steps is included (run with -v 0 -s 0 -n 0
// to leave it out).
// net: the bytes every rank's engine sent, summed over the ranks (rank 0's copy), by link
// (inside a node, between nodes) and collective: over the whole run, then over the steps.
typedef struct {
    ZeroStats start; double wait_total; int steps;
    double net[2][ZERO_NUM_LINKS][ZERO_NUM_COLLECTIVES];
} TrainerTraffic;

// the --report JSON (DESIGN's contract and more), written whole or not at all; ops: the
// per-op timer's rows, NULL when off
int trainer_report(const Trainer* t, const TrainerModel* m, const StepRecord* steps, int nsteps,
                          const ValRecord* vals, int nvals, const EvalRecord* evals, int nevals, const double* mem, const double* kernel,
                          const TrainerTraffic* tr, double flops_per_token, const OpProfile* ops);

// the run's table, printed by rank 0
void trainer_print_header(const Trainer* t, const TrainerModel* m, double flops_per_token);

#ifdef __cplusplus
}
#endif

#endif // LLMC_TRAINER_REPORT_H
