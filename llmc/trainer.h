/*
 Host-side pieces shared by the two trainers (train_gpt2_zero3.c and .cu): start-up
 (MPI, flags), the model from a file or a descriptor, the batch arithmetic (-d,
 DeepSpeed's batch keys from --ds-config, or B*T*ranks), the output directory, the data
 loaders, the tokenizer for samples, llm.c's main.log, the latest complete checkpoint,
 the MPI checked wrapper and timing. Errors stop every rank with one line.
*/
#ifndef LLMC_TRAINER_H
#define LLMC_TRAINER_H

#include <stdio.h>        // fprintf, snprintf, sscanf
#include <stdlib.h>       // exit
#include <time.h>         // clock_gettime
#include <string.h>       // strstr
#include <signal.h>       // signal: SIGXFSZ ignored, so a full file fails a write instead
#include <unistd.h>       // access
#include <sys/stat.h>     // stat, mkdir
#include <dirent.h>       // opendir: the DONE markers
#include <mpi.h>          // MPI_Abort, MPI_Finalize
#include "llmc/utils.h"   // fopenCheck, llmc_errmsg
#include "llmc/args.h"    // TrainConfig, args_parse
#include "llmc/gpt2.h"    // model files, descriptors, init
#include "llmc/dataloader.h"  // DataLoader
#include "llmc/tokenizer.h"   // Tokenizer for samples
#include "llmc/rand.h"        // Rng: the sampler's coins
#include "zero3/config.h" // zero_config_resolve_batch
#include "zero3/engine.h" // ZeroEngine: the schedule, sharded checkpoints
#include <cjson/cJSON.h>  // the --report JSON

static void mpi_check(int rc, const char* file, int line) {
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, msg, &len);
        fprintf(stderr, "error: MPI: %s [%s:%d]\n", msg, file, line);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}
#define mpiCheck(rc) mpi_check((rc), __FILE__, __LINE__)

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

// errors found before training starts, the same on every rank: print once, stop all
static void die_all(int rank, const char* msg) {
    if (rank == 0) { fprintf(stderr, "error: %s\n", msg); }
    MPI_Finalize();
    exit(EXIT_FAILURE);
}

// one line of llm.c's main.log ("s:%d trl:%f" / "s:%d tel:%f"), from rank 0
static void log_line(const char* dir, int rank, const char* fmt, int step, float value) {
    if (dir == NULL || rank != 0) { return; }
    char path[4096];
    snprintf(path, sizeof(path), "%s/main.log", dir);
    FILE* fp = fopenCheck(path, "a");
    fprintf(fp, fmt, step, value);
    fclose(fp);
}

// the latest step with a DONE marker in dir (written after every file of that
// checkpoint was complete), or -1
static int checkpoint_latest(const char* dir) {
    DIR* d = opendir(dir);
    if (d == NULL) { return -1; }
    int best = -1;
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        int s;
        char tail;
        if (sscanf(e->d_name, "DONE_%8d%c", &s, &tail) == 1 && s > best) { best = s; }
    }
    closedir(d);
    return best;
}

// Tokens per optimizer step over all ranks: -d if given (a multiple of B*T*ranks), else
// DeepSpeed's rule over --ds-config's train_batch_size (sequences), micro batch and
// accumulation steps, else B*T*ranks. Stops every rank with a message when they do not fit.
static long trainer_total_batch(const TrainConfig* tc, int rank, int world) {
    long tokens_per_micro = (long)tc->B * tc->T * world;
    if (tc->given_d) {
        if (tc->total_batch_size % tokens_per_micro != 0) {
            char msg[256];
            snprintf(msg, sizeof(msg), "flag -d: total batch size %ld is not a multiple of B*T*ranks = %d*%d*%d = %ld",
                     tc->total_batch_size, tc->B, tc->T, world, tokens_per_micro);
            die_all(rank, msg);
        }
        return tc->total_batch_size;
    }
    if (tc->zero.train_batch_size > 0 || tc->zero.gradient_accumulation_steps > 0) {
        int micro = 0, accum = 0;
        if (zero_config_resolve_batch(tc->zero.train_batch_size, tc->B, tc->zero.gradient_accumulation_steps,
                                      world, &micro, &accum) != 0) {
            die_all(rank, llmc_errmsg());
        }
        return (long)micro * accum * world * tc->T;
    }
    return tokens_per_micro;
}

// Start-up common to both trainers: line-buffered stdout, SIGXFSZ ignored (a write past a
// file-size limit fails with EFBIG and is reported), MPI, the flags (-h prints the usage
// and exits; a bad flag stops every rank), and the --ds-config warnings from rank 0.
static void trainer_start(int* argc, char*** argv, TrainConfig* tc, int* rank, int* world) {
    setvbuf(stdout, NULL, _IOLBF, 0);  // line by line into logs and pipes, not in 4 KiB blocks
    signal(SIGXFSZ, SIG_IGN);
    mpiCheck(MPI_Init(argc, argv));
    mpiCheck(MPI_Comm_rank(MPI_COMM_WORLD, rank));
    mpiCheck(MPI_Comm_size(MPI_COMM_WORLD, world));
    int rc = args_parse(tc, *argc, *argv);
    if (rc == 1) {
        if (*rank == 0) { args_usage(stdout); }
        MPI_Finalize();
        exit(EXIT_SUCCESS);
    }
    if (rc != 0) { die_all(*rank, llmc_errmsg()); }
    if (*rank == 0 && tc->warnings[0] != '\0') { fputs(tc->warnings, stderr); }
}

// The model of -e: an llm.c file (read on every rank), or a descriptor whose random init
// (from --seed) is made on rank 0 only, when with_params: the trainers broadcast rank 0's
// parameters. *params is NULL where nothing was read or made. Checks -t against the model.
static void trainer_model(const TrainConfig* tc, int rank, int with_params, GPT2Config* config, float** params) {
    *params = NULL;
    if (access(tc->model, F_OK) == 0) {
        if (gpt2_read_model(tc->model, config, params) != 0) { die_all(rank, llmc_errmsg()); }
    } else {
        if (strstr(tc->model, ".bin") != NULL) {
            char msg[4200];
            snprintf(msg, sizeof(msg), "model file %s does not exist", tc->model);
            die_all(rank, msg);
        }
        if (gpt2_config_from_descriptor(tc->model, config) != 0) { die_all(rank, llmc_errmsg()); }
        if (with_params && rank == 0) {
            *params = (float*)malloc(gpt2_num_params(config) * sizeof(float));
            if (*params == NULL) { die_all(rank, "out of memory for the model's parameters"); }
            gpt2_init_params(config, *params, tc->seed);
        }
    }
    if (tc->T > config->max_seq_len) {
        char msg[256];
        snprintf(msg, sizeof(msg), "flag -t: sequence length %d exceeds the model's maximum of %d", tc->T, config->max_seq_len);
        die_all(rank, msg);
    }
}

// -o: made by rank 0 (every rank learns whether it worked); -n and -y need it
static void trainer_output_dir(const TrainConfig* tc, int rank) {
    if (tc->output_dir != NULL) {
        struct stat st;
        int bad = 0;
        if (rank == 0 && stat(tc->output_dir, &st) != 0 && mkdir(tc->output_dir, 0755) != 0) { bad = 1; }
        mpiCheck(MPI_Bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD));
        if (bad) {
            char msg[4200];
            snprintf(msg, sizeof(msg), "flag -o: cannot create output directory %s", tc->output_dir);
            die_all(rank, msg);
        }
    } else if (tc->checkpoint_every > 0 || tc->resume) {
        die_all(rank, "flags -n and -y need an output directory: add -o DIR");
    }
}

// The training loader (shuffled unless -a 1 or --shuffle 0) and the validation loader
// (when -v > 0), the validation batches (-m, at most the set), and the steps (-x, or
// one epoch of the training data). Each rank reports its own file errors: files may
// differ per node.
static void trainer_loaders(const TrainConfig* tc, int rank, int world, int grad_accum,
                            DataLoader* train, DataLoader* val, int* val_steps, int* max_steps) {
    int shuffle = tc->shuffle && !tc->overfit_single_batch;
    if (dataloader_init(train, tc->train_pattern, tc->B, tc->T, rank, world, shuffle, tc->seed) != 0) {
        fprintf(stderr, "error: %s\n", llmc_errmsg());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    *val_steps = 0;
    if (tc->val_every > 0) {
        if (dataloader_init(val, tc->val_pattern, tc->B, tc->T, rank, world, 0, 0) != 0) {
            fprintf(stderr, "error: %s (or disable validation with -v 0)\n", llmc_errmsg());
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        size_t nb = dataloader_num_batches(val);
        *val_steps = tc->val_max_steps < 0 || (size_t)tc->val_max_steps > nb ? (int)nb : tc->val_max_steps;
    }
    *max_steps = tc->max_steps >= 0 ? tc->max_steps : (int)(dataloader_num_batches(train) / grad_accum);
}

// The tokenizer for samples: used only when it has the model's vocabulary (a small test
// model samples token ids). Returns whether it is loaded; *start_token is what the first
// sampled position sees: <|endoftext|>, or the last token of a smaller vocabulary.
static int trainer_tokenizer(const TrainConfig* tc, int rank, int vocab_size, Tokenizer* tok, int* start_token) {
    int have = tc->sample_every > 0 && tokenizer_init(tok, tc->tokenizer) == 0;
    if (tc->sample_every > 0 && !have && rank == 0) {
        printf("warning: %s; samples are printed as token ids\n", llmc_errmsg());
    }
    if (have && (int)tok->vocab_size != vocab_size) {
        if (rank == 0) {
            printf("warning: tokenizer %s has %u tokens but the model has %d; samples are printed as token ids\n",
                   tc->tokenizer, tok->vocab_size, vocab_size);
        }
        tokenizer_free(tok);
        have = 0;
    }
    *start_token = have ? (int)tok->eot_token : (vocab_size > GPT2_VOCAB_SIZE - 1 ? GPT2_VOCAB_SIZE - 1 : vocab_size - 1);
    return have;
}

// ----------------------------------------------------------------------------
// the --report JSON: what both trainers write the same way

// one training step and one validation, as the report records them
typedef struct { int step; float loss; double ms, tokens_per_s; float lr, norm; double wait_ms, mfu; } StepRecord;  // mfu < 0: unknown
typedef struct { int step; float loss; } ValRecord;

// "config" (returned, for the caller's own keys), "steps" and "val"
static cJSON* report_add_run(cJSON* root, const TrainConfig* tc, const GPT2Config* c, int grad_accum,
                             const StepRecord* steps, int nsteps, const ValRecord* vals, int nvals) {
    cJSON* cfg = cJSON_AddObjectToObject(root, "config");
    cJSON_AddStringToObject(cfg, "model", tc->model);
    cJSON_AddNumberToObject(cfg, "B", tc->B);
    cJSON_AddNumberToObject(cfg, "T", tc->T);
    cJSON_AddNumberToObject(cfg, "grad_accum_steps", grad_accum);
    cJSON_AddNumberToObject(cfg, "num_layers", c->num_layers);
    cJSON_AddNumberToObject(cfg, "channels", c->channels);
    cJSON_AddNumberToObject(cfg, "num_heads", c->num_heads);
    cJSON* arr = cJSON_AddArrayToObject(root, "steps");
    for (int i = 0; i < nsteps; i++) {
        cJSON* s = cJSON_CreateObject();
        cJSON_AddNumberToObject(s, "step", steps[i].step);
        cJSON_AddNumberToObject(s, "loss", steps[i].loss);
        cJSON_AddNumberToObject(s, "ms", steps[i].ms);
        cJSON_AddNumberToObject(s, "tokens_per_s", steps[i].tokens_per_s);
        cJSON_AddNumberToObject(s, "lr", steps[i].lr);
        cJSON_AddNumberToObject(s, "grad_norm", steps[i].norm);
        cJSON_AddNumberToObject(s, "comm_wait_ms", steps[i].wait_ms);
        if (steps[i].mfu >= 0) { cJSON_AddNumberToObject(s, "mfu", steps[i].mfu); }
        cJSON_AddItemToArray(arr, s);
    }
    arr = cJSON_AddArrayToObject(root, "val");
    for (int i = 0; i < nvals; i++) {
        cJSON* s = cJSON_CreateObject();
        cJSON_AddNumberToObject(s, "step", vals[i].step);
        cJSON_AddNumberToObject(s, "loss", vals[i].loss);
        cJSON_AddItemToArray(arr, s);
    }
    return cfg;
}

// writes the report under a temporary name and renames it (never a torn file), then
// frees root; a failure to write stops the program with the path and the reason
static void report_save(cJSON* root, const char* path) {
    char* text = cJSON_Print(root);
    char tmp[4200];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE* fp = fopen(tmp, "w");
    int ok = text != NULL && fp != NULL && fputs(text, fp) >= 0 && fputs("\n", fp) >= 0;
    if (fp != NULL && fclose(fp) != 0) { ok = 0; }
    if (!ok || rename(tmp, path) != 0) {
        fprintf(stderr, "error: cannot write report %s: %s\n", path, strerror(errno));
        remove(tmp);
        exit(EXIT_FAILURE);
    }
    free(text);
    cJSON_Delete(root);
}

// the run's table, up to its ZeRO line (the trainer adds its own lines and the closing rule)
static void trainer_print_header(const TrainConfig* tc, const GPT2Config* c, size_t num_params, int world,
                                 int grad_accum, long total_batch, int max_steps, const char* zero) {
    printf("+-----------------------+\n");
    printf("| model                 | %s\n", tc->model);
    printf("| max_seq_len, vocab    | %d, %d (padded %d)\n", c->max_seq_len, c->vocab_size, c->padded_vocab_size);
    printf("| layers, heads, chans  | %d, %d, %d\n", c->num_layers, c->num_heads, c->channels);
    printf("| parameters            | %zu\n", num_params);
    printf("| ranks, B, T           | %d, %d, %d  (grad accumulation %d, %ld tokens/step)\n", world, tc->B, tc->T, grad_accum, total_batch);
    printf("| steps, lr, schedule   | %d, %g, %s (warmup %d, final %g)\n", max_steps, tc->lr, tc->lr_schedule, tc->warmup, tc->final_lr_frac);
    printf("| ZeRO                  | %s\n", zero);
}

// Memory per rank, in bytes, in this order in both trainers and the report: the model
// states and working set where the computation runs (params, grads, optimizer, buffers,
// activations), what the program allocated there, the peak in use, the host tiers and
// the swap file.
enum { MEM_PARAMS, MEM_GRADS, MEM_OPTIMIZER, MEM_BUFFERS, MEM_ACTIVATIONS, MEM_ALLOCATED, MEM_PEAK,
       MEM_HOST_PARAMS, MEM_HOST_GRADS, MEM_HOST_OPTIMIZER, MEM_HOST_BUFFERS, MEM_NVME, MEM_FIELDS };
static const char* const mem_names[MEM_FIELDS] = {"params", "grads", "optimizer", "buffers", "activations",
    "allocated", "peak", "host_params", "host_grads", "host_optimizer", "host_buffers", "nvme"};

// gathers every rank's figures to rank 0 (all: (world, MEM_FIELDS)); print: rank 0
// prints one line per rank, `where` naming the compute memory ("" or "GPU ")
static void memory_gather(const double* mine, double* all, int rank, int world, int print, const char* where) {
    mpiCheck(MPI_Gather(mine, MEM_FIELDS, MPI_DOUBLE, all, MEM_FIELDS, MPI_DOUBLE, 0, MPI_COMM_WORLD));
    for (int r = 0; print && rank == 0 && r < world; r++) {
        const double* x = all + r * MEM_FIELDS;
        printf("memory rank %d (MiB): %sparams %.1f, grads %.1f, optimizer %.1f, buffers %.1f, activations %.1f",
               r, where, x[MEM_PARAMS] / 1048576, x[MEM_GRADS] / 1048576, x[MEM_OPTIMIZER] / 1048576,
               x[MEM_BUFFERS] / 1048576, x[MEM_ACTIVATIONS] / 1048576);
        double host = x[MEM_HOST_PARAMS] + x[MEM_HOST_GRADS] + x[MEM_HOST_OPTIMIZER] + x[MEM_HOST_BUFFERS];
        if (host > 0 || x[MEM_NVME] > 0) { printf(" | host %.1f, nvme %.1f", host / 1048576, x[MEM_NVME] / 1048576); }
        printf("\n");
    }
}

// memory.per_rank: world rows of MEM_FIELDS numbers (bytes)
static void report_add_memory(cJSON* root, const double* mem, int world) {
    cJSON* memory = cJSON_AddObjectToObject(root, "memory");
    cJSON* arr = cJSON_AddArrayToObject(memory, "per_rank");
    for (int r = 0; r < world; r++) {
        cJSON* o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "rank", r);
        for (int f = 0; f < MEM_FIELDS; f++) { cJSON_AddNumberToObject(o, mem_names[f], mem[r * MEM_FIELDS + f]); }
        cJSON_AddItemToArray(arr, o);
    }
}

// comm: the bytes a rank sends per optimizer step as a ring algorithm moves them
// (allgather, reduce_scatter, allreduce) and the wait; transfers_per_step: the bytes
// moved between device and host and to and from NVMe (ZERO_MOVE_* order), and the
// AdamW update's time, wherever it ran
static void report_add_traffic(cJSON* root, const double* comm_per_step /* (4) */, const double* moved /* (ZERO_NUM_MOVES) */,
                               double update_ms) {
    cJSON* comm = cJSON_AddObjectToObject(root, "comm");
    cJSON* per = cJSON_AddObjectToObject(comm, "per_rank_bytes_per_step");
    cJSON_AddNumberToObject(per, "allgather", comm_per_step[0]);
    cJSON_AddNumberToObject(per, "reduce_scatter", comm_per_step[1]);
    cJSON_AddNumberToObject(per, "allreduce", comm_per_step[2]);
    cJSON_AddNumberToObject(comm, "wait_ms_per_step", comm_per_step[3]);
    cJSON* mv = cJSON_AddObjectToObject(root, "transfers_per_step");
    cJSON_AddNumberToObject(mv, "device_to_host", moved[ZERO_MOVE_D2H]);
    cJSON_AddNumberToObject(mv, "host_to_device", moved[ZERO_MOVE_H2D]);
    cJSON_AddNumberToObject(mv, "nvme_read", moved[ZERO_MOVE_NVME_READ]);
    cJSON_AddNumberToObject(mv, "nvme_write", moved[ZERO_MOVE_NVME_WRITE]);
    cJSON_AddNumberToObject(mv, "update_ms", update_ms);
}

// A checkpoint's data position means batches of its B, T, shuffle, accumulation and
// seed: a resume with others would read other data. Stops this rank's job, naming both.
static void checkpoint_check_data(const char* path, int B, int T, int shuffle, int grad_accum, uint64_t seed,
                                  const TrainConfig* tc, int run_accum) {
    int run_shuffle = tc->shuffle && !tc->overfit_single_batch;
    if (B == tc->B && T == tc->T && shuffle == run_shuffle && grad_accum == run_accum && seed == tc->seed) { return; }
    fprintf(stderr, "error: %s was saved with -b %d -t %d, %d accumulation steps, shuffle %d, --seed %llu; "
            "this run has -b %d -t %d, %d, %d, %llu: the data position would not mean the same batches\n",
            path, B, T, grad_accum, shuffle, (unsigned long long)seed,
            tc->B, tc->T, run_accum, run_shuffle, (unsigned long long)tc->seed);
    MPI_Abort(MPI_COMM_WORLD, 1);
}


// ----------------------------------------------------------------------------
// the ZeRO engine's side of a trainer (zero3/engine.h), shared by the CPU trainer and
// the GPU trainer's host-staged backend: the use schedule, the engine over a GPT-2, the
// check that all ranks run the same thing, and the sharded checkpoints

// The unit hooks: every parameter and gradient access goes through a ZeRO engine (the
// host's, zero3/engine.h, or the GPU's, zero3/device.cuh), which gathers (stage 3),
// releases and reduces units in the order of the schedule registered at its init. A
// failure there is a bug, a dead rank or a device error: stop every rank.
static void zero_fail(const char* file, int line) {
    fprintf(stderr, "error: %s [%s:%d]\n", llmc_errmsg(), file, line);
    MPI_Abort(MPI_COMM_WORLD, 1);
}
#define zeroCheck(rc) do { if ((rc) != 0) { zero_fail(__FILE__, __LINE__); } } while (0)

// The order in which the forward and backward use the units. Forward: the embedding,
// the blocks, the final layernorm, then the embedding again as the classifier (tied
// weights). Backward: the classifier (adjacent to its forward use, so never gathered
// twice there), the final layernorm, the blocks in reverse. The encoder's backward
// needs only the token ids, not wte, so it is not a use. Whether wte stays gathered
// from the encoder to the classifier is the engine's reuse-distance rule.
static int gpt2_schedule(const GPT2Config* c, int* out, int train) {
    int n = 0, L = c->num_layers;
    out[n++] = 0;
    for (int l = 0; l < L; l++) { out[n++] = 1 + l; }
    out[n++] = L + 1;
    out[n++] = 0;
    if (train) {
        out[n++] = 0;
        out[n++] = L + 1;
        for (int l = L - 1; l >= 0; l--) { out[n++] = 1 + l; }
    }
    return n;
}

// What either ZeRO engine (zero3/engine.h, zero3/device.cuh) is built from for GPT-2
// (llmc/gpt2.h): the units' sizes, the tensors (weight decay per tensor) and the two use
// schedules
typedef struct {
    int num_units, num_tensors, train_len, fwd_len;
    size_t* unit_numel;   // (num_units)
    ZeroTensor* tensors;  // (num_tensors)
    int* train;           // (train_len) a training micro-step's uses
    int* fwd;             // (fwd_len) a forward's uses
} GPT2EngineSpec;

static void gpt2_engine_spec(const GPT2Config* c, GPT2EngineSpec* s) {
    int nu = gpt2_num_units(c), nt = gpt2_num_tensors(c);
    s->num_units = nu;
    s->num_tensors = nt;
    s->unit_numel = (size_t*)mallocCheck(nu * sizeof(size_t));
    for (int u = 0; u < nu; u++) { s->unit_numel[u] = gpt2_unit_size(c, u); }
    TensorRange* ranges = (TensorRange*)mallocCheck(nt * sizeof(TensorRange));
    gpt2_tensor_ranges(c, ranges);
    s->tensors = (ZeroTensor*)mallocCheck(nt * sizeof(ZeroTensor));
    for (int i = 0; i < nt; i++) {
        ZeroTensor t = {ranges[i].unit, ranges[i].offset, ranges[i].size, ranges[i].decay};
        s->tensors[i] = t;
    }
    free(ranges);
    s->train = (int*)mallocCheck((2 * nu + 4) * sizeof(int));
    s->fwd = (int*)mallocCheck((2 * nu + 4) * sizeof(int));
    s->train_len = gpt2_schedule(c, s->train, 1);
    s->fwd_len = gpt2_schedule(c, s->fwd, 0);
}

static void gpt2_engine_spec_free(GPT2EngineSpec* s) {
    free(s->unit_numel); free(s->tensors); free(s->train); free(s->fwd);
    memset(s, 0, sizeof(*s));
}

// The host engine over GPT-2. params (unit order) are read on rank 0 and broadcast to
// the others.
static int gpt2_engine_init(ZeroEngine* z, const GPT2Config* c, const float* params, const ZeroConfig* zc,
                            MPI_Comm comm, float beta1, float beta2, float eps) {
    GPT2EngineSpec sp;
    gpt2_engine_spec(c, &sp);
    int rc = zero_engine_init(z, zc, comm, sp.unit_numel, sp.num_units, sp.tensors, sp.num_tensors,
                              sp.train, sp.train_len, sp.fwd, sp.fwd_len, params, beta1, beta2, eps);
    gpt2_engine_spec_free(&sp);
    return rc;
}

static float allreduce_mean(float x, int world) {
    mpiCheck(MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
    return x / world;
}

// ----------------------------------------------------------------------------
// evaluation between steps: the same loops in both trainers, with the model's part
// passed in as a function

// the mean loss of one (B, T) batch of inputs and targets on this rank
typedef float (*TrainerLossFn)(void* model, const int* inputs, const int* targets);
// the probabilities of the next token after tokens[0..t) (the real vocabulary's, in order)
typedef const float* (*TrainerProbsFn)(void* model, const int* tokens, int t);

// draws from probs (over the real vocabulary) with a uniform coin in [0, 1)
static int sample_token(const float* probs, int V, float coin) {
    float cdf = 0.0f;
    for (int i = 0; i < V; i++) {
        cdf += probs[i];
        if (coin < cdf) { return i; }
    }
    return V - 1;  // rounding: the cdf may end a hair below 1
}

// -v: at the steps it asks for and the last, the validation loss (mean over the batches
// and the ranks), printed by rank 0, logged to main.log and recorded
static void trainer_validate(const TrainConfig* tc, int step, int last_step, int rank, int world,
                             DataLoader* val, int val_steps, TrainerLossFn loss, void* model,
                             ValRecord* vals, int* nvals) {
    if (tc->val_every <= 0 || (step % tc->val_every != 0 && !last_step)) { return; }
    dataloader_reset(val);
    double sum = 0.0;
    for (int i = 0; i < val_steps; i++) {
        llmcCheck(dataloader_next_batch(val));
        sum += loss(model, val->inputs, val->targets);
    }
    float val_loss = allreduce_mean((float)(sum / val_steps), world);
    if (rank == 0) { printf("val loss %f\n", val_loss); }
    log_line(tc->output_dir, rank, "s:%d tel:%f\n", step, val_loss);
    ValRecord r = {step, val_loss};
    vals[(*nvals)++] = r;
}

// -s: at the steps it asks for (not 0) and the last, a sample of -g tokens from start_token,
// one forward over the prefix per token. Every rank samples the same tokens from the same
// RNG (at stage 3 a forward needs every rank's shards); rank 0 prints them, decoded when
// tok is not NULL.
static void trainer_sample(const TrainConfig* tc, int step, int last_step, int rank, int vocab_size, int start_token,
                           const Tokenizer* tok, Rng* rng, TrainerProbsFn probs, void* model) {
    if (tc->sample_every <= 0 || !((step > 0 && step % tc->sample_every == 0) || last_step)) { return; }
    int gen_max = tc->gen_T < tc->T ? tc->gen_T : tc->T;
    int* tokens = (int*)mallocCheck((size_t)gen_max * sizeof(int));
    tokens[0] = start_token;
    if (rank == 0) { printf("generating:\n---\n"); }
    for (int t = 1; t < gen_max; t++) {
        const float* p = probs(model, tokens, t);
        int next = sample_token(p, vocab_size, rng_float(rng));
        tokens[t] = next;
        if (rank != 0) { continue; }
        const char* piece = tok != NULL ? tokenizer_decode(tok, (uint32_t)next) : NULL;
        if (piece != NULL) { fputs(piece, stdout); } else { printf("<%d>", next); }
        fflush(stdout);
    }
    if (rank == 0) { printf("\n---\n"); }
    free(tokens);
}

// FNV-1a over bytes, chained: for the check that every rank runs the same thing
static uint64_t hash_bytes(uint64_t h, const void* data, size_t n) {
    const unsigned char* p = (const unsigned char*)data;
    for (size_t i = 0; i < n; i++) { h = (h ^ p[i]) * 0x100000001B3ull; }
    return h;
}

// Every rank must run the same configuration and model, or the collectives would
// pair up wrong. Each rank hashes what must agree; all compare with rank 0's and each
// that differs says what differs.
static void check_ranks_agree(const TrainConfig* tc, const GPT2Config* c, long total_batch, int rank, int world) {
    uint64_t h[3];
    h[0] = zero_config_hash(&tc->zero);
    uint64_t t = 0xcbf29ce484222325ull;
    t = hash_bytes(t, &tc->B, sizeof(tc->B));
    t = hash_bytes(t, &tc->T, sizeof(tc->T));
    t = hash_bytes(t, &total_batch, sizeof(total_batch));
    t = hash_bytes(t, &tc->lr, sizeof(tc->lr));
    t = hash_bytes(t, &tc->weight_decay, sizeof(tc->weight_decay));
    t = hash_bytes(t, &tc->grad_clip, sizeof(tc->grad_clip));
    t = hash_bytes(t, &tc->seed, sizeof(tc->seed));
    t = hash_bytes(t, &tc->max_steps, sizeof(tc->max_steps));
    t = hash_bytes(t, &tc->overfit_single_batch, sizeof(tc->overfit_single_batch));
    t = hash_bytes(t, &tc->shuffle, sizeof(tc->shuffle));
    t = hash_bytes(t, &tc->val_every, sizeof(tc->val_every));
    t = hash_bytes(t, &tc->sample_every, sizeof(tc->sample_every));
    t = hash_bytes(t, &tc->checkpoint_every, sizeof(tc->checkpoint_every));
    // the GPU trainer's: a rank on another backend or with a delayed update would issue
    // other collectives
    t = hash_bytes(t, tc->zero_backend, strlen(tc->zero_backend));
    t = hash_bytes(t, &tc->dpu, sizeof(tc->dpu));
    h[1] = t;
    h[2] = hash_bytes(0xcbf29ce484222325ull, c, sizeof(*c));
    uint64_t h0[3] = {h[0], h[1], h[2]};
    mpiCheck(MPI_Bcast(h0, 3, MPI_UINT64_T, 0, MPI_COMM_WORLD));
    static const char* const what[3] = {"ZeRO configuration (-z, --ds-config, ZeRO flags)",
                                        "training flags (-b -t -d -l -c -x -a -v -s -n --seed --grad-clip --shuffle --zero-backend --dpu)",
                                        "model shape (-e)"};
    int bad = 0;
    for (int i = 0; i < 3; i++) {
        if (h[i] != h0[i]) {
            fprintf(stderr, "error: rank %d of %d runs a different %s than rank 0\n", rank, world, what[i]);
            bad = 1;
        }
    }
    mpiCheck(MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    if (bad) {
        if (rank == 0) { fprintf(stderr, "error: the ranks disagree (see above); every rank must get the same flags and files\n"); }
        MPI_Finalize();
        exit(EXIT_FAILURE);
    }
}

// checkpoints: llm.c's model_%08d.bin plus state_%08d_%05d.bin per rank and a DONE
// marker written last, so a checkpoint without its marker is never resumed from

#define STATE_MAGIC 20240327
#define STATE_VERSION 2

typedef struct {
    int32_t magic, version, rank, world_size, step, zero_stage;
    uint64_t num_params, state_bytes, sample_rng;
    DataLoaderState loader;
    // what the data position means: a resume must read the data the same way
    int32_t B, T, shuffle, grad_accum;
    uint64_t seed;
} StateHeader;

// Each rank writes its own state file (its ZeRO shards, AdamW moments, the dataloader
// position, the sampler RNG) under a temporary name and renames it; rank 0 also writes
// the llm.c model file, gathered from the shards; the DONE marker comes last, after a
// barrier, so a checkpoint is resumed from only when every file of it is complete.
static void checkpoint_save_zero(const char* dir, int step, ZeroEngine* z, const GPT2Config* config, size_t num_params, int rank, int world, uint64_t sample_rng,
                            const DataLoader* loader, const TrainConfig* tc, int grad_accum) {
    char path[4096], tmp[4200];
    float* full = rank == 0 ? (float*)mallocCheck(num_params * sizeof(float)) : NULL;
    zeroCheck(zero_params_gather(z, full, 0));
    if (rank == 0) {
        snprintf(path, sizeof(path), "%s/model_%08d.bin", dir, step);
        if (gpt2_write_model(path, config, full) != 0) {  // nothing of this checkpoint counts: no DONE marker
            fprintf(stderr, "error: checkpoint at step %d not saved: %s\n", step, llmc_errmsg());
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        free(full);
    }
    StateHeader h = {STATE_MAGIC, STATE_VERSION, rank, world, step, z->stage,
                     num_params, zero_state_bytes(z), sample_rng, {0, 0, 0},
                     tc->B, tc->T, tc->shuffle && !tc->overfit_single_batch, grad_accum, tc->seed};
    dataloader_get_state(loader, &h.loader);
    snprintf(path, sizeof(path), "%s/state_%08d_%05d.bin", dir, step, rank);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE* fp = fopen(tmp, "wb");
    int ok = fp != NULL && fwrite(&h, sizeof(h), 1, fp) == 1 && zero_state_write(z, fp) == 0;
    int err = errno;
    if (fp != NULL && fclose(fp) != 0 && ok) { ok = 0; err = errno; }
    if (!ok || rename(tmp, path) != 0) {
        if (ok) { err = errno; }
        remove(tmp);
        fprintf(stderr, "error: rank %d cannot write checkpoint %s: %s\n", rank, path, strerror(err));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    mpiCheck(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == 0) {
        snprintf(path, sizeof(path), "%s/DONE_%08d", dir, step);
        FILE* done = fopenCheck(path, "w");
        fclose(done);
    }
}

static void checkpoint_load_zero(const char* dir, int step, ZeroEngine* z, size_t num_params, int rank, int world, uint64_t* sample_rng,
                                  DataLoaderState* loader, const TrainConfig* tc, int grad_accum) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/state_%08d_%05d.bin", dir, step, rank);
    FILE* fp = fopen(path, "rb");
    StateHeader h;
    if (fp == NULL || fread(&h, sizeof(h), 1, fp) != 1) {
        fprintf(stderr, "error: rank %d cannot read checkpoint state %s: %s\n", rank, path, fp ? "truncated header" : strerror(errno));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (h.magic != STATE_MAGIC || h.version != STATE_VERSION) {
        fprintf(stderr, "error: %s is not a train_gpt2_zero3 state file (magic %d, version %d)\n", path, h.magic, h.version);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (h.world_size != world || h.rank != rank || h.zero_stage != z->stage ||
        h.num_params != num_params || h.step != step || h.state_bytes != zero_state_bytes(z)) {
        fprintf(stderr, "error: %s was saved by rank %d of %d at ZeRO stage %d for %llu parameters at step %d; "
                "this run is rank %d of %d at stage %d with %zu parameters (resuming needs the same ranks, stage and model)\n",
                path, h.rank, h.world_size, h.zero_stage, (unsigned long long)h.num_params, h.step,
                rank, world, z->stage, num_params);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    checkpoint_check_data(path, h.B, h.T, h.shuffle, h.grad_accum, h.seed, tc, grad_accum);
    if (zero_state_read(z, fp) != 0) {
        fprintf(stderr, "error: %s: %s\n", path, llmc_errmsg());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    fclose(fp);
    *sample_rng = h.sample_rng;
    *loader = h.loader;
}


#endif // LLMC_TRAINER_H
