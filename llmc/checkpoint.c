// Checkpoint files (llmc/checkpoint.h): the state files, the model file, saving, finding, resuming and pruning.
#include "llmc/checkpoint.h" // the interface, its types and the headers its bodies use
#include <string.h>           // memset
#include <errno.h>            // errno
#include <limits.h>           // LONG_MAX: the payload's size before it is added to an offset; INT_MAX: no rank failed
#include <unistd.h>           // unlink: the resharded section's temporary file; ftruncate, fsync, close: the model file
#include <fcntl.h>            // O_WRONLY, O_RDONLY: the files opened through common/file.h
#include <mpi.h>              // MPI_Gather: every rank's checksum before the marker; the shared check
#include <stdlib.h>           // malloc
#include "llmc/utils.h"       // llmc_error, AtomicFile
#include "llmc/manifest.h"    // the DONE marker: checkpoint_manifest_write, checkpoint_verify, checkpoint_retire, checkpoint_steps
#include "common/file.h"      // file_open, file_fopen: checkpoint files opened without blocking on a FIFO or a device
#include "zero3/zero.h"       // Zero: the engine's state; zero_state_shard: this rank's range of the master
#include "zero3/watchdog.h"   // zero_watch_enter/leave, zero_watch_io_enter/leave: the save's collectives and file waits told to --collective-timeout's watchdog
#include "zero3/checkpoint.h" // ZeroStateHeader: the engine section's size, checked against the file's
#include "zero3/util.h"     // zero_error, zero_errmsg, zero_now_ms
#include "zero3/watch.h"    // zero_watch_enter/leave, zero_watch_io_enter/leave: waits told to the watchdog

int checkpoint_agree(int ok, int rank, int step) {
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
// each unit's master (zero_state_shard; the ranges of all ranks tile the model) at its
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
    const char* why = NULL;  // before the gotos (the header is also compiled as C++)
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
        if (zero_state_shard(z, ZERO_STATE_MASTER, u, &begin, &n, NULL) != 0) { ok = 0; break; }
        if (n > largest) { largest = n; }
    }
    buf = ok ? (float*)malloc((largest > 0 ? largest : 1) * sizeof(float)) : NULL;
    fd = rank == 0 ? fileno(f.fp) : file_open(f.tmp, O_WRONLY | O_NOFOLLOW, 0, FILE_REGULAR, &why);
    if (!ok) {
        llmc_error("%s: %s", path, zero_errmsg());
    } else if (buf == NULL) {
        llmc_error("out of memory for one unit's range of the master (%zu parameters) to write %s", largest, path); ok = 0;
    } else if (fd < 0) {
        llmc_error("cannot open %s, which rank 0 created: %s (-o must be a directory every rank shares)", f.tmp, why);
        ok = 0;
    }
    for (int u = 0; ok && u < gpt2_num_units(c); u++) {
        size_t begin, n;
        Gpt2Part parts[NUM_BLOCK_TENSORS];
        if (zero_state_shard(z, ZERO_STATE_MASTER, u, &begin, &n, buf) != 0) { llmc_error("%s: %s", path, zero_errmsg()); ok = 0; break; }
        int np = gpt2_unit_parts(c, u, begin, begin + n, parts);
        zero_watch_io_enter("write", f.tmp);
        for (int i = 0; ok && i < np; i++) {
            if (gpt2_pwrite_params(fd, buf + (parts[i].unit_off - begin), parts[i].n, parts[i].file_off, version) != 0) {
                llmc_error("cannot write %s: %s", f.tmp, strerror(errno)); ok = 0;
            }
        }
        zero_watch_io_leave();
    }
    if (rank != 0 && fd >= 0) {  // rank 0's descriptor is the AtomicFile's, synced by atomic_commit
        zero_watch_io_enter("sync", f.tmp);
        if (ok && fsync(fd) != 0) { llmc_error("cannot write %s: %s", f.tmp, strerror(errno)); ok = 0; }
        zero_watch_io_leave();
        if (close(fd) != 0 && ok) { llmc_error("cannot write %s: %s", f.tmp, strerror(errno)); ok = 0; }
    }
    free(buf);
    if (checkpoint_agree(ok, rank, step) != 0) { goto fail; }
    if (rank == 0) {  // every rank's part is on disk: the file is complete
        zero_watch_io_enter("sync", f.tmp);
        ok = atomic_commit(&f, 1) == 0;
        zero_watch_io_leave();
        ok = ok && checkpoint_file_sum(path, sum) == 0;
    }
    return checkpoint_agree(ok, rank, step);  // atomic_commit removed the temporary if it failed
fail:
    if (rank == 0 && f.fp != NULL) { atomic_abort(&f); }
    return -1;
}

int checkpoint_save(const char* dir, const CheckpointHeader* h, Zero* z, const GPT2Config* config, int model_version) {
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
    zero_watch_io_enter("write", path);  // (the engine's waits inside, NVMe's, are watched on their own)
    if (ok && fwrite(h, sizeof(*h), 1, f.fp) != 1) {
        ok = atomic_commit(&f, 0) == 0;  // removes the temporary, names the file and errno
    } else if (ok && zero_save(z, f.fp) != 0) {
        atomic_abort(&f);
        llmc_error("%s: %s", path, zero_errmsg()); ok = 0;
    } else if (ok) {
        ok = atomic_commit(&f, 1) == 0;
    }
    zero_watch_io_leave();
    ok = ok && checkpoint_file_sum(path, state_sum) == 0;
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

// The steps with a DONE marker in dir, newest first, as rank 0 lists them, on every rank
// (collective): into *steps (malloc'ed, the caller frees it). Returns how many, or -1 when
// a collective failed.
static int checkpoint_steps_shared(const char* dir, int rank, int** steps) {
    int n = rank == 0 ? checkpoint_steps(dir, steps) : 0;
    if (rank != 0) { *steps = NULL; }
    zero_watch_enter("broadcast of the checkpoints present", -1);
    int rc = MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (rc == MPI_SUCCESS && n > 0 && rank != 0) { *steps = (int*)malloc(n * sizeof(int)); }
    if (rc == MPI_SUCCESS && n > 0) { rc = *steps == NULL ? MPI_ERR_NO_MEM : MPI_Bcast(*steps, n, MPI_INT, 0, MPI_COMM_WORLD); }
    zero_watch_leave();
    if (rc != MPI_SUCCESS) { free(*steps); *steps = NULL; return -1; }
    return n;
}

// checkpoint_verify by every rank of the job, each checking its share of the files
// (collective). Every rank returns the same: CHECKPOINT_VERIFIED, CHECKPOINT_UNVERIFIED
// (an empty marker, allowed), or CHECKPOINT_BAD_FILE when anything failed, having printed
// why: the marker's fault from rank 0 (every rank read the same), a file's from the rank
// that read it.
static int checkpoint_verify_shared(const char* dir, int step, int rank, int world, int allow_unverified) {
    int rc = checkpoint_verify(dir, step, rank, world, allow_unverified);
    if (rc == CHECKPOINT_BAD_MARKER && rank == 0) { fprintf(stderr, "warning: %s\n", llmc_errmsg()); }
    if (rc == CHECKPOINT_BAD_FILE) { fprintf(stderr, "warning: rank %d: %s\n", rank, llmc_errmsg()); }
    int worst = rc < 0 ? 1 : 0;
    zero_watch_enter("all-reduce of a checkpoint's verification", -1);
    int mrc = MPI_Allreduce(MPI_IN_PLACE, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    zero_watch_leave();
    return worst || mrc != MPI_SUCCESS ? CHECKPOINT_BAD_FILE : rc;
}

int checkpoint_find_valid(const char* dir, int rank, int world, int allow_unverified) {
    int* steps = NULL;
    int n = checkpoint_steps_shared(dir, rank, &steps);
    if (n <= 0) { free(steps); return n == 0 ? -1 : -2; }
    int found = -2;
    for (int i = 0; i < n && found == -2; i++) {
        int rc = checkpoint_verify_shared(dir, steps[i], rank, world, allow_unverified);
        if (rc != CHECKPOINT_BAD_FILE) {
            found = steps[i];
            if (rank == 0 && rc == CHECKPOINT_UNVERIFIED) {
                printf("warning: the checkpoint at step %d has no checksums (an earlier version wrote it): resumed unverified "
                       "(--allow-unverified 1)\n", steps[i]);
            }
        } else if (rank == 0) {
            printf("warning: the checkpoint at step %d in %s fails its checks (see above)%s\n", steps[i], dir,
                   i + 1 < n ? "; trying the one before it" : "");
        }
    }
    free(steps);
    return found;
}

int checkpoint_prune(const char* dir, int keep, int major, int saved, int allow_unverified, int rank, int world) {
    if (keep <= 0) { return 0; }
    int* steps = NULL;
    int n = checkpoint_steps_shared(dir, rank, &steps);
    if (n < 0) { return llmc_error("--keep-checkpoints: a collective between the ranks failed"); }
    int kept = 1, rc = 0;  // `saved`, first
    char aside[4200];
    for (int i = 0; i < n; i++) {
        if (steps[i] == saved) { continue; }
        int damaged = 0;  // else beyond the K kept: removed
        if (kept < keep) {
            int verdict = checkpoint_verify_shared(dir, steps[i], rank, world, allow_unverified);
            if (verdict == CHECKPOINT_VERIFIED) { kept++; continue; }
            if (verdict == CHECKPOINT_UNVERIFIED) { continue; }
            damaged = 1;
        } else if (major > 0 && steps[i] % major == 0) {
            continue;  // -nm: a major checkpoint is never removed (nor counted beyond the K newest)
        }
        if (rank != 0) { continue; }
        if (checkpoint_retire(dir, steps[i], damaged, aside, sizeof(aside)) != 0) {
            rc = llmc_error("--keep-checkpoints: %s", llmc_errmsg());
        } else if (aside[0] != '\0') {
            printf("warning: --keep-checkpoints: the checkpoint at step %d in %s %s: moved to %s, not counted\n", steps[i], dir,
                   damaged ? "fails its checks (see above)" : "has a marker that is no file", aside);
        }
    }
    free(steps);
    return rc;
}

int checkpoint_load(const char* dir, int step, const CheckpointHeader* want, Zero* z, CheckpointHeader* got) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/state_%08d_%05d.bin", dir, step, want->rank);
    const char* why = NULL;
    FILE* fp = file_fopen(path, O_RDONLY, 0, "rb", &why);
    if (fp == NULL) { return llmc_error("cannot read checkpoint state %s: %s", path, why); }
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

void checkpoint_state_path(char* path, size_t n, const char* dir, int step, int rank) {
    snprintf(path, n, "%s/state_%08d_%05d.bin", dir, step, rank);
}

void checkpoint_set_close(CheckpointSet* s) {
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

int checkpoint_set_open(CheckpointSet* s, const char* dir, int step, const GPT2Config* c) {
    memset(s, 0, sizeof(*s));
    char path[4096];
    CheckpointHeader h0;
    checkpoint_state_path(path, sizeof(path), dir, step, 0);
    const char* why = NULL;
    FILE* fp0 = file_fopen(path, O_RDONLY, 0, "rb", &why);
    if (fp0 == NULL) { return llmc_error("cannot read checkpoint state %s: %s", path, why); }
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
        s->fp[q] = file_fopen(path, O_RDONLY, 0, "rb", &why);
        if (s->fp[q] == NULL) {
            llmc_error("cannot read checkpoint state %s (rank %d of the %d that saved step %d): %s", path, q, s->world, step, why);
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

int checkpoint_resume(const char* dir, int step, const CheckpointHeader* want, int stage, const GPT2Config* c, Zero* z,
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
