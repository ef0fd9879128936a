/*
 The set-up of a training run (llmc/trainer.h runs it): the Trainer, start-up, the model
 of -e, the checks before the first step, the engine for GPT-2, --estimate, the end, and
 the TrainerModel a trainer hands trainer_run.

   trainer_start    MPI, the flags (-h prints the usage and exits), ranks on this node
   trainer_model    the model of -e: an llm.c file, or a descriptor with a random init
   trainer_setup    the batch arithmetic, the check that all ranks run the same thing,
                    the output directory, the data loaders, the tokenizer for samples
   trainer_engine   what a ZeRO engine is built from (zero3/zero.h's ZeroInit) for GPT-2
   trainer_finish   frees the run and ends MPI
*/
#ifndef LLMC_TRAINER_SETUP_H
#define LLMC_TRAINER_SETUP_H

#include "llmc/args.h"        // TrainConfig, args_parse
#include "llmc/gpt2.h"        // model files, descriptors, init, the units, gpt2_schedule
#include "llmc/dataloader.h"  // DataLoader
#include "llmc/tokenizer.h"   // Tokenizer for samples
#include "llmc/hellaswag.h"   // EvalSet: -h 1's examples
#include "zero3/zero.h"       // Zero, ZeroModel, ZeroInit: the engine's interface
#include "llmc/profile.h"     // OpProfile: --profile-ops

#ifdef __cplusplus
extern "C" {
#endif

// ----------------------------------------------------------------------------
// the run

typedef struct {
    TrainConfig tc;
    int rank, world;
    int local_size;          // ranks on this node
    int threads;             // this rank's share of the node's cores (OMP_NUM_THREADS when set)
    GPT2Config config;
    GPT2Source source;       // where the initial parameters come from: -e's file (open) or random init from --seed
    long total_batch;        // tokens per optimizer step over all ranks
    int grad_accum;
    DataLoader train, val;
    int loaders_ready;       // trainer_setup opened them
    int val_steps, max_steps;
    Tokenizer tokenizer;
    int have_tokenizer;
    int start_token;         // what the first sampled position sees
    int* prompt;             // (prompt_n) --prompt's tokens, after start_token in every sample; NULL: none
    int prompt_n;
    EvalSet hellaswag;       // -h 1's examples (zeroed without -h 1)
    double started_ms;       // zero_now_ms() as trainer_start began
    double startup_ms;       // from then to the first step (the engine's build, any resume, the header)
} Trainer;

// Start-up: line-buffered stdout, SIGXFSZ ignored (a write past a file-size limit fails
// with EFBIG and is reported), MPI, the flags (--help, or -h alone, prints the usage for
// `program` and exits; a bad flag stops every rank; llm.c's -ge must be -1, which becomes
// gelu_fusion, the build's (0 none, 1 the forward's in the matmul), or that, or 2 where it
// is 1 (the backward's in the matmul too)), the launcher's word
// and llm.c's -pn/-pr/-pg against MPI's (llmc/job.h), the stop signals, the --ds-config
// warnings from rank 0, and this rank's threads: the node's cores split among its ranks
// unless OMP_NUM_THREADS says.
void trainer_start(Trainer* t, int* argc, char*** argv, const char* program, int gelu_fusion);

// The model of -e: an llm.c file (its header and size checked on every rank, the file
// kept open: each rank reads only its shards when the engine is built), or a descriptor
// with GPT-2's random init from --seed. Nothing of the parameters is read or made here:
// the engine asks t->source for each rank's shards (trainer_fill). Checks -t against the model.
void trainer_model(Trainer* t);

// After trainer_model: the batch (t->total_batch, t->grad_accum), the check that all ranks
// agree, the output directory (-o, made by rank 0; -n and -y need it), the data loaders
// (each rank reports its own file errors: files may differ per node), the validation
// batches (-m, at most the set), the steps (-x, or one epoch), -h 1's examples (every
// rank reads and checks --hellaswag-file), and the tokenizer for samples (used only when
// it has the model's vocabulary: a small test model samples ids).
void trainer_setup(Trainer* t);

// frees the run (tokenizer, loaders, model source), stops the watchdog and ends MPI
void trainer_finish(Trainer* t);

// ----------------------------------------------------------------------------
// the engine for GPT-2
// GPT-2 as the engines see it (llmc/gpt2.h's units): sizes, tensors with their weight
// decay, the two use schedules (gpt2_schedule). The arrays live until gpt2_engine_model_free.
void gpt2_engine_model(const GPT2Config* c, ZeroModel* m);

// frees what gpt2_engine_model allocated, and zeroes m
void gpt2_engine_model_free(ZeroModel* m);

// the engines' ZeroFillFn over a GPT2Source (ctx): a range of a unit read from the model
// file or made by the random init; llmc's message becomes the engine's
int trainer_fill(void* ctx, int u, size_t begin, size_t n, float* out);

// what an engine for this run is built from: the ZeRO configuration, AdamW's betas and
// eps, every rank, the initial parameters from t->source (model: gpt2_engine_model's)
ZeroInit trainer_engine(Trainer* t, const ZeroModel* model);

// --estimate NODES:GPUS (after trainer_model, without parameters): DeepSpeed-style
// model-state memory per GPU and per node for every stage and offload, then the GPU
// trainer's activations at this run's -b, -t, -r and --attention, x bytes per element;
// with host_acts >= 0 (the CPU trainer's activations) this run's own host-engine figures
// too (trainer_estimate_host); printed by rank 0. Then the GPU trainer's device engine per
// rank at every tier (zero3/dev_estimate.h), and with NODES:GPUS,gpu=G,host=H[,nvme=D] the
// largest GPT-3 size that trains there (docs/USAGE.md, "The estimator"). The value is
// parsed strictly: a bad one stops every rank with one line. Ends the program: returns
// main's exit status.
int trainer_estimate(Trainer* t, size_t x, double host_acts);

// ----------------------------------------------------------------------------
// what trainer_run needs of a model

// the per-position losses (B, T) of one batch of inputs and targets on this rank, in host
// memory until the next call (validation takes their mean, HellaSwag its completions')
typedef const float* (*TrainerLossesFn)(void* self, const int* inputs, const int* targets);
// the probabilities of the next token after tokens[0..t) (the real vocabulary's, in order)
typedef const float* (*TrainerProbsFn)(void* self, const int* tokens, int t);

// Memory per rank, in bytes, in this order in the step table and the report: the model
// states and working set where the computation runs (params, grads, optimizer, buffers,
// activations), what the program allocated there, the peak in use, the host tiers and
// the swap file.
enum { MEM_PARAMS, MEM_GRADS, MEM_OPTIMIZER, MEM_BUFFERS, MEM_ACTIVATIONS, MEM_ALLOCATED, MEM_PEAK,
       MEM_HOST_PARAMS, MEM_HOST_GRADS, MEM_HOST_OPTIMIZER, MEM_HOST_BUFFERS, MEM_NVME, MEM_FIELDS };
static const char* const mem_names[MEM_FIELDS] = {"params", "grads", "optimizer", "buffers", "activations",
    "allocated", "peak", "host_params", "host_grads", "host_optimizer", "host_buffers", "nvme"};

typedef struct {
    void* self;
    Zero* zero;                 // the model's engine
    const char* device;         // where it computes, for the header and the report ("cpu", the GPU's name)
    const char* precision;      // "fp32", "bf16"
    const char* notes;          // more of the header's device line ("attention flash, 8 GPUs per node"), or ""
    double peak_flops;          // the device's peak bf16 FLOP/s for MFU: < 0 no MFU (CPU), 0 unknown
    // one training micro-step of grad_accum on this rank's batch: the forward and the
    // backward under one engine pass, the gradients of the mean loss / grad_accum accumulated
    void (*train_micro)(void* self, const int* inputs, const int* targets, int last_micro, int grad_accum);
    // the sum of the training micro-steps' mean losses since the last call; waits for the step
    double (*train_loss)(void* self);
    TrainerLossesFn eval_losses;
    TrainerProbsFn next_probs;
    // the model's memory: out[MEM_ACTIVATIONS], out[MEM_ALLOCATED] and out[MEM_PEAK] set,
    // its scratch added to out[MEM_BUFFERS]; the engine's figures are in zs and out already
    void (*memory)(void* self, const ZeroStats* zs, double* out);
    // the memory in use on the device now, for the step line; NULL: not shown
    double (*device_in_use)(void* self);
    // named ranges for a profiler around the step and the update (the GPU's NVTX); NULL: none
    void (*range_push)(const char* name);
    void (*range_pop)(void);
    // --profile-ops (llmc/profile.h): the step about to run has its ops timed into p; returns
    // the host's clock (zero_now_ms) at the step's start. profile_end: the step is over, its
    // spans are in p (the GPU's events read, the timer off again). op_begin/op_end: an op of
    // the trainer's own (the optimizer's step), timed as the model's are (nothing when off).
    double (*profile_begin)(void* self, OpProfile* p);
    void (*profile_end)(void* self);
    void (*op_begin)(void* self, const char* name, int layer);
    void (*op_end)(void* self);
    double peak_bytes;          // the device's memory rate for the ops' floors, bytes/s; 0 unknown
} TrainerModel;

#ifdef __cplusplus
}
#endif

#endif // LLMC_TRAINER_SETUP_H
