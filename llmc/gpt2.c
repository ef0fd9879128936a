// The GPT-2 model description (llmc/gpt2.h): sizes, units, descriptors, model files, random init.
#include "llmc/gpt2.h" // the interface, its types and the headers its bodies use
#include <stdlib.h>   // malloc, free, strtol
#include <math.h>     // sqrtf, isfinite
#include <errno.h>    // errno: the reason a read or write failed
#include <fcntl.h>    // O_RDONLY: a model file for partitioned reads
#include <unistd.h>   // pread, pwrite, close: each rank's parts of a model file
#include <sys/stat.h> // fstat: the model file's kind and size
#include "llmc/utils.h"  // llmc_error, AtomicFile
#include "common/file.h" // file_open: a model file that is a FIFO or a device is refused, never waited on
#include "llmc/rand.h"   // rng_normal_at: counter-based samples for init

void gpt2_param_sizes(const GPT2Config* c, size_t sizes[NUM_PARAM_KINDS]) {
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

size_t gpt2_unit_size(const GPT2Config* c, int u) {
    size_t s[NUM_PARAM_KINDS];
    gpt2_param_sizes(c, s);
    if (u == 0) { return s[P_WTE] + s[P_WPE]; }
    if (u == c->num_layers + 1) { return s[P_LNFW] + s[P_LNFB]; }
    size_t n = 0;
    for (int k = P_LN1W; k <= P_FCPROJB; k++) { n += s[k]; }
    return n;
}

size_t gpt2_unit_offset(const GPT2Config* c, int u) {
    size_t off = 0;
    for (int i = 0; i < u; i++) { off += gpt2_unit_size(c, i); }
    return off;
}

int gpt2_schedule(const GPT2Config* c, int* out, int train) {
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

void gpt2_tensor_ranges(const GPT2Config* c, TensorRange* out) {
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

int gpt2_unit_parts(const GPT2Config* c, int u, size_t begin, size_t end, Gpt2Part out[NUM_BLOCK_TENSORS]) {
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

int gpt2_config_validate(const GPT2Config* c, const char* what) {
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

int gpt2_config_from_descriptor(const char* desc, GPT2Config* c) {
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

void gpt2_source_random(GPT2Source* s, const GPT2Config* c, uint64_t seed) {
    memset(s, 0, sizeof(*s));
    s->config = *c;
    s->fd = -1;
    s->seed = seed;
}

void gpt2_source_close(GPT2Source* s) {
    if (s->fd >= 0) { close(s->fd); }
    s->fd = -1;
}

int gpt2_source_open(GPT2Source* s, const char* path) {
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

// the fewest elements a part's init splits over the OpenMP threads (below it the threads'
// start costs more than they save)
#define GPT2_INIT_PARALLEL_MIN 32768

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
    // about 25 ns an element on one core (a logf, a cosf, a sqrtf): 39 s for d48's 1.56B.
    // Every element is a pure function of its index ([Note: counter-based samples]), so the
    // threads may split the range any way and make the bits one thread makes.
    #pragma omp parallel for schedule(static) if (part->n >= GPT2_INIT_PARALLEL_MIN)
    for (size_t j = 0; j < part->n; j++) {
        out[j] = part->elem + j < real ? std * rng_normal_at(seed, part->file_off + j) : 0.0f;
    }
}

int gpt2_source_read(const GPT2Source* s, int u, size_t begin, size_t n, float* out) {
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

int gpt2_fwrite_bf16(const float* src, size_t n, FILE* fp) {
    uint16_t buf[8192];
    for (size_t i = 0; i < n;) {
        size_t k = 0;
        for (; k < sizeof(buf) / sizeof(buf[0]) && i < n; k++, i++) { buf[k] = gpt2_bf16_round(src[i]); }
        if (fwrite(buf, sizeof(uint16_t), k, fp) != k) { return 0; }
    }
    return 1;
}

int gpt2_pwrite_params(int fd, const float* src, size_t n, size_t file_off, int version) {
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

int gpt2_fwrite_header(FILE* fp, const GPT2Config* c, int version) {
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

size_t gpt2_file_offset(const GPT2Config* c, const TensorRange* r) {
    size_t sizes[NUM_PARAM_KINDS], off = 0;
    gpt2_param_sizes(c, sizes);
    for (int k = 0; k < r->kind; k++) { off += sizes[k] * (gpt2_is_block_kind(k) ? (size_t)c->num_layers : 1); }
    return off + (r->layer >= 0 ? (size_t)r->layer * r->size : 0);
}

int gpt2_write_model_version(const char* path, const GPT2Config* c, const float* params, int version) {
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

int gpt2_write_model(const char* path, const GPT2Config* c, const float* params) {
    return gpt2_write_model_version(path, c, params, GPT2_MODEL_VERSION_FP32);
}
