/*
 A checkpoint's DONE marker, the manifest: which checkpoints of a directory are complete,
 which can be trusted, and how the others are retired (llmc/checkpoint.h writes and reads
 the files themselves). At step S (8 digits), rank R (5 digits), a checkpoint directory
 holds DONE_S, model_S.bin and state_S_R.bin, each perhaps with AtomicFile's ".tmp" after
 it while being written; no other name is a checkpoint's (checkpoint_name_parse).

 The marker is text, versioned and checksummed:

   train_gpt2_zero3 checkpoint manifest 1
   step 8
   world 2
   file model_00000008.bin 29360384 1f0e8c3a     (name, size in bytes, CRC32C in hex)
   file state_00000008_00000.bin 14680832 9c1d33e0
   file state_00000008_00001.bin 14680832 02ab7d51
   crc32c 5d0c8e11                               (of every byte above this line)

 Only a checkpoint whose marker is such a manifest and whose every file has the size and
 checksum it lists is verified (checkpoint_verify). A marker that is not a regular file
 (a directory, a symlink) is nobody's manifest: never trusted. An empty marker is either
 an earlier version's (written before checksums) or one that a crash or a hand cut short:
 nothing tells them apart, so it is trusted only when the user says so
 (allow_unverified: the trainer's --allow-unverified 1, checkpoint_tool's --allow-unverified).

 Retiring: a checkpoint is removed, or set aside into DIR/damaged_S (checkpoint_retire),
 marker first, so that one half retired never counts as complete; its files are found by
 name in the directory, never from the manifest's list (a damaged manifest could name any
 file).
*/
#ifndef LLMC_MANIFEST_H
#define LLMC_MANIFEST_H

#include <stdint.h>           // uint32_t, uint64_t
#include <stddef.h>           // size_t

#ifdef __cplusplus
extern "C" {
#endif

#define CHECKPOINT_MANIFEST_VERSION 1
#define CHECKPOINT_MANIFEST_TITLE "train_gpt2_zero3 checkpoint manifest"

typedef struct {
    char name[64];     // a file in the checkpoint's directory: model_S.bin or state_S_R.bin
    uint64_t size;
    uint32_t crc;
} ManifestFile;

typedef struct {
    int version;       // CHECKPOINT_MANIFEST_VERSION, or 0: an empty DONE_S, accepted unverified
    int step, world, nfiles;
    ManifestFile* files;  // (nfiles): the model file, then state file of rank 0, 1, ...
} CheckpointManifest;

// frees what checkpoint_manifest_read allocated in m
void checkpoint_manifest_free(CheckpointManifest* m);

// ----------------------------------------------------------------------------
// the names of a checkpoint's files

enum { CHECKPOINT_FILE_NONE, CHECKPOINT_FILE_DONE, CHECKPOINT_FILE_MODEL, CHECKPOINT_FILE_STATE };

// What a name in a checkpoint directory is: DONE_SSSSSSSS, model_SSSSSSSS.bin or
// state_SSSSSSSS_RRRRR.bin, exactly as the writer spells them (8 and 5 decimal digits),
// each perhaps with ".tmp" after it (*tmp = 1: a file being written, or a crash's
// leftover). Returns the kind, with *step and *rank (-1 but for a state file), or
// CHECKPOINT_FILE_NONE for any other name ("DONE_-1", "model_12.bin", "main.log").
int checkpoint_name_parse(const char* name, int* step, int* rank, int* tmp);

// the steps with a DONE marker in dir (whatever the marker is), newest first, into *steps
// (malloc'ed; the caller frees it); returns how many, 0 when none or dir cannot be read
int checkpoint_steps(const char* dir, int** steps);

// ----------------------------------------------------------------------------
// reading and checking a manifest

// Reads and checks DONE_S of dir: a regular file, its title and version, its own checksum,
// the step it names, every line's form, the checkpoint's own file names. Returns 0, or -1
// with llmc_errmsg() naming the marker and the first thing wrong. An empty marker gives
// version 0 and no files when allow_unverified, else it is refused as unverifiable.
int checkpoint_manifest_read(const char* dir, int step, int allow_unverified, CheckpointManifest* m);

// Checks the files i = first, first + stride, ... of the manifest against their sizes and
// checksums (so that the ranks of a job share the reading: first = rank, stride =
// world). Returns 0, or -1 with llmc_errmsg() naming the first file that fails.
int checkpoint_manifest_check(const char* dir, const CheckpointManifest* m, int first, int stride);

// What checkpoint_verify found
enum { CHECKPOINT_VERIFIED = 0, CHECKPOINT_UNVERIFIED = 1, CHECKPOINT_BAD_MARKER = -1, CHECKPOINT_BAD_FILE = -2 };

// Verifies the checkpoint of `step` in dir: its marker (checkpoint_manifest_read) and the
// files first, first + stride, ... of it (checkpoint_manifest_check; a job's ranks share
// them). Returns CHECKPOINT_VERIFIED; CHECKPOINT_UNVERIFIED for an empty marker taken
// unverified (allow_unverified); or, with llmc_errmsg() saying why, CHECKPOINT_BAD_MARKER
// (the same for every caller: one of them says it) or CHECKPOINT_BAD_FILE.
int checkpoint_verify(const char* dir, int step, int first, int stride, int allow_unverified);

// ----------------------------------------------------------------------------
// writing a manifest

// Writes DONE_S: the manifest of the world + 1 files whose sizes and checksums are given,
// through AtomicFile (fsync'ed, and its directory). Returns 0 or -1 with llmc_errmsg().
int checkpoint_manifest_write(const char* dir, int step, int world, const uint64_t* size_crc);

// The size and checksum of a file just written, as two uint64 (the manifest's pair).
int checkpoint_file_sum(const char* path, uint64_t* pair);

// ----------------------------------------------------------------------------
// retiring a checkpoint: removed, or set aside

// Retires the checkpoint of `step` in dir: removes it, or with set_aside moves it into a
// new directory DIR/damaged_S (damaged_S.2, ... when taken), whose path goes to `aside`
// (n bytes; "" when removed). The marker goes first and the directory is synced, so that
// a checkpoint half retired is never complete; then the step's model and state files and
// their temporaries, found by name. A marker that is no regular file (a directory someone
// made) is never removed: that checkpoint is set aside whatever was asked. Returns 0, or
// -1 with llmc_errmsg() naming what could not be moved or removed.
int checkpoint_retire(const char* dir, int step, int set_aside, char* aside, size_t n);

#ifdef __cplusplus
}
#endif

#endif // LLMC_MANIFEST_H
