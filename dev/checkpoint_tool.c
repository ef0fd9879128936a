/*
 A checkpoint directory's contents, without the run that wrote it (llmc/checkpoint.h,
 docs/FORMATS.md):

   ./checkpoint_tool inspect DIR [STEP]
       the steps present: complete (DONE_S a manifest), or incomplete, or what is wrong with
       the marker; for STEP (default: the newest complete one) the world size, ZeRO stage,
       engine, precision, parameters, batch settings and each rank's data position
   ./checkpoint_tool consolidate DIR STEP OUT.bin [--bf16] [--allow-unverified]
       an llm.c model file (version 3 fp32, or 5 bf16) from the fp32 master in the ranks'
       state files, whatever world size and stage wrote them (not a copy of model_S.bin)
   ./checkpoint_tool extract-optimizer DIR STEP OUT [--allow-unverified]
       AdamW's fp32 m and v of the whole model in llm.c's parameter order (the format is
       below and in docs/FORMATS.md)
   ./checkpoint_tool verify DIR [STEP] [--allow-unverified]
       every file of STEP (default: every checkpoint with a marker) against the sizes and
       CRC32C of its manifest, DONE_S; exits 1 when any fails
   ./checkpoint_tool get DIR STEP TENSOR OUT.npy [--state master|m|v] [--allow-unverified]
       one tensor, whole, in fp32, as a NumPy file of its shape: the fp32 master (default)
       or AdamW's m or v, gathered from the ranks' shards whatever world size and stage
       wrote them. TENSOR is a kind of llm.c's file (wte wpe lnfw lnfb) or a block's kind
       and layer, NAME.L (qkvw.0, fcprojb.11)
   ./checkpoint_tool set DIR STEP TENSOR IN.npy OUTDIR [--state master|m|v] [--allow-unverified]
       a copy of the checkpoint in OUTDIR with one tensor's state from IN.npy (the shape get
       writes; finite values, v not negative): the master, which also sets the engine's
       compute copy (bf16 rounded to nearest) and the model file, or m or v. DIR's files are
       not touched; OUTDIR (made if missing) must hold no file of STEP. The copy gets its own
       manifest, the marker last, and is verified before the tool says it is done; resume
       from it with -o OUTDIR -y 1
   ./checkpoint_tool reset-moments DIR STEP OUTDIR [TENSOR] [--allow-unverified]
       the same copy with AdamW's m and v zero, of one tensor or of all

 consolidate, extract-optimizer, get, set and reset-moments verify the checkpoint first and refuse a damaged one,
 and one whose marker is empty (no checksums: an earlier version's, or one cut short)
 unless --allow-unverified. Their output goes neither into DIR nor over any file of the
 checkpoint (compared by device and inode, so a hard link elsewhere counts).

 Both writers go unit by unit: one unit of one array in memory at a time, read from the
 byte ranges of the ranks' files that hold it and written at its tensors' places in the
 kind-major output. The config (the units' sizes) comes from model_S.bin's 1024-byte
 header: the state files do not carry it.

 build: make checkpoint_tool (mpicc: llmc/checkpoint.h names MPI's types; no MPI call is made)
*/
#include <stdio.h>            // printf, fprintf, FILE
#include <stdlib.h>           // malloc, free, strtol, qsort
#include <string.h>           // strcmp, memset
#include <dirent.h>           // opendir: the steps present
#include <fcntl.h>            // O_RDONLY
#include <sys/stat.h>         // lstat: whether a step has a marker at all; stat: which files of a step are there
#include "llmc/checkpoint.h"  // CheckpointHeader, CheckpointSet, checkpoint_state_path; llmc/manifest.h's checks and names
#include "llmc/gpt2.h"        // GPT2Config, TensorRange, gpt2_fwrite_header, gpt2_file_offset, gpt2_fwrite_bf16
#include "llmc/utils.h"       // llmc_error, AtomicFile, llmc_input_add, path_in_dir: no output over the checkpoint read
#include "common/file.h"      // file_fopen: checkpoint files opened without blocking on a FIFO or a device
#include "zero3/reshard.h"    // zero_state_read_range: one unit of one array from the ranks' files
#include "llmc/manifest.h"  // checkpoint_name_parse, checkpoint_steps, CheckpointManifest: the DONE markers
#include "zero3/util.h"     // zero_errmsg
#include "zero3/cpu_adam.h" // cpu_adam_f32_to_bf16: set's bf16 compute copy
#include <unistd.h>           // unlink, fsync, close: set's copies
#include <errno.h>            // errno, EEXIST
#include <math.h>             // isfinite: the values set takes

// extract-optimizer's file: this header, then m (numel fp32), then v (numel fp32), each in
// llm.c's parameter order (the model file's body, unpadded)
#define OPTIMIZER_FILE_MAGIC 20241126
#define OPTIMIZER_FILE_VERSION 1
typedef struct {
    int32_t magic, version, step, pad;
    uint64_t numel;
} OptimizerFileHeader;

// the model's shape, from the header of the checkpoint's model file
static int tool_config(const char* dir, int step, GPT2Config* c) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/model_%08d.bin", dir, step);
    int32_t h[256];
    const char* why = NULL;
    FILE* fp = file_fopen(path, O_RDONLY, 0, "rb", &why);
    if (fp == NULL) { return llmc_error("cannot read %s (its header gives the model's shape): %s", path, why); }
    size_t got = fread(h, sizeof(int32_t), 256, fp);
    fclose(fp);
    if (got != 256 || h[0] != GPT2_MODEL_MAGIC) { return llmc_error("%s is not an llm.c model file (no 1024-byte header with magic %d)", path, GPT2_MODEL_MAGIC); }
    *c = (GPT2Config){h[2], h[3], h[7], h[4], h[5], h[6]};
    return gpt2_config_validate(c, path);
}

// Writes array `arr` of the checkpoint's engine state (0 the master, 1 m, 2 v) at byte
// `base` of fp in the model file's kind-major order, fp32 or bf16, unit by unit.
static int tool_write_array(const CheckpointSet* s, const GPT2Config* c, int arr, FILE* fp, long base, int bf16) {
    int nt = gpt2_num_tensors(c);
    TensorRange* ranges = (TensorRange*)malloc(nt * sizeof(TensorRange));
    size_t largest = 0;
    for (int u = 0; u < s->num_units; u++) { if (s->unit_numel[u] > largest) { largest = s->unit_numel[u]; } }
    float* unit = (float*)malloc(largest * sizeof(float));
    int rc = ranges != NULL && unit != NULL ? 0 : llmc_error("out of memory for a unit of %zu parameters", largest);
    if (rc == 0) { gpt2_tensor_ranges(c, ranges); }
    for (int u = 0, i = 0; u < s->num_units && rc == 0; u++) {
        if (zero_state_read_range(&s->src, arr, u, 0, s->unit_numel[u], unit) != 0) { rc = llmc_error("%s", zero_errmsg()); }
        for (; i < nt && ranges[i].unit == u && rc == 0; i++) {
            const float* src = unit + ranges[i].offset;
            size_t elem = bf16 ? 2 : 4;
            int ok = fseek(fp, base + (long)(gpt2_file_offset(c, &ranges[i]) * elem), SEEK_SET) == 0 &&
                     (bf16 ? gpt2_fwrite_bf16(src, ranges[i].size, fp) : fwrite(src, sizeof(float), ranges[i].size, fp) == ranges[i].size);
            if (!ok) { rc = llmc_error("writing %s's %s failed: %s", arr == 0 ? "the model" : "the moments", gpt2_param_names[ranges[i].kind], strerror(errno)); }
        }
    }
    free(unit);
    free(ranges);
    return rc;
}

// Opens the checkpoint of `step` for a writer of OUT: the model's shape (c) and the state
// files (s), every one of its files recorded as an input, so that OUT may replace none of
// them (atomic_open's output_check, by device and inode), and OUT refused inside DIR
// itself. Returns 0, or -1 with llmc_errmsg() and nothing left open.
static int tool_open(const char* dir, int step, const char* out, GPT2Config* c, CheckpointSet* s) {
    if (path_in_dir(out, dir)) {
        return llmc_error("refusing to write %s: it is in the checkpoint directory %s being read (write it elsewhere)", out, dir);
    }
    if (tool_config(dir, step, c) != 0 || checkpoint_set_open(s, dir, step, c) != 0) { return -1; }
    char path[4096];
    snprintf(path, sizeof(path), "%s/model_%08d.bin", dir, step);
    int rc = llmc_input_add(path, "the checkpoint read");
    for (int q = 0; q < s->world && rc == 0; q++) { rc = llmc_input_add(s->names[q], "the checkpoint read"); }
    if (rc != 0) { checkpoint_set_close(s); }
    return rc;
}

static int tool_consolidate(const char* dir, int step, const char* out, int bf16) {
    GPT2Config c;
    CheckpointSet s;
    if (tool_open(dir, step, out, &c, &s) != 0) { return -1; }
    AtomicFile f;
    int version = bf16 ? GPT2_MODEL_VERSION_BF16 : GPT2_MODEL_VERSION_FP32;
    int rc = atomic_open(&f, out);
    if (rc == 0) {
        int ok = gpt2_fwrite_header(f.fp, &c, version) && tool_write_array(&s, &c, 0, f.fp, 1024, bf16) == 0;
        if (!ok) { atomic_abort(&f); rc = -1; } else { rc = atomic_commit(&f, 1); }
    }
    if (rc == 0) {
        printf("wrote %s: %zu parameters (%s) from the master of %d ranks at ZeRO stage %d, step %d\n", out, gpt2_num_params(&c),
               bf16 ? "bf16" : "fp32", s.world, s.src.head.stage, step);
    }
    checkpoint_set_close(&s);
    return rc;
}

static int tool_extract_optimizer(const char* dir, int step, const char* out) {
    GPT2Config c;
    CheckpointSet s;
    if (tool_open(dir, step, out, &c, &s) != 0) { return -1; }
    size_t n = gpt2_num_params(&c);
    OptimizerFileHeader h = {OPTIMIZER_FILE_MAGIC, OPTIMIZER_FILE_VERSION, step, 0, n};
    AtomicFile f;
    int rc = atomic_open(&f, out);
    if (rc == 0) {
        long base = (long)sizeof(h);
        int ok = fwrite(&h, sizeof(h), 1, f.fp) == 1 && tool_write_array(&s, &c, 1, f.fp, base, 0) == 0 &&
                 tool_write_array(&s, &c, 2, f.fp, base + (long)(n * sizeof(float)), 0) == 0;
        if (!ok) { atomic_abort(&f); rc = -1; } else { rc = atomic_commit(&f, 1); }
    }
    if (rc == 0) { printf("wrote %s: m and v of %zu parameters from %d ranks at ZeRO stage %d, step %d\n", out, n, s.world, s.src.head.stage, step); }
    checkpoint_set_close(&s);
    return rc;
}

// The tensor TENSOR names (module comment): its index in r (nt tensors), or -1 with a message
static int tool_tensor_find(const GPT2Config* c, const TensorRange* r, int nt, const char* spec) {
    char name[32];
    const char* dot = strchr(spec, '.');
    size_t len = dot != NULL ? (size_t)(dot - spec) : strlen(spec);
    int layer = -1;
    if (len == 0 || len >= sizeof(name)) { return llmc_error("no tensor '%s' (a kind of llm.c's file, NAME.L for a block's)", spec); }
    memcpy(name, spec, len);
    name[len] = '\0';
    int kind = -1;
    for (int k = 0; k < NUM_PARAM_KINDS; k++) { if (!strcmp(gpt2_param_names[k], name)) { kind = k; } }
    if (kind < 0) { return llmc_error("no tensor kind '%s' (wte wpe ln1w ... fcprojb lnfw lnfb)", name); }
    if (dot != NULL) {
        char* end;
        long l = strtol(dot + 1, &end, 10);
        if (dot[1] == '\0' || *end != '\0' || l < 0 || l >= c->num_layers) {
            return llmc_error("tensor '%s': the layer must be 0..%d", spec, c->num_layers - 1);
        }
        layer = (int)l;
    }
    if (gpt2_is_block_kind(kind) != (layer >= 0)) {
        return llmc_error("tensor '%s': %s", spec, layer >= 0 ? "this kind is not a block's: no layer" : "a block's kind needs its layer, NAME.L");
    }
    for (int i = 0; i < nt; i++) { if (r[i].kind == kind && r[i].layer == layer) { return i; } }
    return llmc_error("tensor '%s' is not in this model", spec);
}

// A NumPy file's header dictionary (little-endian fp32, C order) for a tensor of `kind` and
// `size` elements: (rows, cols) for the matrices and embeddings (as llm.c lays them out:
// fcprojw is (C, 4C), every other (size / C, C)), (size,) for the vectors; then the whole
// header (format 1.0), padded to 64 bytes
static int tool_npy_dict(const GPT2Config* c, int kind, size_t size, char* dict, size_t cap) {
    int matrix = kind == P_WTE || kind == P_WPE || kind == P_QKVW || kind == P_ATTPROJW || kind == P_FCW || kind == P_FCPROJW;
    size_t cols = kind == P_FCPROJW ? 4 * (size_t)c->channels : (size_t)c->channels;
    return matrix ? snprintf(dict, cap, "{'descr': '<f4', 'fortran_order': False, 'shape': (%zu, %zu), }", size / cols, cols)
                  : snprintf(dict, cap, "{'descr': '<f4', 'fortran_order': False, 'shape': (%zu,), }", size);
}

static int tool_npy_header(FILE* fp, const GPT2Config* c, int kind, size_t size) {
    char dict[160];
    int n = tool_npy_dict(c, kind, size, dict, sizeof(dict));
    size_t total = (10 + (size_t)n + 1 + 63) / 64 * 64;  // magic, version, length, dict, newline: to 64 bytes
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)((total - 10) & 0xff), (unsigned char)((total - 10) >> 8)};
    if (fwrite(pre, 1, 10, fp) != 10 || fwrite(dict, 1, (size_t)n, fp) != (size_t)n) { return -1; }
    for (size_t i = 10 + (size_t)n; i + 1 < total; i++) { if (fputc(' ', fp) == EOF) { return -1; } }
    return fputc('\n', fp) == EOF ? -1 : 0;
}

static int tool_get(const char* dir, int step, const char* tensor, int arr, const char* out) {
    static const char* const arr_names[3] = {"the fp32 master", "AdamW's m", "AdamW's v"};
    GPT2Config c;
    CheckpointSet s;
    if (tool_open(dir, step, out, &c, &s) != 0) { return -1; }
    int nt = gpt2_num_tensors(&c), i = -1;
    TensorRange* ranges = (TensorRange*)malloc(nt * sizeof(TensorRange));
    float* buf = NULL;
    int rc = ranges != NULL ? 0 : llmc_error("out of memory");
    if (rc == 0) { gpt2_tensor_ranges(&c, ranges); rc = (i = tool_tensor_find(&c, ranges, nt, tensor)) < 0 ? -1 : 0; }
    if (rc == 0 && (buf = (float*)malloc(ranges[i].size * sizeof(float))) == NULL) { rc = llmc_error("out of memory for %zu values", ranges[i].size); }
    if (rc == 0 && zero_state_read_range(&s.src, arr, ranges[i].unit, ranges[i].offset, ranges[i].offset + ranges[i].size, buf) != 0) {
        rc = llmc_error("%s", zero_errmsg());
    }
    AtomicFile f;
    if (rc == 0 && (rc = atomic_open(&f, out)) == 0) {
        int ok = tool_npy_header(f.fp, &c, ranges[i].kind, ranges[i].size) == 0 &&
                 fwrite(buf, sizeof(float), ranges[i].size, f.fp) == ranges[i].size;
        if (!ok) { llmc_error("writing %s failed: %s", out, strerror(errno)); atomic_abort(&f); rc = -1; } else { rc = atomic_commit(&f, 1); }
    }
    if (rc == 0) { printf("wrote %s: %s of %s (%zu values) from %d ranks at ZeRO stage %d, step %d\n", out, arr_names[arr], tensor, ranges[i].size, s.world, s.src.head.stage, step); }
    free(buf);
    free(ranges);
    checkpoint_set_close(&s);
    return rc;
}

static int tool_int_compare(const void* a, const void* b) { return (*(const int*)a > *(const int*)b) - (*(const int*)a < *(const int*)b); }

// the steps that have any file in dir (named exactly as a checkpoint's, checkpoint_name_parse),
// sorted, into *steps (malloc'd); their count, or -1
static int tool_steps(const char* dir, int** steps) {
    DIR* d = opendir(dir);
    if (d == NULL) { return llmc_error("cannot open checkpoint directory %s: %s", dir, strerror(errno)); }
    int n = 0, cap = 16;
    int* out = (int*)malloc(cap * sizeof(int));
    struct dirent* e;
    while (out != NULL && (e = readdir(d)) != NULL) {
        int st, r, tmp;
        if (checkpoint_name_parse(e->d_name, &st, &r, &tmp) == CHECKPOINT_FILE_NONE || tmp) { continue; }
        int seen = 0;
        for (int i = 0; i < n; i++) { seen |= out[i] == st; }
        if (seen) { continue; }
        if (n == cap) { cap *= 2; int* grown = (int*)realloc(out, cap * sizeof(int)); if (grown == NULL) { free(out); out = NULL; break; } out = grown; }
        out[n++] = st;
    }
    closedir(d);
    if (out == NULL) { return llmc_error("out of memory listing %s", dir); }
    qsort(out, n, sizeof(int), tool_int_compare);
    *steps = out;
    return n;
}

// a regular file is there (stat, not an open: a FIFO of that name would block it)
static int tool_exists(const char* path) { struct stat st; return stat(path, &st) == 0 && S_ISREG(st.st_mode); }

// one step's headers, rank by rank, with no need of the model's shape
static int tool_inspect_step(const char* dir, int step) {
    char path[4096];
    CheckpointHeader h0;
    ZeroStateHeader z0;
    memset(&h0, 0, sizeof(h0));  // set at q == 0, which GCC cannot always tell
    memset(&z0, 0, sizeof(z0));
    for (int q = 0, world = 1; q < world; q++) {
        CheckpointHeader h;
        ZeroStateHeader z;
        checkpoint_state_path(path, sizeof(path), dir, step, q);
        const char* why = NULL;
        FILE* fp = file_fopen(path, O_RDONLY, 0, "rb", &why);
        if (fp == NULL) { return llmc_error("cannot read %s (rank %d of %d): %s", path, q, world, why); }
        int ok = fread(&h, sizeof(h), 1, fp) == 1 && h.magic == CHECKPOINT_MAGIC && h.version == CHECKPOINT_VERSION;
        int zok = ok && zero_state_read_raw(fp, &z) == 0;
        fclose(fp);
        if (!ok) { return llmc_error("%s is not a train_gpt2_zero3 state file of version %d", path, CHECKPOINT_VERSION); }
        if (!zok) { return llmc_error("%s: %s", path, zero_errmsg()); }
        if (q == 0) {
            h0 = h;
            z0 = z;
            world = h.world_size;
            printf("step %d of %s\n", step, dir);
            printf("  world size   %d\n", h.world_size);
            printf("  ZeRO stage   %d\n", z.stage);
            printf("  engine       %s (section version %d: shards padded to %zu bytes)\n", z.engine, z.version,
                   zero_state_align_bytes(z.version));
            printf("  precision    %s (compute copy)\n", zero_state_precision(z.elem_bytes));
            printf("  parameters   %llu (%llu padded)\n", (unsigned long long)h.num_params, (unsigned long long)z.padded_total);
            printf("  step         %d\n", h.step);
            printf("  batch        -b %d -t %d, %d accumulation steps, shuffle %d, seed %llu\n", h.B, h.T, h.grad_accum, h.shuffle,
                   (unsigned long long)h.seed);
        }
        printf("  rank %-5d   data position: epoch %llu, shard %llu, batch %llu; engine state %llu bytes%s\n", q,
               (unsigned long long)h.loader.epoch, (unsigned long long)h.loader.shard, (unsigned long long)h.loader.batch,
               (unsigned long long)z.payload_bytes,
               h.world_size != h0.world_size || h.rank != q || z.stage != z0.stage ? " (does not match rank 0's)" : "");
    }
    return 0;
}

// The steps of dir, each with its marker's state: complete (a manifest: verify checks its
// files), incomplete (no marker), or what is wrong with the marker (not a file, empty,
// damaged); then STEP's headers, by default the newest complete one's.
static int tool_inspect(const char* dir, int step) {
    int* steps = NULL;
    int n = tool_steps(dir, &steps);
    if (n < 0) { return -1; }
    if (n == 0) {
        free(steps);
        return llmc_error("no checkpoint in %s: no file named DONE_SSSSSSSS, model_SSSSSSSS.bin or state_SSSSSSSS_RRRRR.bin", dir);
    }
    char path[4096];
    int newest_complete = -1;
    for (int i = 0; i < n; i++) {
        int ranks = 0;
        for (;; ranks++) {
            checkpoint_state_path(path, sizeof(path), dir, steps[i], ranks);
            if (!tool_exists(path)) { break; }
        }
        snprintf(path, sizeof(path), "%s/DONE_%08d", dir, steps[i]);
        struct stat st;
        int marker = lstat(path, &st) == 0;
        CheckpointManifest m;
        int complete = marker && checkpoint_manifest_read(dir, steps[i], 0, &m) == 0;
        if (complete) { checkpoint_manifest_free(&m); newest_complete = steps[i]; }
        char why[sizeof(llmc_errbuf)];
        snprintf(why, sizeof(why), "%s", llmc_errmsg());
        snprintf(path, sizeof(path), "%s/model_%08d.bin", dir, steps[i]);
        printf("step %8d  %-10s  %d state files%s\n", steps[i], complete ? "complete" : marker ? "bad marker" : "incomplete", ranks,
               tool_exists(path) ? ", model file" : ", no model file");
        if (marker && !complete) { printf("               %s\n", why); }
    }
    free(steps);
    if (step < 0 && newest_complete < 0) {
        return llmc_error("no complete checkpoint in %s (see above); name a STEP to inspect its state files", dir);
    }
    return tool_inspect_step(dir, step < 0 ? newest_complete : step);
}

// Checks every file of the checkpoint of `step` against its manifest (llmc/manifest.h).
// Returns 0, or -1 with llmc_errmsg() naming the first file or line that fails. An empty
// marker is refused, unless allow_unverified: then a warning that nothing was checked, and 0.
static int tool_verify_step(const char* dir, int step, int verbose, int allow_unverified) {
    CheckpointManifest m;
    if (checkpoint_manifest_read(dir, step, allow_unverified, &m) != 0) { return -1; }
    int rc = checkpoint_manifest_check(dir, &m, 0, 1);
    if (m.version == 0) {
        fprintf(stderr, "warning: the checkpoint at step %d of %s has no checksums (an earlier version wrote it): taken "
                "unverified (--allow-unverified)\n", step, dir);
    } else if (rc == 0 && verbose) {
        uint64_t bytes = 0;
        for (int i = 0; i < m.nfiles; i++) { bytes += m.files[i].size; }
        printf("step %8d  ok: %d files, %llu bytes, every size and CRC32C as its manifest says\n", step, m.nfiles,
               (unsigned long long)bytes);
    }
    checkpoint_manifest_free(&m);
    return rc;
}

// verify DIR [STEP]: one step, or every one with a marker; every failure printed, -1 if any
static int tool_verify(const char* dir, int step, int allow_unverified) {
    if (step >= 0) { return tool_verify_step(dir, step, 1, allow_unverified); }
    int* steps;
    int n = checkpoint_steps(dir, &steps);
    if (n == 0) { return llmc_error("no complete checkpoint (no DONE marker) in %s", dir); }
    int failed = 0;
    for (int i = n - 1; i >= 0; i--) {
        if (tool_verify_step(dir, steps[i], 1, allow_unverified) != 0) {
            printf("step %8d  FAILED: %s\n", steps[i], llmc_errmsg());
            failed++;
        }
    }
    free(steps);
    if (failed > 0) { return llmc_error("%d of %d checkpoints in %s fail their checks", failed, n, dir); }
    return 0;
}

// ----------------------------------------------------------------------------
// set and reset-moments: a copy of a checkpoint, some of its state replaced

// Reads the NumPy file `path` (format 1.0-3.0, little-endian fp32, C order) holding tensor
// r (`name`), of the shape get writes for it, into *out (malloc'd). Returns 0, or -1 saying why.
static int tool_npy_read(const char* path, const char* name, const GPT2Config* c, const TensorRange* r, float** out) {
    const char* why = NULL;
    FILE* fp = file_fopen(path, O_RDONLY, 0, "rb", &why);
    if (fp == NULL) { return llmc_error("cannot read %s: %s", path, why); }
    unsigned char pre[12];
    char dict[4096];
    size_t hlen = 0;
    int rc = 0;
    if (fread(pre, 1, 10, fp) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0 || pre[6] < 1 || pre[6] > 3) {
        rc = llmc_error("%s is not a NumPy file (format 1.0-3.0)", path);
    } else if (pre[6] == 1) {
        hlen = pre[8] | (size_t)pre[9] << 8;
    } else if (fread(pre + 10, 1, 2, fp) != 2) {
        rc = llmc_error("%s: its header is cut short", path);
    } else {
        hlen = pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
    }
    if (rc == 0 && (hlen >= sizeof(dict) || fread(dict, 1, hlen, fp) != hlen)) { rc = llmc_error("%s: its header is cut short or too long", path); }
    if (rc == 0) {
        dict[hlen] = '\0';
        char want[160], shape[64], have[64] = "(none)";
        tool_npy_dict(c, r->kind, r->size, want, sizeof(want));
        const char* w = strstr(want, "'shape': ") + 9;  // the shape get writes, as np.save spells it
        const char* h = strstr(dict, "'shape': ");
        snprintf(shape, sizeof(shape), "%.*s", (int)strcspn(w, ")") + 1, w);
        if (h != NULL) { snprintf(have, sizeof(have), "%.*s", (int)strcspn(h + 9, ")") + 1, h + 9); }
        if (strstr(dict, "'descr': '<f4'") == NULL || strstr(dict, "'fortran_order': False") == NULL) {
            dict[strcspn(dict, "}") + (strchr(dict, '}') != NULL)] = '\0';  // (np.save pads it with spaces and a newline)
            rc = llmc_error("%s: not little-endian fp32 in C order (its header: %s); numpy: np.save(path, a.astype('<f4'))", path, dict);
        } else if (strcmp(have, shape) != 0) {
            rc = llmc_error("%s: shape %s, but %s is %s", path, have, name, shape);
        }
    }
    float* v = rc == 0 ? (float*)malloc(r->size * sizeof(float)) : NULL;
    if (rc == 0 && v == NULL) { rc = llmc_error("out of memory for %zu values", r->size); }
    if (rc == 0 && (fread(v, sizeof(float), r->size, fp) != r->size || fgetc(fp) != EOF)) {
        rc = llmc_error("%s: its data is not %zu fp32 values", path, r->size);
    }
    fclose(fp);
    if (rc != 0) { free(v); return -1; }
    *out = v;
    return 0;
}

// the values a state may take: finite, and v (arr 2) not negative
static int tool_values_check(const float* v, size_t n, int arr, const char* path) {
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(v[i]) || (arr == 2 && v[i] < 0.0f)) {
            return llmc_error("%s: value %zu is %g: %s must be finite%s", path, i, (double)v[i],
                              arr == 0 ? "a parameter" : arr == 1 ? "m" : "v", arr == 2 ? " and not negative" : "");
        }
    }
    return 0;
}

// A checkpoint being copied: step's model and state files from dir, written to outdir
// under their names + ".tmp", open for update, then committed (renamed, the marker last)
typedef struct {
    char outdir[4096];
    int step, world;
    FILE** fp;        // (world + 1): the model file's copy, then each rank's state file's
    char (*tmp)[4200], (*dst)[4200];
} ToolCopy;

static void tool_copy_abort(ToolCopy* k) {
    for (int i = 0; i <= k->world; i++) {
        if (k->fp != NULL && k->fp[i] != NULL) { fclose(k->fp[i]); }
        if (k->tmp != NULL) { unlink(k->tmp[i]); }
    }
    free(k->fp); free(k->tmp); free(k->dst);
    memset(k, 0, sizeof(*k));
}

// Copies the files byte for byte; refuses an outdir that holds any file of this step.
static int tool_copy_begin(ToolCopy* k, const char* dir, int step, int world, const char* outdir) {
    memset(k, 0, sizeof(*k));
    snprintf(k->outdir, sizeof(k->outdir), "%s", outdir);
    k->step = step;
    k->world = world;
    if (mkdir(outdir, 0755) != 0 && errno != EEXIST) { return llmc_error("cannot make %s: %s", outdir, strerror(errno)); }
    char marker[4200];
    snprintf(marker, sizeof(marker), "%s/DONE_%08d", outdir, step);
    k->fp = (FILE**)calloc((size_t)world + 1, sizeof(FILE*));
    k->tmp = (char(*)[4200])calloc((size_t)world + 1, sizeof(*k->tmp));
    k->dst = (char(*)[4200])calloc((size_t)world + 1, sizeof(*k->dst));
    char* buf = (char*)malloc((size_t)1 << 20);
    int rc = k->fp != NULL && k->tmp != NULL && k->dst != NULL && buf != NULL ? 0 : llmc_error("out of memory");
    struct stat st;
    if (rc == 0 && lstat(marker, &st) == 0) { rc = llmc_error("%s already holds a checkpoint of step %d (%s): give a directory without one", outdir, step, marker); }
    for (int i = 0; i <= world && rc == 0; i++) {
        char src[4200];
        if (i == 0) {
            snprintf(src, sizeof(src), "%s/model_%08d.bin", dir, step);
            snprintf(k->dst[i], sizeof(k->dst[i]), "%s/model_%08d.bin", outdir, step);
        } else {
            checkpoint_state_path(src, sizeof(src), dir, step, i - 1);
            checkpoint_state_path(k->dst[i], sizeof(k->dst[i]), outdir, step, i - 1);
        }
        snprintf(k->tmp[i], sizeof(k->tmp[i]), "%s.tmp", k->dst[i]);
        if (lstat(k->dst[i], &st) == 0 || lstat(k->tmp[i], &st) == 0) {
            k->tmp[i][0] = '\0';  // (not ours to remove)
            rc = llmc_error("%s already holds %s of step %d: give a directory without it", outdir, lstat(k->dst[i], &st) == 0 ? k->dst[i] : k->tmp[i], step);
            break;
        }
        int fd = open(k->tmp[i], O_RDWR | O_CREAT | O_EXCL, 0644);
        const char* why = NULL;
        FILE* in = file_fopen(src, O_RDONLY, 0, "rb", &why);
        if (fd < 0 || (k->fp[i] = fdopen(fd, "w+b")) == NULL) {
            if (fd >= 0) { close(fd); }
            rc = llmc_error("cannot create %s: %s", k->tmp[i], strerror(errno));
        } else if (in == NULL) {
            rc = llmc_error("cannot read %s: %s", src, why);
        }
        for (size_t n; rc == 0 && (n = fread(buf, 1, (size_t)1 << 20, in)) > 0;) {
            if (fwrite(buf, 1, n, k->fp[i]) != n) { rc = llmc_error("writing %s failed: %s", k->tmp[i], strerror(errno)); }
        }
        if (rc == 0 && ferror(in)) { rc = llmc_error("reading %s failed", src); }
        if (in != NULL) { fclose(in); }
    }
    free(buf);
    if (rc != 0) { tool_copy_abort(k); }
    return rc;
}

// Flushes and syncs the copies, renames them into place and writes their manifest (the
// marker last: a copy cut short is no checkpoint), then verifies it as a reader would.
static int tool_copy_commit(ToolCopy* k) {
    uint64_t* pairs = (uint64_t*)malloc(((size_t)k->world + 1) * 2 * sizeof(uint64_t));
    int rc = pairs != NULL ? 0 : llmc_error("out of memory");
    for (int i = 0; i <= k->world && rc == 0; i++) {
        if (fflush(k->fp[i]) != 0 || fsync(fileno(k->fp[i])) != 0) { rc = llmc_error("writing %s failed: %s", k->tmp[i], strerror(errno)); }
        if (fclose(k->fp[i]) != 0 && rc == 0) { rc = llmc_error("writing %s failed: %s", k->tmp[i], strerror(errno)); }
        k->fp[i] = NULL;
        if (rc == 0) { rc = checkpoint_file_sum(k->tmp[i], pairs + 2 * i); }
    }
    for (int i = 0; i <= k->world && rc == 0; i++) {
        if (rename(k->tmp[i], k->dst[i]) != 0) { rc = llmc_error("renaming %s failed: %s", k->tmp[i], strerror(errno)); }
        else { snprintf(k->tmp[i], sizeof(k->tmp[i]), "%s", k->dst[i]); }  // (removed if the marker fails)
    }
    if (rc == 0) { rc = checkpoint_manifest_write(k->outdir, k->step, k->world, pairs); }
    free(pairs);
    if (rc != 0) { tool_copy_abort(k); return -1; }
    free(k->fp); free(k->tmp); free(k->dst);
    return tool_verify_step(k->outdir, k->step, 0, 0);
}

// Writes `vals` (tensor r's n values) into array arr of the copies' state files and, for
// the master, into the engine's compute copy (array 3, fp32 or bf16 rounded to nearest)
// and the model file (fp32 or bf16, as the checkpoint's is)
static int tool_copy_write(ToolCopy* k, const CheckpointSet* s, const GPT2Config* c, const TensorRange* r, int arr, const float* vals) {
    size_t a = r->offset, b = r->offset + r->size;
    if (zero_state_write_range(&s->src, k->fp + 1, arr, r->unit, a, b, vals) != 0) { return llmc_error("%s", zero_errmsg()); }
    if (arr != 0) { return 0; }
    const ZeroStateLayout* l = &s->src.layout;
    if (l->num_arrays == 4) {
        int rc = 0;
        if (l->arrays[3].elem_bytes == 4) {
            rc = zero_state_write_range(&s->src, k->fp + 1, 3, r->unit, a, b, vals);
        } else {
            uint16_t* x = (uint16_t*)malloc(r->size * sizeof(uint16_t));
            if (x == NULL) { return llmc_error("out of memory"); }
            for (size_t i = 0; i < r->size; i++) { x[i] = cpu_adam_f32_to_bf16(vals[i]); }
            rc = zero_state_write_range(&s->src, k->fp + 1, 3, r->unit, a, b, x);
            free(x);
        }
        if (rc != 0) { return llmc_error("%s", zero_errmsg()); }
    }
    int32_t h[256];
    FILE* m = k->fp[0];
    if (fseek(m, 0, SEEK_SET) != 0 || fread(h, sizeof(int32_t), 256, m) != 256) { return llmc_error("cannot read %s's header", k->tmp[0]); }
    int bf16 = h[1] == GPT2_MODEL_VERSION_BF16;
    int ok = fseek(m, 1024 + (long)(gpt2_file_offset(c, r) * (bf16 ? 2 : 4)), SEEK_SET) == 0 &&
             (bf16 ? gpt2_fwrite_bf16(vals, r->size, m) : fwrite(vals, sizeof(float), r->size, m) == r->size);
    return ok ? 0 : llmc_error("writing %s failed: %s", k->tmp[0], strerror(errno));
}

// set: tensor `tensor`'s array arr from in.npy; reset-moments (in NULL): m and v zero, of
// one tensor or (tensor NULL) of all
static int tool_edit(const char* dir, int step, const char* tensor, int arr, const char* in, const char* outdir) {
    GPT2Config c;
    CheckpointSet s;
    char probe[4200];
    snprintf(probe, sizeof(probe), "%s/model_%08d.bin", outdir, step);
    if (tool_open(dir, step, probe, &c, &s) != 0) { return -1; }
    int nt = gpt2_num_tensors(&c);
    TensorRange* ranges = (TensorRange*)malloc(nt * sizeof(TensorRange));
    float* vals = NULL;
    int rc = ranges != NULL ? 0 : llmc_error("out of memory"), first = 0, last = nt;
    if (rc == 0) { gpt2_tensor_ranges(&c, ranges); }
    if (rc == 0 && tensor != NULL) { rc = (first = tool_tensor_find(&c, ranges, nt, tensor)) < 0 ? -1 : 0; last = first + 1; }
    if (rc == 0 && in != NULL && (tool_npy_read(in, tensor, &c, &ranges[first], &vals) != 0 || tool_values_check(vals, ranges[first].size, arr, in) != 0)) { rc = -1; }
    ToolCopy k;
    memset(&k, 0, sizeof(k));
    if (rc == 0) { rc = tool_copy_begin(&k, dir, step, s.world, outdir); }
    for (int i = first; i < last && rc == 0 && in == NULL; i++) {  // reset: zeros into m and v
        float* z = (float*)calloc(ranges[i].size, sizeof(float));
        rc = z != NULL && tool_copy_write(&k, &s, &c, &ranges[i], 1, z) == 0 && tool_copy_write(&k, &s, &c, &ranges[i], 2, z) == 0 ? 0 : -1;
        free(z);
    }
    if (rc == 0 && in != NULL) { rc = tool_copy_write(&k, &s, &c, &ranges[first], arr, vals); }
    if (rc == 0) { rc = tool_copy_commit(&k); } else if (k.fp != NULL) { tool_copy_abort(&k); }
    if (rc == 0 && in != NULL) {
        printf("wrote %s: step %d of %s with %s's %s from %s (%zu values), verified\n", outdir, step, dir, tensor,
               arr == 0 ? "parameters (master, compute copy, model file)" : arr == 1 ? "m" : "v", in, ranges[first].size);
    } else if (rc == 0) {
        printf("wrote %s: step %d of %s with AdamW's m and v of %s zero, verified\n", outdir, step, dir, tensor != NULL ? tensor : "every tensor");
    }
    free(vals);
    free(ranges);
    checkpoint_set_close(&s);
    return rc;
}

static void usage(void) {
    fprintf(stderr, "usage: checkpoint_tool inspect DIR [STEP]\n"
                    "       checkpoint_tool consolidate DIR STEP OUT.bin [--bf16] [--allow-unverified]\n"
                    "       checkpoint_tool extract-optimizer DIR STEP OUT [--allow-unverified]\n"
                    "       checkpoint_tool verify DIR [STEP] [--allow-unverified]\n"
                    "       checkpoint_tool get DIR STEP TENSOR OUT.npy [--state master|m|v] [--allow-unverified]\n"
                    "       checkpoint_tool set DIR STEP TENSOR IN.npy OUTDIR [--state master|m|v] [--allow-unverified]\n"
                    "       checkpoint_tool reset-moments DIR STEP OUTDIR [TENSOR] [--allow-unverified]\n"
                    "TENSOR: wte wpe lnfw lnfb, or a block's kind and layer: qkvw.0, fcprojb.11 (llm.c's names)\n"
                    "--allow-unverified takes a checkpoint whose DONE marker is empty (an earlier version's, without\n"
                    "checksums) unverified; without it such a checkpoint is refused\n");
}

// a step argument: a non-negative integer
static int parse_step(const char* s, int* step) {
    char* end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < 0 || v > 99999999) { return llmc_error("step '%s' is not a number in [0, 99999999]", s); }
    *step = (int)v;
    return 0;
}

int main(int argc, char** argv) {
    // the options anywhere after the command, the rest positional: CMD DIR [STEP] [TENSOR] [IN] [OUT]
    const char* arg[6];
    const char* state = NULL;
    int nargs = 0, bf16 = 0, allow = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--bf16")) { bf16 = 1; }
        else if (!strcmp(argv[i], "--allow-unverified")) { allow = 1; }
        else if (!strcmp(argv[i], "--state") && i + 1 < argc) { state = argv[++i]; }
        else if (nargs == 6 || (argv[i][0] == '-' && argv[i][1] == '-')) { usage(); return 2; }
        else { arg[nargs++] = argv[i]; }
    }
    int arr = 0;  // --state: the engine state's array (0 the master, 1 m, 2 v)
    if (state != NULL && strcmp(state, "master") != 0) {
        if (!strcmp(state, "m")) { arr = 1; }
        else if (!strcmp(state, "v")) { arr = 2; }
        else { fprintf(stderr, "error: --state %s: it is master, m or v\n", state); return 2; }
    }
    if (nargs < 2 || (state != NULL && strcmp(arg[0], "get") != 0 && strcmp(arg[0], "set") != 0)) { usage(); return 2; }
    const char* cmd = arg[0];
    const char* dir = arg[1];
    int step = -1, rc;
    if (!strcmp(cmd, "inspect") && nargs <= 3 && !bf16 && !allow) {
        rc = nargs == 3 && parse_step(arg[2], &step) != 0 ? -1 : tool_inspect(dir, step);
    } else if (!strcmp(cmd, "consolidate") && nargs == 4) {
        rc = parse_step(arg[2], &step) != 0 || tool_verify_step(dir, step, 0, allow) != 0 ? -1 : tool_consolidate(dir, step, arg[3], bf16);
    } else if (!strcmp(cmd, "extract-optimizer") && nargs == 4 && !bf16) {
        rc = parse_step(arg[2], &step) != 0 || tool_verify_step(dir, step, 0, allow) != 0 ? -1 : tool_extract_optimizer(dir, step, arg[3]);
    } else if (!strcmp(cmd, "get") && nargs == 5 && !bf16) {
        rc = parse_step(arg[2], &step) != 0 || tool_verify_step(dir, step, 0, allow) != 0 ? -1 : tool_get(dir, step, arg[3], arr, arg[4]);
    } else if (!strcmp(cmd, "set") && nargs == 6 && !bf16) {
        rc = parse_step(arg[2], &step) != 0 || tool_verify_step(dir, step, 0, allow) != 0 ? -1 : tool_edit(dir, step, arg[3], arr, arg[4], arg[5]);
    } else if (!strcmp(cmd, "reset-moments") && (nargs == 4 || nargs == 5) && !bf16) {
        rc = parse_step(arg[2], &step) != 0 || tool_verify_step(dir, step, 0, allow) != 0 ? -1
           : tool_edit(dir, step, nargs == 5 ? arg[4] : NULL, 1, NULL, arg[3]);
    } else if (!strcmp(cmd, "verify") && nargs <= 3 && !bf16) {
        rc = nargs == 3 && parse_step(arg[2], &step) != 0 ? -1 : tool_verify(dir, step, allow);
    } else {
        usage();
        return 2;
    }
    if (rc != 0) { fprintf(stderr, "error: %s\n", llmc_errmsg()); return 1; }
    return 0;
}
