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
 fsync'ed), and a checkpoint without its DONE marker is never resumed from. The manifest
 is text, versioned and checksummed:

   train_gpt2_zero3 checkpoint manifest 1
   step 8
   world 2
   file model_00000008.bin 29360384 1f0e8c3a     (name, size in bytes, CRC32C in hex)
   file state_00000008_00000.bin 14680832 9c1d33e0
   file state_00000008_00001.bin 14680832 02ab7d51
   crc32c 5d0c8e11                               (of every byte above this line)

 A resume verifies every file against it first (the ranks share the work) and falls back
 to the newest checkpoint that passes, saying why the newer ones failed. An empty DONE_S
 is a checkpoint of an earlier version, without checksums: resumed, with a warning.

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

#include <stdio.h>            // snprintf, fread, fwrite
#include <stdint.h>           // int32_t, uint64_t
#include <string.h>           // memset
#include <errno.h>            // errno
#include <limits.h>           // LONG_MAX: the payload's size before it is added to an offset; INT_MAX: no rank failed
#include <dirent.h>           // opendir: the DONE markers
#include <sys/stat.h>         // fstat: the manifest's size
#include <unistd.h>           // unlink: the resharded section's temporary file; ftruncate, fsync, close: the model file
#include <fcntl.h>            // open: the model file's temporary, on the ranks other than 0
#include <mpi.h>              // MPI_Gather: every rank's checksum before the marker; the shared check
#include <stdlib.h>           // malloc
#include "llmc/utils.h"       // llmc_error, AtomicFile
#include "zero3/crc32c.h"     // crc32c_file, crc32c_update: the manifest's checksums
#include "llmc/gpt2.h"        // GPT2Config, gpt2_unit_parts, gpt2_fwrite_header, gpt2_pwrite_params: the model file by parts
#include "llmc/dataloader.h"  // DataLoaderState
#include "zero3/zero.h"       // Zero: the engine's state; zero_master_shard: this rank's range of the master
#include "zero3/watchdog.h"   // zero_watch_enter/leave: the save's agreements and the checksums' gather told to --collective-timeout's watchdog
#include "zero3/plan.h"       // ZERO_PLAN_MAX_WORLD: the manifest's bound on ranks
#include "zero3/reshard.h"    // ZeroStateSource, zero_reshard_write: a resume at another world size or stage
#include "zero3/checkpoint.h" // ZeroStateHeader: the engine section's size, checked against the file's

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

#define CHECKPOINT_MANIFEST_VERSION 1
#define CHECKPOINT_MANIFEST_TITLE "train_gpt2_zero3 checkpoint manifest"

typedef struct {
    char name[64];     // a file in the checkpoint's directory, no '/'
    uint64_t size;
    uint32_t crc;
} ManifestFile;

typedef struct {
    int version;       // CHECKPOINT_MANIFEST_VERSION, or 0: an empty DONE_S of an earlier version
    int step, world, nfiles;
    ManifestFile* files;  // (nfiles): the model file, then state file of rank 0, 1, ...
} CheckpointManifest;

static void checkpoint_manifest_free(CheckpointManifest* m) {
    free(m->files);
    memset(m, 0, sizeof(*m));
}

// the steps with a DONE marker in dir, newest first, into *steps (malloc'ed; the caller
// frees it); returns how many, 0 when none or dir cannot be read
static int checkpoint_steps(const char* dir, int** steps) {
    *steps = NULL;
    DIR* d = opendir(dir);
    if (d == NULL) { return 0; }
    int n = 0, cap = 0;
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        int s;
        char tail;
        if (sscanf(e->d_name, "DONE_%8d%c", &s, &tail) != 1 || s < 0 || strlen(e->d_name) != 13) { continue; }
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            int* grown = (int*)realloc(*steps, cap * sizeof(int));
            if (grown == NULL) { break; }
            *steps = grown;
        }
        (*steps)[n++] = s;
    }
    closedir(d);
    for (int i = 1; i < n; i++) {  // newest first (insertion sort: a run keeps few)
        int v = (*steps)[i], j = i - 1;
        for (; j >= 0 && (*steps)[j] < v; j--) { (*steps)[j + 1] = (*steps)[j]; }
        (*steps)[j + 1] = v;
    }
    return n;
}

// Parses the manifest text (len bytes, NUL-terminated; modified in place) of `path` into
// m, whose files the caller frees whatever the result. Returns 0, or -1 with llmc_errmsg()
// naming the marker and the first thing wrong.
static int checkpoint_manifest_parse(const char* path, char* text, size_t len, int step, CheckpointManifest* m) {
    if (strlen(text) != len) { return llmc_error("checkpoint manifest %s: a NUL byte at offset %zu", path, strlen(text)); }
    // the last line is "crc32c X" over every byte before it
    if (text[len - 1] != '\n') { return llmc_error("checkpoint manifest %s: truncated (no final newline)", path); }
    text[len - 1] = '\0';
    char* last = strrchr(text, '\n');
    unsigned crc_want;
    char extra;
    if (last == NULL || sscanf(last + 1, "crc32c %8x%c", &crc_want, &extra) != 1) {
        return llmc_error("checkpoint manifest %s: no checksum line at its end (truncated or not a manifest)", path);
    }
    uint32_t crc = crc32c_update(0, text, (size_t)(last + 1 - text));
    if (crc != crc_want) {
        return llmc_error("checkpoint manifest %s: checksum %08x, but its contents give %08x (the marker is damaged)", path,
                          crc_want, crc);
    }
    *last = '\0';
    int line_no = 0;
    for (char* line = strtok(text, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        line_no++;
        int v, consumed = 0;
        if (line_no == 1) {
            if (sscanf(line, CHECKPOINT_MANIFEST_TITLE " %d%n", &v, &consumed) != 1 || line[consumed] != '\0' ||
                v != CHECKPOINT_MANIFEST_VERSION) {
                return llmc_error("checkpoint manifest %s: line 1 is \"%.80s\", expected \"%s %d\"", path, line,
                                  CHECKPOINT_MANIFEST_TITLE, CHECKPOINT_MANIFEST_VERSION);
            }
            m->version = v;
        } else if (line_no == 2) {
            if (sscanf(line, "step %d%n", &m->step, &consumed) != 1 || line[consumed] != '\0' || m->step != step) {
                return llmc_error("checkpoint manifest %s: line 2 is \"%.80s\", expected \"step %d\"", path, line, step);
            }
        } else if (line_no == 3) {
            if (sscanf(line, "world %d%n", &m->world, &consumed) != 1 || line[consumed] != '\0' || m->world < 1 ||
                m->world > ZERO_PLAN_MAX_WORLD) {
                return llmc_error("checkpoint manifest %s: line 3 is \"%.80s\", expected \"world N\" with N in [1, %d]", path,
                                  line, ZERO_PLAN_MAX_WORLD);
            }
            m->files = (ManifestFile*)calloc((size_t)m->world + 1, sizeof(ManifestFile));
            if (m->files == NULL) { return llmc_error("checkpoint manifest %s: out of memory", path); }
        } else {
            ManifestFile f;
            unsigned long long size;
            unsigned c;
            if (m->nfiles == m->world + 1) {
                return llmc_error("checkpoint manifest %s: more files than a world of %d ranks writes (line %d)", path, m->world,
                                  line_no);
            }
            if (sscanf(line, "file %63s %llu %8x%n", f.name, &size, &c, &consumed) != 3 || line[consumed] != '\0' ||
                strchr(f.name, '/') != NULL || f.name[0] == '.') {
                return llmc_error("checkpoint manifest %s: line %d is \"%.80s\", expected \"file NAME SIZE CRC32C\"", path,
                                  line_no, line);
            }
            f.size = size;
            f.crc = c;
            m->files[m->nfiles++] = f;
        }
    }
    if (line_no < 3 || m->nfiles != m->world + 1) {
        return llmc_error("checkpoint manifest %s: lists %d files; a world of %d ranks writes %d", path, m->nfiles, m->world,
                          m->world + 1);
    }
    return 0;
}

// Reads and checks DONE_S of dir: its title and version, its own checksum, the step it
// names, every line's form, file names without '/'. Returns 0, or -1 with llmc_errmsg()
// naming the marker and the first thing wrong. An empty marker (an earlier version's)
// gives version 0 and no files.
static int checkpoint_manifest_read(const char* dir, int step, CheckpointManifest* m) {
    memset(m, 0, sizeof(*m));
    char path[4096];
    snprintf(path, sizeof(path), "%s/DONE_%08d", dir, step);
    FILE* fp = fopen(path, "rb");
    if (fp == NULL) { return llmc_error("cannot read checkpoint manifest %s: %s", path, strerror(errno)); }
    enum { MAX_TEXT = 1 << 24 };  // 16 MiB: some 200k ranks' lines
    struct stat st;
    size_t cap = fstat(fileno(fp), &st) == 0 && st.st_size < MAX_TEXT ? (size_t)st.st_size : MAX_TEXT;
    char* text = (char*)malloc(cap + 2);
    size_t len = text != NULL ? fread(text, 1, cap + 1, fp) : 0;  // one more: a file grown meanwhile shows
    fclose(fp);
    if (text == NULL) { return llmc_error("checkpoint manifest %s: out of memory", path); }
    int rc = 0;
    if (len > cap) {
        rc = llmc_error("checkpoint manifest %s: larger than %zu bytes (at most %d)", path, cap, MAX_TEXT);
    } else if (len == 0) {
        m->step = step;  // an earlier version's marker
    } else {
        text[len] = '\0';
        rc = checkpoint_manifest_parse(path, text, len, step, m);
    }
    free(text);
    if (rc != 0) { checkpoint_manifest_free(m); }
    return rc;
}

// Checks the files i = first, first + stride, ... of the manifest against their sizes and
// checksums (so that the ranks of a job share the reading: first = rank, stride =
// world). Returns 0, or -1 with llmc_errmsg() naming the first file that fails.
static int checkpoint_manifest_check(const char* dir, const CheckpointManifest* m, int first, int stride) {
    for (int i = first; i < m->nfiles; i += stride) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", dir, m->files[i].name);
        uint32_t crc;
        uint64_t size;
        if (crc32c_file(path, &crc, &size) != 0) {
            return llmc_error("checkpoint at step %d: cannot read %s: %s", m->step, path, strerror(errno));
        }
        if (size != m->files[i].size) {
            return llmc_error("checkpoint at step %d: %s has %llu bytes; its manifest says %llu (truncated or replaced)", m->step,
                              path, (unsigned long long)size, (unsigned long long)m->files[i].size);
        }
        if (crc != m->files[i].crc) {
            return llmc_error("checkpoint at step %d: %s fails its checksum (CRC32C %08x; its manifest says %08x): the file is "
                              "damaged", m->step, path, crc, m->files[i].crc);
        }
    }
    return 0;
}

// Writes DONE_S: the manifest of the world + 1 files whose sizes and checksums are given,
// through AtomicFile (fsync'ed, and its directory). Returns 0 or -1 with llmc_errmsg().
static int checkpoint_manifest_write(const char* dir, int step, int world, const uint64_t* size_crc) {
    size_t cap = 256 + (size_t)(world + 1) * 96;
    char* text = (char*)malloc(cap);
    if (text == NULL) { return llmc_error("checkpoint at step %d: out of memory for the manifest", step); }
    size_t len = (size_t)snprintf(text, cap, CHECKPOINT_MANIFEST_TITLE " %d\nstep %d\nworld %d\n", CHECKPOINT_MANIFEST_VERSION,
                                  step, world);
    for (int i = 0; i <= world; i++) {
        char name[64];
        if (i == 0) { snprintf(name, sizeof(name), "model_%08d.bin", step); }
        else { snprintf(name, sizeof(name), "state_%08d_%05d.bin", step, i - 1); }
        len += (size_t)snprintf(text + len, cap - len, "file %s %llu %08x\n", name, (unsigned long long)size_crc[2 * i],
                                (unsigned)size_crc[2 * i + 1]);
    }
    len += (size_t)snprintf(text + len, cap - len, "crc32c %08x\n", crc32c_update(0, text, len));
    char path[4096];
    snprintf(path, sizeof(path), "%s/DONE_%08d", dir, step);
    AtomicFile f;
    int rc = atomic_open(&f, path);
    if (rc == 0) { rc = atomic_commit(&f, fwrite(text, 1, len, f.fp) == len); }
    free(text);
    return rc;
}

// The size and checksum of a file just written, as two uint64 (the manifest's pair).
static int checkpoint_file_sum(const char* path, uint64_t* pair) {
    uint32_t crc;
    if (crc32c_file(path, &crc, &pair[0]) != 0) { return llmc_error("cannot read back %s: %s", path, strerror(errno)); }
    pair[1] = crc;
    return 0;
}

// Removes the complete checkpoints of dir beyond the `keep` newest (keep 0: none removed):
// the DONE marker first, so that a checkpoint half removed is never complete, then the
// files its manifest lists (an earlier version's empty marker: the model file and every
// rank's state file by name). Rank 0 calls it after a save; returns 0, or -1 with
// llmc_errmsg() naming what could not be removed.
static int checkpoint_prune(const char* dir, int keep, int world_now) {
    if (keep <= 0) { return 0; }
    int* steps;
    int n = checkpoint_steps(dir, &steps);
    int rc = 0;
    for (int i = keep; i < n && rc == 0; i++) {
        CheckpointManifest m;
        int have = checkpoint_manifest_read(dir, steps[i], &m) == 0;
        char path[4096];
        snprintf(path, sizeof(path), "%s/DONE_%08d", dir, steps[i]);
        if (remove(path) != 0) { rc = llmc_error("--keep-checkpoints: cannot remove %s: %s", path, strerror(errno)); break; }
        fsync_parent_dir(path);
        if (have && m.version > 0) {
            for (int f = 0; f < m.nfiles; f++) {
                snprintf(path, sizeof(path), "%s/%s", dir, m.files[f].name);
                if (remove(path) != 0 && errno != ENOENT) { rc = llmc_error("--keep-checkpoints: cannot remove %s: %s", path, strerror(errno)); }
            }
        } else {  // without a manifest (or a damaged one): the files by the names this run writes
            snprintf(path, sizeof(path), "%s/model_%08d.bin", dir, steps[i]);
            remove(path);
            for (int r = 0; r < world_now; r++) {
                snprintf(path, sizeof(path), "%s/state_%08d_%05d.bin", dir, steps[i], r);
                remove(path);
            }
        }
        if (have) { checkpoint_manifest_free(&m); }
    }
    free(steps);
    return rc;
}

// Agrees on the outcome of one stage of a save, which every rank makes with its own `ok`:
// when any rank failed, every rank returns -1 with llmc_errmsg() naming the first rank that
// failed and its message (sent from it), so that every rank stops alike, saying why.
// Returns 0 when every rank succeeded. Being an all-reduce, it also keeps any rank from
// starting the next stage before every rank has finished this one.
static int checkpoint_agree(int ok, int rank, int step) {
    int first = ok ? INT_MAX : rank;
    char msg[sizeof(llmc_errbuf)];
    snprintf(msg, sizeof(msg), "%s", ok ? "" : llmc_errmsg());
    zero_watch_enter("all-reduce of the checkpoint's progress", -1);
    int rc = MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (rc == MPI_SUCCESS && first != INT_MAX) { rc = MPI_Bcast(msg, (int)sizeof(msg), MPI_CHAR, first, MPI_COMM_WORLD); }
    zero_watch_leave();
    if (rc != MPI_SUCCESS) { return llmc_error("checkpoint at step %d: a collective between the ranks failed", step); }
    if (first == INT_MAX) { return 0; }
    msg[sizeof(msg) - 1] = '\0';
    return llmc_error("checkpoint at step %d: rank %d: %s", step, first, msg);
}

// [Note: the partitioned model file] No rank holds the whole model to write it: rank 0
// creates the temporary (AtomicFile's rules: output_check on the final name, O_EXCL |
// O_NOFOLLOW) with the header, at its full size; then every rank writes its own range of
// each unit's master (zero_master_shard; the ranges of all ranks tile the model) at its
// places in the file (gpt2_unit_parts: a unit's range is up to 12 runs of the kind-major
// file), and fsyncs; only once every rank has, rank 0 renames the file into place and
// fsyncs the directory. A rank holds one unit's range of the master at a time. Every rank
// opens the temporary by name, so -o must be a filesystem all ranks share (as it must for
// the resume, which reads every rank's state file).
//
// Writes model_S.bin of dir so; *sum: its size and checksum (rank 0). Collective: every
// rank calls it. Returns 0, or -1 on every rank (checkpoint_agree) with the temporary
// removed and nothing at the final name replaced.
static int checkpoint_write_model(const char* dir, int step, Zero* z, const GPT2Config* c, int version, int rank,
                                  uint64_t sum[2]) {
    if (version != GPT2_MODEL_VERSION_FP32 && version != GPT2_MODEL_VERSION_BF16) {  // every rank alike
        return llmc_error("checkpoint at step %d: no model file version %d (3 is fp32, 5 bf16)", step, version);
    }
    size_t elem = version == GPT2_MODEL_VERSION_FP32 ? sizeof(float) : sizeof(uint16_t), largest = 0;
    char path[4096];
    snprintf(path, sizeof(path), "%s/model_%08d.bin", dir, step);
    AtomicFile f;
    f.fp = NULL;
    snprintf(f.tmp, sizeof(f.tmp), "%s.tmp", path);  // atomic_open's name, for the other ranks
    int ok = 1, fd = -1;
    float* buf = NULL;
    if (rank == 0) {
        ok = atomic_open(&f, path) == 0;
        if (ok && (!gpt2_fwrite_header(f.fp, c, version) || fflush(f.fp) != 0 ||
                   ftruncate(fileno(f.fp), (off_t)(1024 + gpt2_num_params(c) * elem)) != 0)) {
            llmc_error("cannot write %s: %s", f.tmp, strerror(errno)); ok = 0;
        }
    }
    if (checkpoint_agree(ok, rank, step) != 0) { goto fail; }
    for (int u = 0; u < gpt2_num_units(c); u++) {
        size_t begin, n;
        if (zero_master_shard(z, u, &begin, &n, NULL) != 0) { ok = 0; break; }
        if (n > largest) { largest = n; }
    }
    buf = ok ? (float*)malloc((largest > 0 ? largest : 1) * sizeof(float)) : NULL;
    fd = rank == 0 ? fileno(f.fp) : open(f.tmp, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
    if (!ok) {
        llmc_error("%s: %s", path, zero_errmsg());
    } else if (buf == NULL) {
        llmc_error("out of memory for one unit's range of the master (%zu parameters) to write %s", largest, path); ok = 0;
    } else if (fd < 0) {
        llmc_error("cannot open %s, which rank 0 created: %s (-o must be a directory every rank shares)", f.tmp,
                   strerror(errno));
        ok = 0;
    }
    for (int u = 0; ok && u < gpt2_num_units(c); u++) {
        size_t begin, n;
        Gpt2Part parts[NUM_BLOCK_TENSORS];
        if (zero_master_shard(z, u, &begin, &n, buf) != 0) { llmc_error("%s: %s", path, zero_errmsg()); ok = 0; break; }
        int np = gpt2_unit_parts(c, u, begin, begin + n, parts);
        for (int i = 0; ok && i < np; i++) {
            if (gpt2_pwrite_params(fd, buf + (parts[i].unit_off - begin), parts[i].n, parts[i].file_off, version) != 0) {
                llmc_error("cannot write %s: %s", f.tmp, strerror(errno)); ok = 0;
            }
        }
    }
    if (rank != 0 && fd >= 0) {  // rank 0's descriptor is the AtomicFile's, synced by atomic_commit
        if (ok && fsync(fd) != 0) { llmc_error("cannot write %s: %s", f.tmp, strerror(errno)); ok = 0; }
        if (close(fd) != 0 && ok) { llmc_error("cannot write %s: %s", f.tmp, strerror(errno)); ok = 0; }
    }
    free(buf);
    if (checkpoint_agree(ok, rank, step) != 0) { goto fail; }
    if (rank == 0) {  // every rank's part is on disk: the file is complete
        ok = atomic_commit(&f, 1) == 0 && checkpoint_file_sum(path, sum) == 0;
    }
    return checkpoint_agree(ok, rank, step);  // atomic_commit removed the temporary if it failed
fail:
    if (rank == 0 && f.fp != NULL) { atomic_abort(&f); }
    return -1;
}

// Writes the checkpoint of step h->step: the model file (every rank its part of the
// master, checkpoint_write_model), every rank's state file, then the DONE marker.
// Collective: every rank calls it. A marker of the same step left by an earlier run goes
// first, so that files being replaced never count as complete. Returns 0, or -1 on every
// rank with llmc_errmsg() naming the first rank that failed and why (the engine's failures
// carry zero_errmsg()); then no marker is written and no earlier checkpoint is touched.
static int checkpoint_save(const char* dir, const CheckpointHeader* h, Zero* z, const GPT2Config* config, int model_version) {
    char path[4096];
    int ok = 1;
    snprintf(path, sizeof(path), "%s/DONE_%08d", dir, h->step);
    if (h->rank == 0 && remove(path) != 0 && errno != ENOENT) {
        llmc_error("cannot remove the old marker %s: %s", path, strerror(errno)); ok = 0;
    }
    // every rank waits for the old marker to be gone before it writes
    if (checkpoint_agree(ok, h->rank, h->step) != 0) { return -1; }
    uint64_t model_sum[2] = {0, 0};
    if (checkpoint_write_model(dir, h->step, z, config, model_version, h->rank, model_sum) != 0) { return -1; }
    snprintf(path, sizeof(path), "%s/state_%08d_%05d.bin", dir, h->step, h->rank);
    AtomicFile f;
    uint64_t state_sum[2] = {0, 0};
    ok = atomic_open(&f, path) == 0;
    if (ok && fwrite(h, sizeof(*h), 1, f.fp) != 1) {
        ok = atomic_commit(&f, 0) == 0;  // removes the temporary, names the file and errno
    } else if (ok && zero_save(z, f.fp) != 0) {
        atomic_abort(&f);
        llmc_error("%s: %s", path, zero_errmsg()); ok = 0;
    } else if (ok) {
        ok = atomic_commit(&f, 1) == 0 && checkpoint_file_sum(path, state_sum) == 0;
    }
    if (checkpoint_agree(ok, h->rank, h->step) != 0) { return -1; }
    // every rank's size and checksum to rank 0, which writes them into the marker: only
    // then, every file being on disk (AtomicFile fsyncs), is the checkpoint complete
    uint64_t* sums = h->rank == 0 ? (uint64_t*)malloc(2 * sizeof(uint64_t) * ((size_t)h->world_size + 1)) : NULL;
    ok = h->rank != 0 || sums != NULL;
    if (!ok) { llmc_error("out of memory for the manifest"); }
    if (checkpoint_agree(ok, h->rank, h->step) != 0) { free(sums); return -1; }
    zero_watch_enter("gather of the checkpoint's checksums", -1);
    int grc = MPI_Gather(state_sum, 2, MPI_UINT64_T, h->rank == 0 ? sums + 2 : NULL, 2, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    zero_watch_leave();
    if (grc != MPI_SUCCESS) {
        free(sums);
        return llmc_error("checkpoint at step %d: gathering the checksums failed", h->step);
    }
    if (h->rank == 0) {
        sums[0] = model_sum[0];
        sums[1] = model_sum[1];
        ok = checkpoint_manifest_write(dir, h->step, h->world_size, sums) == 0;
        free(sums);
    }
    return checkpoint_agree(ok, h->rank, h->step);
}

// Rank 0's part of a resume: finds the newest checkpoint of dir whose manifest and files
// all pass their checks, every rank checking its share of the files (collective: every
// rank calls it). Prints, from rank 0, why each newer one was passed over and a warning
// for a checkpoint without checksums. Returns its step, -1 when dir holds no complete
// checkpoint, or -2 when it holds some but none passes (the messages say why).
static int checkpoint_find_valid(const char* dir, int rank, int world) {
    int* steps = NULL;
    int n = rank == 0 ? checkpoint_steps(dir, &steps) : 0;
    if (MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD) != MPI_SUCCESS) { free(steps); return -2; }
    if (n == 0) { free(steps); return -1; }
    if (rank != 0) { steps = (int*)malloc(n * sizeof(int)); }
    if (steps == NULL || MPI_Bcast(steps, n, MPI_INT, 0, MPI_COMM_WORLD) != MPI_SUCCESS) { free(steps); return -2; }
    int found = -2;
    for (int i = 0; i < n && found == -2; i++) {
        CheckpointManifest m;
        int have = checkpoint_manifest_read(dir, steps[i], &m) == 0;
        int bad = !have;
        if (!have && rank == 0) { fprintf(stderr, "warning: %s\n", llmc_errmsg()); }  // every rank read the same marker
        if (have && checkpoint_manifest_check(dir, &m, rank, world) != 0) {
            fprintf(stderr, "warning: rank %d: %s\n", rank, llmc_errmsg());
            bad = 1;
        }
        int any = bad;
        MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (!any) {
            found = steps[i];
            if (rank == 0 && m.version == 0) {
                printf("warning: the checkpoint at step %d has no checksums (an earlier version wrote it): resumed unverified\n", steps[i]);
            }
        } else if (rank == 0) {
            printf("warning: the checkpoint at step %d in %s fails its checks (see above)%s\n", steps[i], dir,
                   i + 1 < n ? "; trying the one before it" : "");
        }
        if (have) { checkpoint_manifest_free(&m); }
    }
    free(steps);
    return found;
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

// ----------------------------------------------------------------------------
// every rank's files of one checkpoint: resuming anywhere, and dev/checkpoint_tool.c

static void checkpoint_state_path(char* path, size_t n, const char* dir, int step, int rank) {
    snprintf(path, n, "%s/state_%08d_%05d.bin", dir, step, rank);
}

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

static void checkpoint_set_close(CheckpointSet* s) {
    for (int q = 0; q < s->world; q++) {
        if (s->fp != NULL && s->fp[q] != NULL) { fclose(s->fp[q]); }
        if (s->names != NULL) { free(s->names[q]); }
    }
    free(s->fp);
    free(s->names);
    free(s->h);
    free(s->unit_numel);
    zero_state_source_free(&s->src);
    memset(s, 0, sizeof(*s));
}

// The ranges of a state file's two headers, before anything of them is believed, and the
// file's size against what they describe: a file cut short or grown is named with the
// offset where it stops matching (a checkpoint of an earlier version has no manifest to
// say so). fp is at the end of the trainer's header (h) and is left there. Returns 0, or
// -1 with llmc_errmsg() naming the file.
static int checkpoint_validate(const char* path, FILE* fp, const CheckpointHeader* h) {
    if (h->step < 0 || h->world_size < 1 || h->rank < 0 || h->rank >= h->world_size || h->B < 1 || h->T < 1 ||
        h->grad_accum < 1 || h->num_params == 0) {
        return llmc_error("checkpoint state %s: header out of range (step %d, rank %d of %d, -b %d, -t %d, %d accumulation "
                          "steps, %llu parameters)", path, h->step, h->rank, h->world_size, h->B, h->T, h->grad_accum,
                          (unsigned long long)h->num_params);
    }
    long start = ftell(fp);
    ZeroStateHeader z;
    if (start < 0 || fread(&z, sizeof(z), 1, fp) != 1) {
        return llmc_error("checkpoint state %s: truncated: the engine's header at byte offset %ld is missing", path, start);
    }
    z.engine[sizeof(z.engine) - 1] = '\0';
    if (z.magic == ZERO_STATE_MAGIC && (z.stage < 0 || z.stage > 3 || (strcmp(z.engine, "host") != 0 && strcmp(z.engine, "device") != 0))) {
        return llmc_error("checkpoint state %s: the engine's header at byte offset %ld is out of range (engine '%s', stage %d)",
                          path, start, z.engine, z.stage);
    }
    long expected = start + (long)sizeof(z) + (long)z.payload_bytes, actual = -1;
    if (fseek(fp, 0, SEEK_END) == 0) { actual = ftell(fp); }
    if (fseek(fp, start, SEEK_SET) != 0) { return llmc_error("checkpoint state %s: cannot seek: %s", path, strerror(errno)); }
    if (z.magic == ZERO_STATE_MAGIC && (z.payload_bytes > (uint64_t)LONG_MAX / 2 || actual != expected)) {
        return llmc_error("checkpoint state %s is %ld bytes but its headers describe %ld (%llu bytes of engine state from byte "
                          "offset %ld)%s", path, actual, expected, (unsigned long long)z.payload_bytes,
                          start + (long)sizeof(z), actual < expected ? ": truncated" : "");
    }
    return 0;
}

// reads rank q's trainer header from fp into *h and checks it is one of this checkpoint's
static int checkpoint_read_header(FILE* fp, const char* path, int q, int step, size_t num_params, CheckpointHeader* h) {
    if (fread(h, sizeof(*h), 1, fp) != 1) { return llmc_error("checkpoint state %s: truncated header", path); }
    if (h->magic != CHECKPOINT_MAGIC || h->version != CHECKPOINT_VERSION) {
        return llmc_error("%s is not a train_gpt2_zero3 state file of this version (magic %d, version %d; expected %d, %d)",
                          path, h->magic, h->version, CHECKPOINT_MAGIC, CHECKPOINT_VERSION);
    }
    if (h->rank != q || h->step != step || h->world_size < 1 || h->num_params != num_params) {
        return llmc_error("%s says rank %d of %d, step %d, %llu parameters; expected rank %d, step %d, %zu parameters",
                          path, h->rank, h->world_size, h->step, (unsigned long long)h->num_params, q, step, num_params);
    }
    return checkpoint_validate(path, fp, h);
}

// Opens every state file of `step` in dir (as many as rank 0's header says) for a model of
// config c, and checks that they belong together. Returns 0, or -1 naming the file.
static int checkpoint_set_open(CheckpointSet* s, const char* dir, int step, const GPT2Config* c) {
    memset(s, 0, sizeof(*s));
    char path[4096];
    CheckpointHeader h0;
    checkpoint_state_path(path, sizeof(path), dir, step, 0);
    FILE* fp0 = fopen(path, "rb");
    if (fp0 == NULL) { return llmc_error("cannot read checkpoint state %s: %s", path, strerror(errno)); }
    if (checkpoint_read_header(fp0, path, 0, step, gpt2_num_params(c), &h0) != 0) { fclose(fp0); return -1; }
    s->world = h0.world_size;
    s->num_units = gpt2_num_units(c);
    s->fp = (FILE**)calloc(s->world, sizeof(FILE*));
    s->names = (char**)calloc(s->world, sizeof(char*));
    s->h = (CheckpointHeader*)calloc(s->world, sizeof(CheckpointHeader));
    s->unit_numel = (size_t*)malloc(s->num_units * sizeof(size_t));
    if (s->fp == NULL || s->names == NULL || s->h == NULL || s->unit_numel == NULL) {
        fclose(fp0);
        checkpoint_set_close(s);
        return llmc_error("out of memory for the %d state files of %s", h0.world_size, path);
    }
    for (int u = 0; u < s->num_units; u++) { s->unit_numel[u] = gpt2_unit_size(c, u); }
    s->fp[0] = fp0;
    s->h[0] = h0;
    for (int q = 0; q < s->world; q++) {
        checkpoint_state_path(path, sizeof(path), dir, step, q);
        s->names[q] = strdup(path);
        if (s->names[q] == NULL) { checkpoint_set_close(s); return llmc_error("out of memory"); }
        if (q == 0) { continue; }
        s->fp[q] = fopen(path, "rb");
        if (s->fp[q] == NULL) {
            llmc_error("cannot read checkpoint state %s (rank %d of the %d that saved step %d): %s", path, q, s->world, step, strerror(errno));
            checkpoint_set_close(s);
            return -1;
        }
        if (checkpoint_read_header(s->fp[q], path, q, step, gpt2_num_params(c), &s->h[q]) != 0) { checkpoint_set_close(s); return -1; }
        if (s->h[q].world_size != s->world) {
            llmc_error("%s says %d ranks; rank 0's file says %d", path, s->h[q].world_size, s->world);
            checkpoint_set_close(s);
            return -1;
        }
    }
    if (zero_state_source_init(&s->src, s->fp, (const char* const*)s->names, s->world, s->unit_numel, s->num_units) != 0) {
        llmc_error("%s", zero_errmsg());
        checkpoint_set_close(s);
        return -1;
    }
    return 0;
}

// The data position `from` saved (rank 0's header: its world size, B, T, accumulation),
// as this run (`want`) reads it: the same tokens consumed, so the same batches follow.
// Rank r of N reads B*T tokens at r*B*T of each chunk of N*B*T, so a step reads the same
// tokens at any N*B with the same N*B*accumulation and T; the chunk index converts when
// the old position is a whole number of new chunks (a shard's unused tail can differ with
// the chunk size: past the next shard boundary the batches are the new layout's). Shuffling
// draws the order of chunks of N*B*T tokens, so then N*B must stay. Returns 0, or -1
// saying why and what works.
static int checkpoint_convert_position(const char* path, const CheckpointHeader* from, const CheckpointHeader* want,
                                       DataLoaderState* out) {
    long long old_seqs = (long long)from->world_size * from->B, new_seqs = (long long)want->world_size * want->B;
    if (from->T != want->T || from->shuffle != want->shuffle || from->seed != want->seed) {
        return llmc_error("%s was saved with -t %d, shuffle %d, --seed %llu; this run has -t %d, shuffle %d, --seed %llu: the "
                          "data position would not mean the same sequences (resume with the saved -t, --shuffle and --seed)",
                          path, from->T, from->shuffle, (unsigned long long)from->seed, want->T, want->shuffle,
                          (unsigned long long)want->seed);
    }
    if (old_seqs * from->grad_accum != new_seqs * want->grad_accum) {
        return llmc_error("%s was saved with %d ranks x -b %d x %d accumulation steps = %lld sequences per step; this run has "
                          "%d x %d x %d = %lld: a step would not mean the same batch (keep the product, e.g. with -d %lld, "
                          "which sets the accumulation)", path, from->world_size, from->B, from->grad_accum,
                          old_seqs * from->grad_accum, want->world_size, want->B, want->grad_accum, new_seqs * want->grad_accum,
                          old_seqs * from->grad_accum * from->T);
    }
    *out = from->loader;
    if (old_seqs == new_seqs) { return 0; }
    if (from->shuffle) {
        return llmc_error("%s was saved with --shuffle 1 over chunks of %d ranks x -b %d; this run's chunks are %d x %d: the "
                          "shuffled order would not be the same batches (keep ranks x -b at %lld, or resume without shuffling "
                          "from a run without it)", path, from->world_size, from->B, want->world_size, want->B, old_seqs);
    }
    unsigned long long seqs = from->loader.batch * (unsigned long long)old_seqs;
    if (seqs % (unsigned long long)new_seqs != 0) {
        return llmc_error("%s stopped after %llu sequences of its shard, not a whole number of this run's chunks of %lld "
                          "(%d ranks x -b %d): the next batch would start elsewhere", path, seqs, new_seqs,
                          want->world_size, want->B);
    }
    out->batch = seqs / (unsigned long long)new_seqs;
    return 0;
}

// Resumes this rank from the checkpoint of `step` in dir, whatever world size and ZeRO
// stage saved it: at the same ranks, stage, -b and accumulation, from an engine section of
// the current version, it is checkpoint_load;
// otherwise this rank's engine section is rebuilt from the old ranks' files into a
// temporary file in dir (unlinked at once; this rank's own state, never the model's
// unless this rank holds all of it) and loaded from there, and the data position
// converted. *got: rank 0's header (the sampler's RNG), the converted position, the old
// world size. `stage` is this run's. Returns 0, or -1 with llmc_errmsg().
static int checkpoint_resume(const char* dir, int step, const CheckpointHeader* want, int stage, const GPT2Config* c, Zero* z,
                             CheckpointHeader* got) {
    CheckpointSet s;
    if (checkpoint_set_open(&s, dir, step, c) != 0) { return -1; }
    const CheckpointHeader* h0 = &s.h[0];
    if (h0->world_size == want->world_size && s.src.head.stage == stage && h0->B == want->B && h0->grad_accum == want->grad_accum &&
        s.src.head.version == ZERO_STATE_VERSION) {
        checkpoint_set_close(&s);
        return checkpoint_load(dir, step, want, z, got);
    }
    int rc = -1;
    DataLoaderState pos;
    ZeroStateLayout to;
    memset(&to, 0, sizeof(to));
    char tmp_path[4096];
    snprintf(tmp_path, sizeof(tmp_path), "%s/.reshard_%05d_XXXXXX", dir, want->rank);
    FILE* tmp = NULL;
    if (strcmp(s.src.head.engine, zero_name(z)) != 0) {
        llmc_error("%s was saved by the %s engine; this run uses the %s engine: a checkpoint resumes in the same backend "
                   "family (the model file %s/model_%08d.bin loads anywhere with -e)", s.names[0], s.src.head.engine,
                   zero_name(z), dir, step);
    } else if (checkpoint_convert_position(s.names[0], h0, want, &pos) != 0) {
        // the message says why
    } else if (zero_state_layout_init(&to, s.unit_numel, s.num_units, zero_name(z), stage, want->world_size, want->rank,
                                      s.src.head.elem_bytes) != 0) {
        llmc_error("%s: %s", s.names[0], zero_errmsg());
    } else {
        int fd = mkstemp(tmp_path);
        if (fd < 0 || (tmp = fdopen(fd, "w+b")) == NULL) {
            llmc_error("cannot create the temporary file %s for the resharded state: %s", tmp_path, strerror(errno));
            if (fd >= 0) { close(fd); }
        } else {
            unlink(tmp_path);  // gone with the last close, whatever happens next
            if (zero_reshard_write(&s.src, &to, tmp, tmp_path) != 0) {
                llmc_error("resharding step %d from %d ranks at stage %d to rank %d of %d at stage %d: %s", step, s.world,
                           s.src.head.stage, want->rank, want->world_size, stage, zero_errmsg());
            } else if (fseeko(tmp, 0, SEEK_SET) != 0 || zero_load(z, tmp) != 0) {
                llmc_error("%s resharded to rank %d of %d at stage %d: %s", s.names[0], want->rank, want->world_size, stage,
                           zero_errmsg());
            } else {
                *got = *h0;
                got->loader = pos;
                rc = 0;
            }
        }
    }
    if (tmp != NULL) { fclose(tmp); }
    zero_state_layout_free(&to);
    checkpoint_set_close(&s);
    return rc;
}

#endif // LLMC_CHECKPOINT_H
