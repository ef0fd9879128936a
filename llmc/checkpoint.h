/*
 Checkpoints, the trainer's side: which files, in which order, and what a resume checks.
 (The engine's shards are the engine's business: zero3/checkpoint.h.) In the output
 directory, at step S (8 digits) for rank R (5 digits):

   model_S.bin     llm.c's model file of the fp32 master (version 3, or with
                   --save-bf16 1 version 5 in bf16), every rank writing its own part
                   (checkpoint_write_model), loadable with -e by either trainer or by llm.c
   state_S_R.bin   CheckpointHeader (below): the step, where the data loader and the
                   sampler are, and what that position means (B, T, accumulation, shuffle,
                   seed); then the engine's section (its shards, AdamW moments, compute copy)
   DONE_S          the manifest (below), written by rank 0 last, once every rank's files
                   are complete and on disk

 Every file is written whole or not at all (AtomicFile: fsync'ed, renamed, its directory
 fsync'ed), and a checkpoint without its DONE marker is never resumed from. The marker is
 the checkpoint's manifest, every file's size and CRC32C (llmc/manifest.h, which also says
 which markers are trusted). A resume verifies every file against it first (the ranks
 share the work) and falls back to the newest checkpoint that passes, saying why the newer
 ones failed (checkpoint_find_valid). --keep-checkpoints counts only checkpoints that pass
 too, and sets the damaged ones aside (checkpoint_prune).

 A resume at the same number of ranks and stage reads its own rank's file
 (checkpoint_load). At another world size or ZeRO stage (checkpoint_resume) each rank
 rebuilds the engine section its engine would have saved from the byte ranges it needs of
 every old rank's file (zero3/reshard.h), and the data position is converted when it can
 mean the same batches (checkpoint_convert_position). An engine section of an older
 version (version 1: shards padded to 64 bytes, zero3/checkpoint.h) goes the same way at
 any layout: rebuilt in the current padding. The backend (host or device layout)
 and the precision must stay; everything else that cannot carry over is refused with a
 message that names both sides.
*/
#ifndef LLMC_CHECKPOINT_H
#define LLMC_CHECKPOINT_H

#include <stdio.h>            // FILE: CheckpointSet's files
#include <stdint.h>           // int32_t, uint64_t
#include "llmc/gpt2.h"        // GPT2Config, gpt2_unit_parts, gpt2_fwrite_header, gpt2_pwrite_params: the model file by parts
#include "llmc/dataloader.h"  // DataLoaderState
#include "zero3/reshard.h"    // ZeroStateSource, zero_reshard_write: a resume at another world size or stage
#include <stddef.h>           // size_t
typedef struct Zero Zero;  // the engine, by pointer (zero3/zero.h)

#ifdef __cplusplus
extern "C" {
#endif

#define CHECKPOINT_MAGIC 20241124
#define CHECKPOINT_VERSION 1

typedef struct {
    int32_t magic, version, rank, world_size, step;
    int32_t skipped;               // optimizer steps skipped before `step` (non-finite): AdamW's t is step - skipped
    uint64_t num_params;
    uint64_t sample_rng;           // the sampler's RNG state
    DataLoaderState loader;        // the training loader's position
    // what the data position means: a resume must read the data the same way
    int32_t B, T, shuffle, grad_accum;
    uint64_t seed;
} CheckpointHeader;

// Agrees on the outcome of one stage of a save, which every rank makes with its own `ok`:
// when any rank failed, every rank returns -1 with llmc_errmsg() naming the first rank that
// failed and its message (sent from it), so that every rank stops alike, saying why.
// Returns 0 when every rank succeeded. Being an all-reduce, it also keeps any rank from
// starting the next stage before every rank has finished this one.
int checkpoint_agree(int ok, int rank, int step);

// Writes the checkpoint of step h->step: the model file (every rank its part of the
// master, checkpoint_write_model), every rank's state file, then the DONE marker.
// Collective: every rank calls it. A marker of the same step left by an earlier run goes
// first, so that files being replaced never count as complete. Returns 0, or -1 on every
// rank with llmc_errmsg() naming the first rank that failed and why (the engine's failures
// carry zero_errmsg()); then no marker is written and no earlier checkpoint is touched.
int checkpoint_save(const char* dir, const CheckpointHeader* h, Zero* z, const GPT2Config* config, int model_version);

// A resume's search (collective: every rank calls it): the newest checkpoint of dir whose
// manifest and files all pass their checks, every rank checking its share of the files.
// Prints, from rank 0, why each newer one was passed over, and a warning for an empty
// marker taken unverified (allow_unverified). Returns its step, -1 when dir holds no DONE
// marker, or -2 when it holds some but none passes (the messages say why).
int checkpoint_find_valid(const char* dir, int rank, int world, int allow_unverified);

// --keep-checkpoints K after the save of step `saved` (collective: every rank calls it).
// Only checkpoints that pass their checks count: `saved` (its checksums were just read
// back from its files), then the others newest first, verified by the ranks together,
// until K are kept; every checkpoint after those is removed, marker first. One that fails
// its checks before then is set aside into DIR/damaged_S and said so, never kept in the
// place of a good one; an empty marker taken unverified (allow_unverified) is left where
// it is, uncounted; one beyond the K whose step is a multiple of `major` (> 0: llm.c's
// -nm) stays. The ranks read at most the K - 1 kept checkpoints besides `saved`.
// Returns 0, or -1 with llmc_errmsg() naming what could not be removed or moved (rank 0).
int checkpoint_prune(const char* dir, int keep, int major, int saved, int allow_unverified, int rank, int world);

// Reads this rank's state file of `step` into the engine and *got (the sampler and the
// loader positions), after checking it against `want` (this run's rank, world, model
// size and data settings). Returns 0, or -1 with llmc_errmsg() naming the file.
int checkpoint_load(const char* dir, int step, const CheckpointHeader* want, Zero* z, CheckpointHeader* got);

// ----------------------------------------------------------------------------
// every rank's files of one checkpoint: resuming anywhere, and dev/checkpoint_tool.c

// the path of rank's state file of step in dir (n bytes)
void checkpoint_state_path(char* path, size_t n, const char* dir, int step, int rank);

// One checkpoint's state files, open together: each rank's trainer header, and the engine
// sections as one source. The world size is the one rank 0's header names.
typedef struct {
    int world, num_units;
    FILE** fp;              // (world)
    char** names;           // (world) the files' paths
    CheckpointHeader* h;    // (world)
    size_t* unit_numel;     // (num_units) the model's units, as the engine's plan takes them
    ZeroStateSource src;
} CheckpointSet;

// closes and frees a CheckpointSet (safe on one that failed to open)
void checkpoint_set_close(CheckpointSet* s);

// Opens every state file of `step` in dir (as many as rank 0's header says) for a model of
// config c, and checks that they belong together. Returns 0, or -1 naming the file.
int checkpoint_set_open(CheckpointSet* s, const char* dir, int step, const GPT2Config* c);

// Resumes this rank from the checkpoint of `step` in dir, whatever world size and ZeRO
// stage saved it: at the same ranks, stage, -b and accumulation, from an engine section of
// the current version, it is checkpoint_load;
// otherwise this rank's engine section is rebuilt from the old ranks' files into a
// temporary file in dir (unlinked at once; this rank's own state, never the model's
// unless this rank holds all of it) and loaded from there, and the data position
// converted. *got: rank 0's header (the sampler's RNG), the converted position, the old
// world size. `stage` is this run's. Returns 0, or -1 with llmc_errmsg().
int checkpoint_resume(const char* dir, int step, const CheckpointHeader* want, int stage, const GPT2Config* c, Zero* z,
                             CheckpointHeader* got);

#ifdef __cplusplus
}
#endif

#endif // LLMC_CHECKPOINT_H
