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
#include "zero3/config.h" // zero_config_resolve_batch
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

#endif // LLMC_TRAINER_H
