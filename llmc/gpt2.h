/*
 The GPT-2 / GPT-3 model description: configuration, descriptors (d12, gpt3:c768),
 the parameter layout and the units' use schedule, llm.c model files, and random init.
 No compute here: the forward and backward live in the trainer, where the ZeRO hooks are
 woven in.

 Parameter layout. llm.c's file stores the 16 parameter kinds one after another,
 each kind for all layers at once (all ln1w, then all ln1b, ...). ZeRO partitions by
 *layer unit* instead, so in memory the parameters are unit-major:

   unit 0        wte (Vp, C), wpe (maxT, C)                     the embedding
   unit 1 + l    ln1w, ln1b, qkvw, qkvb, attprojw, attprojb,
                 ln2w, ln2b, fcw, fcb, fcprojw, fcprojb        transformer block l
   unit L + 1    lnfw (C), lnfb (C)                            the final layernorm

 Each unit is one contiguous range of the flat buffer, so gathering a unit is one
 collective into one buffer. The file reader and writer permute between the two; the
 reader and the random init make any range of a unit alone (a rank's shard), never the
 whole model.
*/
#ifndef LLMC_GPT2_H
#define LLMC_GPT2_H

#include <stdio.h>    // FILE, fwrite, snprintf
#include <stdint.h>   // int32_t, uint16_t, uint32_t
#include <stdlib.h>   // malloc, free, strtol
#include <string.h>   // strcmp, strncmp, memcpy
#include <math.h>     // sqrtf, isfinite
#include <errno.h>    // errno: the reason a read or write failed
#include <fcntl.h>    // O_RDONLY: a model file for partitioned reads
#include <unistd.h>   // pread, pwrite, close: each rank's parts of a model file
#include <sys/stat.h> // fstat: the model file's kind and size
#include "llmc/utils.h"  // llmc_error, AtomicFile
#include "common/file.h" // file_open: a model file that is a FIFO or a device is refused, never waited on
#include "llmc/rand.h"   // rng_normal_at: counter-based samples for init

#define GPT2_MODEL_MAGIC 20240326
#define GPT2_MODEL_VERSION_FP32 3
#define GPT2_MODEL_VERSION_BF16 5
#define GPT2_VOCAB_SIZE 50257
#define GPT2_PADDED_VOCAB_SIZE 50304  // 50257 rounded up to a multiple of 128

typedef struct {
    int max_seq_len;       // maxT: 1024 for GPT-2, 2048 for GPT-3
    int vocab_size;        // V: 50257
    int padded_vocab_size; // Vp: V padded for aligned matmuls; rows V..Vp-1 of wte are unused
    int num_layers;        // L
    int num_heads;         // NH
    int channels;          // C
} GPT2Config;

// the 16 parameter kinds, in llm.c's file order
enum {
    P_WTE, P_WPE,
    P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_ATTPROJW, P_ATTPROJB,
    P_LN2W, P_LN2B, P_FCW, P_FCB, P_FCPROJW, P_FCPROJB,
    P_LNFW, P_LNFB,
    NUM_PARAM_KINDS
};
#define NUM_BLOCK_TENSORS 12  // P_LN1W .. P_FCPROJB, the tensors of one block

static const char* const gpt2_param_names[NUM_PARAM_KINDS] = {
    "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};

// weight decay applies to the matrices and embeddings only, not to biases and norms
static const int gpt2_param_decay[NUM_PARAM_KINDS] = {
    1, 1, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0};

// elements of one tensor of each kind: per layer for the block kinds
static void gpt2_param_sizes(const GPT2Config* c, size_t sizes[NUM_PARAM_KINDS]) {
    size_t C = c->channels, Vp = c->padded_vocab_size, maxT = c->max_seq_len;
    sizes[P_WTE] = Vp * C;         sizes[P_WPE] = maxT * C;
    sizes[P_LN1W] = C;             sizes[P_LN1B] = C;
    sizes[P_QKVW] = 3 * C * C;     sizes[P_QKVB] = 3 * C;
    sizes[P_ATTPROJW] = C * C;     sizes[P_ATTPROJB] = C;
    sizes[P_LN2W] = C;             sizes[P_LN2B] = C;
    sizes[P_FCW] = 4 * C * C;      sizes[P_FCB] = 4 * C;
    sizes[P_FCPROJW] = C * 4 * C;  sizes[P_FCPROJB] = C;
    sizes[P_LNFW] = C;             sizes[P_LNFB] = C;
}

static inline int gpt2_is_block_kind(int k) { return k >= P_LN1W && k <= P_FCPROJB; }

// ----------------------------------------------------------------------------
// units

static inline int gpt2_num_units(const GPT2Config* c) { return c->num_layers + 2; }

// elements in unit u
static size_t gpt2_unit_size(const GPT2Config* c, int u) {
    size_t s[NUM_PARAM_KINDS];
    gpt2_param_sizes(c, s);
    if (u == 0) { return s[P_WTE] + s[P_WPE]; }
    if (u == c->num_layers + 1) { return s[P_LNFW] + s[P_LNFB]; }
    size_t n = 0;
    for (int k = P_LN1W; k <= P_FCPROJB; k++) { n += s[k]; }
    return n;
}

// element offset of unit u in the unpadded flat buffer (u == num_units gives the total)
static size_t gpt2_unit_offset(const GPT2Config* c, int u) {
    size_t off = 0;
    for (int i = 0; i < u; i++) { off += gpt2_unit_size(c, i); }
    return off;
}

static inline size_t gpt2_num_params(const GPT2Config* c) {
    return gpt2_unit_offset(c, gpt2_num_units(c));
}

// The order in which the forward and backward use the units. Forward: the embedding,
// the blocks, the final layernorm, then the embedding again as the classifier (tied
// weights). Backward: the classifier (adjacent to its forward use, so never gathered
// twice there), the final layernorm, the blocks in reverse. The encoder's backward
// needs only the token ids, not wte, so it is not a use. Whether wte stays gathered
// from the encoder to the classifier is the schedule's reuse-distance rule.
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

// FLOPs of a training step per token at sequence length T (for MFU): 6 per parameter in a
// matmul (forward 2, backward 4), the matmul parameters being the 12 C^2 of each block's
// qkv, attproj, fc and fcproj weights plus the classifier's Vp x C (the padded columns are
// computed too), and 12 L T C for the attention's Q K^T and att V (forward + backward)
static inline double gpt2_flops_per_token(const GPT2Config* c, int T) {
    double C = c->channels, L = c->num_layers;
    double matmul_params = L * 12.0 * C * C + (double)c->padded_vocab_size * C;
    return 6.0 * matmul_params + 12.0 * L * T * C;
}

// A parameter tensor as the optimizer and the ZeRO engine see it: a range of one unit.
typedef struct {
    int kind;       // P_WTE ...
    int layer;      // block index, or -1 outside the blocks
    int unit;       // the unit that holds it
    size_t offset;  // element offset inside the unit
    size_t size;    // elements
    int decay;      // 1 if AdamW weight decay applies
} TensorRange;

static inline int gpt2_num_tensors(const GPT2Config* c) { return 4 + NUM_BLOCK_TENSORS * c->num_layers; }

// fills out[gpt2_num_tensors(c)] in unit order
static void gpt2_tensor_ranges(const GPT2Config* c, TensorRange* out) {
    size_t s[NUM_PARAM_KINDS];
    gpt2_param_sizes(c, s);
    int n = 0, L = c->num_layers;
    for (int u = 0; u < gpt2_num_units(c); u++) {
        int first = u == 0 ? P_WTE : (u == L + 1 ? P_LNFW : P_LN1W);
        int last = u == 0 ? P_WPE : (u == L + 1 ? P_LNFB : P_FCPROJB);
        size_t off = 0;
        for (int k = first; k <= last; k++) {
            out[n++] = (TensorRange){k, gpt2_is_block_kind(k) ? u - 1 : -1, u, off, s[k], gpt2_param_decay[k]};
            off += s[k];
        }
    }
}

// [Note: units and files] A rank's shard is a range of one unit (zero3/plan.h), but an
// llm.c file is kind-major: one unit's range is up to NUM_BLOCK_TENSORS separate runs of
// the file. Partitioned init, load and save all walk a shard through these parts, so a
// rank touches only its own elements and never a whole-model buffer.
//
// One part of a unit's element range: n elements lying in one tensor (index `tensor` in
// gpt2_tensor_ranges' order, of `kind`, block `layer` or -1), starting at element `elem` of
// that tensor, at unit-local offset unit_off and at element file_off of a model file's body.
typedef struct { int tensor, kind, layer; size_t elem, unit_off, file_off, n; } Gpt2Part;

// the index (gpt2_tensor_ranges' order) of unit u's first tensor
static inline int gpt2_unit_first_tensor(const GPT2Config* c, int u) {
    if (u == 0) { return 0; }
    if (u == c->num_layers + 1) { return 2 + NUM_BLOCK_TENSORS * c->num_layers; }
    return 2 + NUM_BLOCK_TENSORS * (u - 1);
}

// The parts of unit u's elements [begin, end) (end <= gpt2_unit_size(c, u)), in unit order,
// empty ones left out: at most NUM_BLOCK_TENSORS. Returns how many were written to out.
static int gpt2_unit_parts(const GPT2Config* c, int u, size_t begin, size_t end, Gpt2Part out[NUM_BLOCK_TENSORS]) {
    size_t sizes[NUM_PARAM_KINDS], kind_start[NUM_PARAM_KINDS], off = 0;
    gpt2_param_sizes(c, sizes);
    for (int k = 0; k < NUM_PARAM_KINDS; k++) {  // where each kind starts in the file's body
        kind_start[k] = off;
        off += sizes[k] * (gpt2_is_block_kind(k) ? (size_t)c->num_layers : 1);
    }
    int L = c->num_layers, n = 0, tensor = gpt2_unit_first_tensor(c, u);
    int first = u == 0 ? P_WTE : (u == L + 1 ? P_LNFW : P_LN1W);
    int last = u == 0 ? P_WPE : (u == L + 1 ? P_LNFB : P_FCPROJB);
    int layer = gpt2_is_block_kind(first) ? u - 1 : -1;
    size_t t0 = 0;  // the tensor's first element in the unit
    for (int k = first; k <= last; k++, tensor++) {
        size_t t1 = t0 + sizes[k];
        size_t a = begin > t0 ? begin : t0, b = end < t1 ? end : t1;
        if (a < b) {
            size_t file_tensor = kind_start[k] + (layer >= 0 ? (size_t)layer * sizes[k] : 0);
            out[n++] = (Gpt2Part){tensor, k, layer, a - t0, a, file_tensor + (a - t0), b - a};
        }
        t0 = t1;
    }
    return n;
}

// Pointers into one unit's flat buffer; the same helpers serve parameters and gradients.
typedef struct { float *wte, *wpe; } EmbedTensors;
typedef struct {
    float *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb;
    float *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
} BlockTensors;
typedef struct { float *lnfw, *lnfb; } FinalTensors;

static inline EmbedTensors gpt2_embed_tensors(const GPT2Config* c, float* unit) {
    return (EmbedTensors){unit, unit + (size_t)c->padded_vocab_size * c->channels};
}

// where each tensor of a block starts inside the block's unit, in elements, indexed by
// kind - P_LN1W (the same for every block; the GPU trainer's views use it too)
static inline void gpt2_block_offsets(const GPT2Config* c, size_t off[NUM_BLOCK_TENSORS]) {
    size_t sizes[NUM_PARAM_KINDS];
    gpt2_param_sizes(c, sizes);
    size_t o = 0;
    for (int k = P_LN1W; k <= P_FCPROJB; k++) {
        off[k - P_LN1W] = o;
        o += sizes[k];
    }
}

static inline BlockTensors gpt2_block_tensors(const GPT2Config* c, float* unit) {
    size_t o[NUM_BLOCK_TENSORS];
    gpt2_block_offsets(c, o);
    BlockTensors t = {unit + o[0], unit + o[1], unit + o[2], unit + o[3], unit + o[4], unit + o[5],
                      unit + o[6], unit + o[7], unit + o[8], unit + o[9], unit + o[10], unit + o[11]};
    return t;
}

static inline FinalTensors gpt2_final_tensors(const GPT2Config* c, float* unit) {
    return (FinalTensors){unit, unit + c->channels};
}

// ----------------------------------------------------------------------------
// configuration: validation and descriptors

static int gpt2_config_validate(const GPT2Config* c, const char* what) {
    if (c->max_seq_len <= 0 || c->max_seq_len > (1 << 20)) { return llmc_error("%s: max_seq_len %d out of range", what, c->max_seq_len); }
    if (c->vocab_size <= 0 || c->vocab_size > 65536) { return llmc_error("%s: vocab_size %d out of range (1..65536, tokens are uint16)", what, c->vocab_size); }
    if (c->padded_vocab_size < c->vocab_size || c->padded_vocab_size > (1 << 20)) {
        return llmc_error("%s: padded_vocab_size %d must be >= vocab_size %d", what, c->padded_vocab_size, c->vocab_size);
    }
    if (c->num_layers <= 0 || c->num_layers > 1024) { return llmc_error("%s: num_layers %d out of range", what, c->num_layers); }
    if (c->channels <= 0 || c->channels > 65536) { return llmc_error("%s: channels %d out of range", what, c->channels); }
    if (c->num_heads <= 0 || c->channels % c->num_heads != 0) {
        return llmc_error("%s: channels %d not divisible by num_heads %d", what, c->channels, c->num_heads);
    }
    return 0;
}

// parses a positive decimal integer that fills the whole string
static int gpt2_parse_positive(const char* s, int* out) {
    if (*s == '\0') { return -1; }
    char* end = NULL;
    long v = strtol(s, &end, 10);
    if (*end != '\0' || v <= 0 || v > 1000000) { return -1; }
    *out = (int)v;
    return 0;
}

// The GPT-3 family by channel width (Brown et al. 2020, table 2.1). Two entries of the
// paper's table cannot be built as written and are mended the way common
// reimplementations do: 1.3B lists 24 heads of 128 for 2048 channels (we use 16 heads of
// 128), and 13B lists 5140 channels (we use 5120 = 40 heads of 128).
typedef struct { int channels, layers, heads; const char* name; } GPT3Size;
static const GPT3Size gpt3_sizes[] = {
    {768, 12, 12, "125M"},   {1024, 24, 16, "350M"},  {1536, 24, 16, "760M"},
    {2048, 24, 16, "1.3B"},  {2560, 32, 32, "2.7B"},  {4096, 32, 32, "6.7B"},
    {5120, 40, 40, "13B"},   {12288, 96, 96, "175B"},
};

// "dN" or "gpt2:dN": GPT-2 family of depth N, maxT 1024. The published sizes take llm.c's
// widths (d6 384, d12 768 = 124M, d24 1024 = 350M, d36 1280 = 774M, d48 1600 = 1558M,
// and its d60, d72, d84); any other depth N gets N heads of 64 channels.
// "gpt3:cC": the GPT-3 size of channel width C, maxT 2048.
static int gpt2_config_from_descriptor(const char* desc, GPT2Config* c) {
    const char* s = desc;
    int gpt3 = 0;
    if (strncmp(s, "gpt2:", 5) == 0) { s += 5; }
    else if (strncmp(s, "gpt3:", 5) == 0) { s += 5; gpt3 = 1; }
    c->vocab_size = GPT2_VOCAB_SIZE;
    c->padded_vocab_size = GPT2_PADDED_VOCAB_SIZE;
    int n;
    if (!gpt3 && s[0] == 'd' && gpt2_parse_positive(s + 1, &n) == 0) {
        if (n > 1024) { return llmc_error("model descriptor '%s': depth %d is too large", desc, n); }
        c->max_seq_len = 1024;
        c->num_layers = n;
        c->num_heads = n;
        c->channels = 64 * n;
        static const int llmc_sizes[][3] = {  // depth, channels, heads
            {6, 384, 6}, {12, 768, 12}, {24, 1024, 16}, {36, 1280, 20}, {48, 1600, 25},
            {60, 1920, 30}, {72, 2880, 30}, {84, 3456, 36},
        };
        for (size_t i = 0; i < sizeof(llmc_sizes) / sizeof(llmc_sizes[0]); i++) {
            if (llmc_sizes[i][0] == n) { c->channels = llmc_sizes[i][1]; c->num_heads = llmc_sizes[i][2]; }
        }
        return 0;
    }
    if (gpt3 && s[0] == 'c' && gpt2_parse_positive(s + 1, &n) == 0) {
        for (size_t i = 0; i < sizeof(gpt3_sizes) / sizeof(gpt3_sizes[0]); i++) {
            if (gpt3_sizes[i].channels == n) {
                c->max_seq_len = 2048;
                c->num_layers = gpt3_sizes[i].layers;
                c->num_heads = gpt3_sizes[i].heads;
                c->channels = n;
                return 0;
            }
        }
        return llmc_error("model descriptor '%s': no GPT-3 size has %d channels "
                          "(known: 768, 1024, 1536, 2048, 2560, 4096, 5120, 12288)", desc, n);
    }
    return llmc_error("model descriptor '%s' not understood: use dN, gpt2:dN or gpt3:cC "
                      "(for example d12, gpt2:d24, gpt3:c768), or a model .bin file", desc);
}

// ----------------------------------------------------------------------------
// llm.c model files

// [Note: partitioned reads] A model file is never read whole: each rank reads the byte
// ranges of its own shard (gpt2_unit_parts maps a unit's elements to the file's), so no
// rank ever holds more than its shard of the model. gpt2_source_open checks the header and
// the size once; gpt2_source_read then reads, converts and checks any range of a unit.

// Where a model's initial parameters come from: an llm.c file open for reading (fd >= 0),
// or GPT-2's random init from a seed (fd < 0). path is the caller's string, kept for
// messages (it must outlive the source).
typedef struct {
    GPT2Config config;
    int fd;              // the open model file, or -1: random init
    size_t elem;         // bytes per parameter in the file: 4 (version 3, fp32) or 2 (version 5, bf16)
    uint64_t seed;       // random init
    const char* path;
} GPT2Source;

// a source of random init from seed for the model c
static void gpt2_source_random(GPT2Source* s, const GPT2Config* c, uint64_t seed) {
    memset(s, 0, sizeof(*s));
    s->config = *c;
    s->fd = -1;
    s->seed = seed;
}

static void gpt2_source_close(GPT2Source* s) {
    if (s->fd >= 0) { close(s->fd); }
    s->fd = -1;
}

// Opens an llm.c model file (version 3 fp32 or version 5 bf16): its header must describe
// a valid model and the file's size exactly its parameters. Nothing of the body is read.
// On failure nothing stays open.
static int gpt2_source_open(GPT2Source* s, const char* path) {
    int32_t header[256];
    GPT2Config* c = &s->config;
    struct stat st;
    size_t n;
    long expected;
    memset(s, 0, sizeof(*s));
    s->path = path;
    const char* why = NULL;
    s->fd = file_open(path, O_RDONLY, 0, FILE_REGULAR, &why);
    if (s->fd < 0) { return llmc_error("cannot open model file %s: %s", path, why); }
    if (fstat(s->fd, &st) != 0) { llmc_error("cannot stat model file %s: %s", path, strerror(errno)); goto fail; }
    if (pread(s->fd, header, sizeof(header), 0) != (ssize_t)sizeof(header)) {
        llmc_error("model file %s is truncated: shorter than its 1024-byte header", path);
        goto fail;
    }
    if (header[0] != GPT2_MODEL_MAGIC) {
        llmc_error("model file %s has bad magic %d (expected %d): not an llm.c model file", path, header[0], GPT2_MODEL_MAGIC);
        goto fail;
    }
    if (header[1] != GPT2_MODEL_VERSION_FP32 && header[1] != GPT2_MODEL_VERSION_BF16) {
        llmc_error("model file %s has version %d: only 3 (fp32) and 5 (bf16) are supported", path, header[1]);
        goto fail;
    }
    s->elem = header[1] == GPT2_MODEL_VERSION_FP32 ? 4 : 2;
    c->max_seq_len = header[2];
    c->vocab_size = header[3];
    c->num_layers = header[4];
    c->num_heads = header[5];
    c->channels = header[6];
    c->padded_vocab_size = header[7];
    if (gpt2_config_validate(c, path) != 0) { goto fail; }
    n = gpt2_num_params(c);
    expected = 1024 + (long)(n * s->elem);
    if ((long)st.st_size != expected) {
        llmc_error("model file %s is %ld bytes but its header describes %ld (%zu parameters, %s)%s", path,
                   (long)st.st_size, expected, n, s->elem == 4 ? "fp32" : "bf16", (long)st.st_size < expected ? ": truncated" : "");
        goto fail;
    }
    return 0;
fail:
    gpt2_source_close(s);
    return -1;
}

// n parameters of the file at element file_off of its body into out (fp32), through a
// bounded buffer; every one must be finite. part names them in a message.
static int gpt2_source_read_part(const GPT2Source* s, const Gpt2Part* part, float* out) {
    uint16_t buf[16384];  // 32 KiB: the most read at once (16384 bf16 or 8192 fp32 parameters)
    size_t per = sizeof(buf) / s->elem;
    for (size_t done = 0; done < part->n;) {
        size_t k = part->n - done < per ? part->n - done : per;
        size_t bytes = k * s->elem, got = 0;
        off_t at = (off_t)(1024 + (part->file_off + done) * s->elem);
        while (got < bytes) {
            ssize_t r = pread(s->fd, (char*)buf + got, bytes - got, at + (off_t)got);
            if (r < 0 && errno == EINTR) { continue; }
            if (r <= 0) {
                return llmc_error("model file %s: reading %zu bytes at byte offset %lld failed: %s", s->path, bytes,
                                  (long long)at, r < 0 ? strerror(errno) : "the file is shorter than when it was opened");
            }
            got += (size_t)r;
        }
        float* dst = out + done;
        if (s->elem == 4) {
            memcpy(dst, buf, bytes);
        } else {
            for (size_t j = 0; j < k; j++) {
                uint32_t bits = (uint32_t)buf[j] << 16;  // bf16 is the top half of an fp32
                memcpy(&dst[j], &bits, sizeof(float));
            }
        }
        // a NaN or inf would make every loss and gradient after it non-finite: name the
        // first one by its tensor and its place in the file
        for (size_t j = 0; j < k; j++) {
            if (!isfinite(dst[j])) {
                char layer[32] = "";
                if (part->layer >= 0) { snprintf(layer, sizeof(layer), " of layer %d", part->layer); }
                return llmc_error("model file %s: parameter %s%s element %zu (byte offset %zu) is %f, not a finite number",
                                  s->path, gpt2_param_names[part->kind], layer, part->elem + done + j,
                                  (size_t)1024 + (part->file_off + done + j) * s->elem, dst[j]);
            }
        }
        done += k;
    }
    return 0;
}

// random init as GPT-2 of one part: N(0, 0.02) for matrices and embeddings, the residual
// projections scaled by 1/sqrt(2L), zero biases, unit layernorm gains, the padding rows
// V..Vp-1 of wte zero (never read). Element e of the model file's body gets
// std * rng_normal_at(seed, e): the same value whoever makes it, alone or with its tensor.
static void gpt2_init_part(const GPT2Config* c, uint64_t seed, const Gpt2Part* part, float* out) {
    int k = part->kind;
    if (k == P_LN1W || k == P_LN2W || k == P_LNFW) {
        for (size_t j = 0; j < part->n; j++) { out[j] = 1.0f; }
        return;
    }
    if (!gpt2_param_decay[k]) {  // biases
        memset(out, 0, part->n * sizeof(float));
        return;
    }
    float std = (k == P_ATTPROJW || k == P_FCPROJW) ? 0.02f / sqrtf(2.0f * c->num_layers) : 0.02f;
    size_t real = k == P_WTE ? (size_t)c->vocab_size * c->channels : SIZE_MAX;  // wte's real rows
    for (size_t j = 0; j < part->n; j++) {
        out[j] = part->elem + j < real ? std * rng_normal_at(seed, part->file_off + j) : 0.0f;
    }
}

// Unit u's parameters [begin, begin + n) (unit-local, unpadded, unit order) into out:
// read from the file, or made by the random init.
static int gpt2_source_read(const GPT2Source* s, int u, size_t begin, size_t n, float* out) {
    Gpt2Part parts[NUM_BLOCK_TENSORS];
    if (u < 0 || u >= gpt2_num_units(&s->config) || begin + n > gpt2_unit_size(&s->config, u) || begin + n < begin) {
        return llmc_error("model: elements [%zu, %zu) of unit %d are not in the model", begin, begin + n, u);
    }
    int np = gpt2_unit_parts(&s->config, u, begin, begin + n, parts);
    for (int i = 0; i < np; i++) {
        float* dst = out + (parts[i].unit_off - begin);
        if (s->fd < 0) {
            gpt2_init_part(&s->config, s->seed, &parts[i], dst);
        } else if (gpt2_source_read_part(s, &parts[i], dst) != 0) {
            return -1;
        }
    }
    return 0;
}

// fp32 -> bf16 bits, rounded to nearest even as torch's .to(bfloat16) does (llm.c's
// Python writes its bf16 files that way); a NaN stays a NaN
static inline uint16_t gpt2_bf16_round(float x) {
    uint32_t bits;
    memcpy(&bits, &x, sizeof(bits));
    if ((bits & 0x7fffffffu) > 0x7f800000u) { return (uint16_t)((bits >> 16) | 0x40u); }  // a carry could make it infinite
    uint32_t lsb = (bits >> 16) & 1u;  // ties go to the even neighbour
    return (uint16_t)((bits + 0x7fffu + lsb) >> 16);
}

// writes n parameters as bf16 through a small buffer (no bf16 copy of the model); 1 if
// all were written
static int gpt2_fwrite_bf16(const float* src, size_t n, FILE* fp) {
    uint16_t buf[8192];
    for (size_t i = 0; i < n;) {
        size_t k = 0;
        for (; k < sizeof(buf) / sizeof(buf[0]) && i < n; k++, i++) { buf[k] = gpt2_bf16_round(src[i]); }
        if (fwrite(buf, sizeof(uint16_t), k, fp) != k) { return 0; }
    }
    return 1;
}

// Writes n parameters at element file_off of a model file's body (fd: open for writing,
// the file already at its full size) as `version` stores them: fp32 as they are, bf16
// rounded through a small buffer. How each rank writes its own parts of one file
// (llmc/checkpoint.h). Returns 0, or -1 with errno.
static int gpt2_pwrite_params(int fd, const float* src, size_t n, size_t file_off, int version) {
    uint16_t buf[8192];
    size_t elem = version == GPT2_MODEL_VERSION_FP32 ? sizeof(float) : sizeof(uint16_t);
    off_t at = (off_t)(1024 + file_off * elem);
    for (size_t i = 0; i < n;) {
        size_t k = n - i;
        const char* bytes = (const char*)(src + i);
        if (elem == sizeof(uint16_t)) {
            if (k > sizeof(buf) / sizeof(buf[0])) { k = sizeof(buf) / sizeof(buf[0]); }
            for (size_t j = 0; j < k; j++) { buf[j] = gpt2_bf16_round(src[i + j]); }
            bytes = (const char*)buf;
        }
        for (size_t done = 0; done < k * elem;) {  // pwrite may write less than asked
            ssize_t w = pwrite(fd, bytes + done, k * elem - done, at);
            if (w < 0 && errno == EINTR) { continue; }
            if (w <= 0) { if (w == 0) { errno = EIO; } return -1; }
            done += (size_t)w;
            at += w;
        }
        i += k;
    }
    return 0;
}

// writes the 1024-byte header of a model file of `version`; 1 if it was written
static int gpt2_fwrite_header(FILE* fp, const GPT2Config* c, int version) {
    int32_t header[256] = {0};
    header[0] = GPT2_MODEL_MAGIC;
    header[1] = version;
    header[2] = c->max_seq_len;
    header[3] = c->vocab_size;
    header[4] = c->num_layers;
    header[5] = c->num_heads;
    header[6] = c->channels;
    header[7] = c->padded_vocab_size;
    return fwrite(header, sizeof(int32_t), 256, fp) == 256;
}

// element offset of tensor r in a model file's body (kind-major: every tensor of a kind by
// layer, the kinds in llm.c's order)
static size_t gpt2_file_offset(const GPT2Config* c, const TensorRange* r) {
    size_t sizes[NUM_PARAM_KINDS], off = 0;
    gpt2_param_sizes(c, sizes);
    for (int k = 0; k < r->kind; k++) { off += sizes[k] * (gpt2_is_block_kind(k) ? (size_t)c->num_layers : 1); }
    return off + (r->layer >= 0 ? (size_t)r->layer * r->size : 0);
}

// Writes an llm.c model file from the unit-major buffer: version 3 (fp32), or version 5
// (bf16), the one llm.c's default (bf16) GPU trainer requires. Both have the same
// header (llm.c's reader takes maxT, V, L, NH, C and Vp from it) and the same kind-major
// order with wte padded to Vp rows; version 5 stores every parameter, layernorms
// included, as bf16. The file is written whole or not at all (AtomicFile).
static int gpt2_write_model_version(const char* path, const GPT2Config* c, const float* params, int version) {
    if (version != GPT2_MODEL_VERSION_FP32 && version != GPT2_MODEL_VERSION_BF16) {
        return llmc_error("cannot write model file %s as version %d: only 3 (fp32) and 5 (bf16) exist", path, version);
    }
    int nt = gpt2_num_tensors(c);
    TensorRange* ranges = (TensorRange*)malloc(nt * sizeof(TensorRange));
    if (ranges == NULL) { return llmc_error("out of memory"); }
    gpt2_tensor_ranges(c, ranges);
    AtomicFile f;
    if (atomic_open(&f, path) != 0) { free(ranges); return -1; }
    int ok = gpt2_fwrite_header(f.fp, c, version);
    // gather back into the file's kind-major order: for each kind, its tensors by layer
    for (int k = 0; k < NUM_PARAM_KINDS && ok; k++) {
        for (int i = 0; i < nt && ok; i++) {
            if (ranges[i].kind != k) { continue; }
            const float* src = params + gpt2_unit_offset(c, ranges[i].unit) + ranges[i].offset;
            ok = version == GPT2_MODEL_VERSION_FP32 ? fwrite(src, sizeof(float), ranges[i].size, f.fp) == ranges[i].size
                                                    : gpt2_fwrite_bf16(src, ranges[i].size, f.fp);
        }
    }
    free(ranges);
    return atomic_commit(&f, ok);
}

// the version 3 (fp32) file: llm.c's CPU trainer and its fp32 GPU build read it
static int gpt2_write_model(const char* path, const GPT2Config* c, const float* params) {
    return gpt2_write_model_version(path, c, params, GPT2_MODEL_VERSION_FP32);
}

#endif // LLMC_GPT2_H
