/*
 The trainer's command line: llm.c's short flags plus long flags for the rest, each
 a row of a table (llmc/args.c's args_options, zero3/config.c's zero_options for ZeRO's;
 zero3/options.h). Every value is parsed strictly (the whole string must be a number in range), and
 any problem is one line naming the flag, so `-b 4x` or a missing value never
 turns silently into a default.
*/
#ifndef LLMC_ARGS_H
#define LLMC_ARGS_H

#include <stdio.h>   // FILE, fprintf
#include <stdint.h>  // uint64_t
#include "zero3/config.h"  // ZeroConfig, zero_options: -z and the ZeRO long flags; OptRow, opt_parse_args (zero3/options.h)

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char* train_pattern;   // -i  train token shards (glob)
    const char* val_pattern;     // -j  validation token shards (glob)
    const char* output_dir;      // -o  main.log and checkpoints; NULL: none
    const char* model;           // -e  llm.c model .bin, or a descriptor (d12, gpt3:c768)
    int B;                       // -b  micro batch size per rank
    int T;                       // -t  sequence length
    long total_batch_size;       // -d  tokens per optimizer step over all ranks; -1: B*T*ranks
    int max_steps;               // -x  -1: one epoch of the training data
    const char* lr_schedule;     // -k  cosine | linear | constant | wsd
    float lr;                    // -l
    int warmup;                  // -u  warmup steps
    float final_lr_frac;         // -q  final learning rate as a fraction of -l
    float weight_decay;          // -c
    int val_every;               // -v  0: no validation
    int val_max_steps;           // -m  validation batches; -1: the whole validation set
    int sample_every;            // -s  0: no samples
    int gen_T;                   // -g  tokens per sample
    const char* prompt;          // --prompt TEXT  samples continue it (after <|endoftext|>); NULL: from <|endoftext|> alone
    const char* encoder;         // --encoder DIR  GPT-2's encoder.json and vocab.bpe, to encode --prompt
    float temperature;           // --temperature T  the samples' probabilities ^ (1/T), renormalized
    int top_k;                   // --top-k K  samples drawn from the K likeliest tokens; 0: all
    int checkpoint_every;        // -n  0: no checkpoints
    int resume;                  // -y  1: resume from the latest checkpoint in -o
    int keep_checkpoints;        // -nk, --keep-checkpoints K  after each save, only the K newest verified ones stay; 0: all
    int major_checkpoint_every;  // -nm M  with -nk: a checkpoint at a multiple of M steps is never removed; 0: none
    int hellaswag;               // -h 0|1  llm.c's HellaSwag eval every -v steps and at the last; -h alone: help
    const char* hellaswag_file;  // --hellaswag-file FILE  its examples (llm.c's eval file)
    float skip_lossz, skip_gradz;  // -sl, -sg  skip the update past this z-score of the loss / grad norm (llm.c's); 0: off
    int log_gpu_every;           // -lg  llm.c's GPU telemetry every N steps (not read here: only <= 0, off)
    int gelu_fusion;             // -ge  llm.c's GELU fusion: only the build's own (trainer_check_llmc_flags)
    int tf32;                    // -f   llm.c's TF32 override: only 0 (no TF32 anywhere here)
    int master_weights;          // -w   llm.c's fp32 master copy: only 1 (ZeRO always keeps it)
    int mp_processes, mp_rank, mp_per_node;  // -pn -pr -pg  llm.c's multi-node layout, checked against MPI's; -1: not given
    const char* mp_init;         // -pi mpi|fs|tcp  llm.c's NCCL bootstrap: MPI's world is used whichever
    const char* mp_fs_path;      // -pf  (with -pi fs)
    const char* mp_server;       // -ps  (with -pi tcp)
    int allow_unverified;        // --allow-unverified 1  -y 1 may take an empty DONE marker (an earlier version's) unverified
    int recompute;               // -r  0: keep all, 1: recompute GELU, 2: + layernorms; -1: the least that fits (resolved at start)
    int overfit_single_batch;    // -a
    uint64_t seed;               // --seed        init and shuffling
    int shuffle;                 // --shuffle     0: read the training shards in order
    float grad_clip;             // --grad-clip   global-norm clipping; 0: off
    int max_skipped_steps;       // --max-skipped-steps  consecutive steps skipped for a non-finite loss/norm before the run stops
    const char* report;          // --report      JSON summary written by rank 0 at exit
    int log_tensors;             // --log-tensors N  per-tensor figures in main.jsonl every N steps (llmc/tensor_log.h)
    int profile_ops;             // --profile-ops N  the last N steps timed op by op (llmc/profile.h)
    const char* tokenizer;       // --tokenizer   tokenizer file for decoding samples
    float beta1, beta2, eps;     // AdamW, from --ds-config's optimizer.params (llm.c's by default)
    const char* ds_config;       // --ds-config   DeepSpeed-style JSON; flags override it
    const char* estimate;        // --estimate NODES:GPUS  print model-state memory per GPU and exit
    const char* zero_backend;    // --zero-backend auto|device|host  where the GPU trainer keeps the model states
    const char* attention;       // --attention cublas|flash  the GPU trainer's attention kernels
    int vocab_tile;              // --vocab-tile N  the classifier's logits in tiles of N vocabulary columns; 0: whole (B,T,Vp)
    int dpu;                     // --dpu 0|1  GPU trainer, optimizer offload: delay the update one step (ZeRO-Offload's DPU)
    int matmul_tune;             // --matmul-tune N  GPU trainer: the first step times N cuBLASLt candidates a shape (llmc/matmul.cuh)
    int save_bf16;               // --save-bf16 0|1  checkpoints' model files as llm.c's bf16 version 5
    float collective_timeout;    // --collective-timeout S  a collective or file wait longer than S seconds ends the job; 0: never
    int stop_grace;              // --stop-grace S  a stop signal not taken up at a step boundary within S seconds ends the process; 0: never
    ZeroConfig zero;             // -z and the ZeRO long flags (zero3/config.h)
    int given_B, given_d, given_lr, given_wd, given_clip;  // set on the command line (they beat the JSON)
    int given_g;                 // -g given: a sample longer than -t is refused (the default is cut to -t)
    char warnings[4096];         // the JSON's unknown and no-effect keys, settings without effect: printed by rank 0
} TrainConfig;

// the usage of `program`, generated from the two tables: both trainers take the same flags
void args_usage(FILE* f, const char* program);

// the trainer's own table of options (the ZeRO ones: zero_options), *n its rows
const OptRow* args_option_table(int* n);

// Parses argv into c (starting from the defaults). Returns 0, 1 when help was asked
// for, or -1 with llmc_errmsg() naming the flag.
int args_parse(TrainConfig* c, int argc, char** argv);

#ifdef __cplusplus
}
#endif

#endif // LLMC_ARGS_H
