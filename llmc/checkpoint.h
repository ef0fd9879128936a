/*
 Checkpoints, the trainer's side: which files, in which order, and what a resume checks.
 (The engine's shards are the engine's business: zero3/checkpoint.h.) In the output
 directory, at step S (8 digits) for rank R (5 digits):

   model_S.bin     llm.c's model file of the fp32 master (version 3, or with
                   --save-bf16 1 version 5 in bf16), written by rank 0 and loadable with
                   -e by either trainer or by llm.c
   state_S_R.bin   CheckpointHeader (below): the step, where the data loader and the
                   sampler are, and what that position means (B, T, accumulation, shuffle,
                   seed); then the engine's section (its shards, AdamW moments, compute copy)
   DONE_S          empty, written by rank 0 last, once every rank's files are complete

 Every file is written whole or not at all (AtomicFile), and a checkpoint without its
 DONE marker is never resumed from. A resume needs the same number of ranks, backend,
 stage and precision (the engine's section says which wrote it) and the same data
 position's meaning; everything else is refused with a message that names both sides.
*/
#ifndef LLMC_CHECKPOINT_H
#define LLMC_CHECKPOINT_H

#include <stdio.h>            // snprintf, fread, fwrite
#include <stdint.h>           // int32_t, uint64_t
#include <string.h>           // memset
#include <errno.h>            // errno
#include <dirent.h>           // opendir: the DONE markers
#include <mpi.h>              // MPI_Barrier: every rank's file before the marker
#include "llmc/utils.h"       // llmc_error, AtomicFile
#include "llmc/gpt2.h"        // GPT2Config, gpt2_write_model_version
#include "llmc/dataloader.h"  // DataLoaderState
#include "zero3/zero.h"       // Zero: the engine's state and its master
#include "zero3/watchdog.h"   // zero_watch_enter/leave: the barriers told to --collective-timeout's watchdog

#define CHECKPOINT_MAGIC 20241124
#define CHECKPOINT_VERSION 1

typedef struct {
    int32_t magic, version, rank, world_size, step, pad;
    uint64_t num_params;
    uint64_t sample_rng;           // the sampler's RNG state
    DataLoaderState loader;        // the training loader's position
    // what the data position means: a resume must read the data the same way
    int32_t B, T, shuffle, grad_accum;
    uint64_t seed;
} CheckpointHeader;

// the latest step with a DONE marker in dir, or -1
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

// Writes the checkpoint of step h->step: the model file (rank 0, from the engine's master,
// gathered), every rank's state file, then the DONE marker. Collective: every rank calls
// it. A marker of the same step left by an earlier run goes first, so that files being
// replaced never count as complete. Returns 0, or -1 with llmc_errmsg() (the engine's
// failures carry zero_errmsg()).
static int checkpoint_save(const char* dir, const CheckpointHeader* h, Zero* z, const GPT2Config* config, int model_version) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/DONE_%08d", dir, h->step);
    if (h->rank == 0 && remove(path) != 0 && errno != ENOENT) {
        return llmc_error("checkpoint at step %d: cannot remove the old marker %s: %s", h->step, path, strerror(errno));
    }
    zero_watch_enter("barrier before the checkpoint", -1);
    int brc = MPI_Barrier(MPI_COMM_WORLD);
    zero_watch_leave();
    if (brc != MPI_SUCCESS) { return llmc_error("checkpoint at step %d: the barrier failed", h->step); }
    float* full = h->rank == 0 ? (float*)malloc(h->num_params * sizeof(float)) : NULL;
    if (h->rank == 0 && full == NULL) { return llmc_error("checkpoint at step %d: out of memory for the model", h->step); }
    if (zero_gather(z, full) != 0) { free(full); return llmc_error("checkpoint at step %d: %s", h->step, zero_errmsg()); }
    if (h->rank == 0) {
        snprintf(path, sizeof(path), "%s/model_%08d.bin", dir, h->step);
        int rc = gpt2_write_model_version(path, config, full, model_version);
        free(full);
        if (rc != 0) { return -1; }  // no DONE marker: nothing of this checkpoint counts
    }
    snprintf(path, sizeof(path), "%s/state_%08d_%05d.bin", dir, h->step, h->rank);
    AtomicFile f;
    if (atomic_open(&f, path) != 0) { return -1; }
    if (fwrite(h, sizeof(*h), 1, f.fp) != 1) { return atomic_commit(&f, 0); }
    if (zero_save(z, f.fp) != 0) {
        atomic_abort(&f);
        return llmc_error("%s: %s", path, zero_errmsg());
    }
    if (atomic_commit(&f, 1) != 0) { return -1; }
    zero_watch_enter("barrier after the checkpoint's files", -1);
    brc = MPI_Barrier(MPI_COMM_WORLD);
    zero_watch_leave();
    if (brc != MPI_SUCCESS) { return llmc_error("checkpoint at step %d: the barrier failed", h->step); }
    if (h->rank == 0) {
        snprintf(path, sizeof(path), "%s/DONE_%08d", dir, h->step);
        if (atomic_open(&f, path) != 0 || atomic_commit(&f, 1) != 0) { return -1; }
    }
    return 0;
}

// Reads this rank's state file of `step` into the engine and *got (the sampler and the
// loader positions), after checking it against `want` (this run's rank, world, model
// size and data settings). Returns 0, or -1 with llmc_errmsg() naming the file.
static int checkpoint_load(const char* dir, int step, const CheckpointHeader* want, Zero* z, CheckpointHeader* got) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/state_%08d_%05d.bin", dir, step, want->rank);
    FILE* fp = fopen(path, "rb");
    if (fp == NULL) { return llmc_error("cannot read checkpoint state %s: %s", path, strerror(errno)); }
    CheckpointHeader h;
    int rc = -1;
    if (fread(&h, sizeof(h), 1, fp) != 1) {
        llmc_error("checkpoint state %s: truncated header", path);
    } else if (h.magic != CHECKPOINT_MAGIC || h.version != CHECKPOINT_VERSION) {
        llmc_error("%s is not a train_gpt2_zero3 state file of this version (magic %d, version %d; expected %d, %d)",
                   path, h.magic, h.version, CHECKPOINT_MAGIC, CHECKPOINT_VERSION);
    } else if (h.world_size != want->world_size || h.rank != want->rank || h.num_params != want->num_params || h.step != step) {
        llmc_error("%s was saved by rank %d of %d for %llu parameters at step %d; this run is rank %d of %d with %llu "
                   "parameters (resuming needs the same ranks and model)", path, h.rank, h.world_size,
                   (unsigned long long)h.num_params, h.step, want->rank, want->world_size, (unsigned long long)want->num_params);
    } else if (h.B != want->B || h.T != want->T || h.shuffle != want->shuffle || h.grad_accum != want->grad_accum || h.seed != want->seed) {
        llmc_error("%s was saved with -b %d -t %d, %d accumulation steps, shuffle %d, --seed %llu; this run has -b %d -t %d, "
                   "%d, %d, %llu: the data position would not mean the same batches", path, h.B, h.T, h.grad_accum, h.shuffle,
                   (unsigned long long)h.seed, want->B, want->T, want->grad_accum, want->shuffle, (unsigned long long)want->seed);
    } else if (zero_load(z, fp) != 0) {
        llmc_error("%s: %s", path, zero_errmsg());
    } else {
        *got = h;
        rc = 0;
    }
    fclose(fp);
    return rc;
}

#endif // LLMC_CHECKPOINT_H
