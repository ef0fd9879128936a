/*
 Host-side pieces shared by the two trainers (train_gpt2_zero3.c and .cu): the MPI
 checked wrapper, timing, stopping every rank on a start-up error, llm.c's main.log,
 finding the latest complete checkpoint, and the batch arithmetic (-d, DeepSpeed's
 batch keys from --ds-config, or B*T*ranks).
*/
#ifndef LLMC_TRAINER_H
#define LLMC_TRAINER_H

#include <stdio.h>        // fprintf, snprintf, sscanf
#include <stdlib.h>       // exit
#include <time.h>         // clock_gettime
#include <dirent.h>       // opendir: the DONE markers
#include <mpi.h>          // MPI_Abort, MPI_Finalize
#include "llmc/utils.h"   // fopenCheck, llmc_errmsg
#include "llmc/args.h"    // TrainConfig
#include "zero3/config.h" // zero_config_resolve_batch

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

#endif // LLMC_TRAINER_H
