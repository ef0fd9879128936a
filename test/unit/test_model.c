/*
 Criterion tests of the model description (llmc/gpt2.h) and the trainer's flags
 (llmc/args.h): descriptors, the unit layout, llm.c model files (round trips in fp32
 and bf16, bf16's rounding, every kind of bad file), init, and flag parsing errors.
*/
#include <criterion/criterion.h>  // Test, cr_assert*
#include <math.h>                 // NAN, isfinite, fabs, sqrt
#include <stdio.h>                // FILE, fopen, fwrite
#include <stdlib.h>               // mkdtemp, malloc
#include <string.h>               // strstr, memcmp
#include <unistd.h>               // rmdir, unlink
#include <sys/stat.h>             // mkdir, mkfifo: a directory and a FIFO given as a model file
#include "llmc/gpt2.h"            // the code under test
#include "llmc/args.h"            // the code under test
#include "llmc/utils.h"     // llmc_error, llmc_errmsg, the checked wrappers
#include "llmc/rand.h"      // Rng, rng_init, rng_below, rng_permute, rng_normal_at
#include <omp.h>                  // omp_set_num_threads: the init's threads
#include <cjson/cJSON.h>          // the op timer's timeline read back
#include "llmc/profile.h"         // the code under test: --profile-ops' costs, rows and timeline
#include "llmc/activations.h"     // the code under test: -r -1's choice

// ----------------------------------------------------------------------------
// helpers

static char tmpdir[256];

static void make_tmpdir(void) {
    strcpy(tmpdir, "/tmp/test_model_XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
}

static void remove_tmpdir(void) {
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
    cr_assert_eq(system(cmd), 0);
}

static void tmp_path(char* out, const char* name) { snprintf(out, 512, "%s/%s", tmpdir, name); }

static GPT2Config small_config(void) {
    GPT2Config c = {.max_seq_len = 16, .vocab_size = 37, .padded_vocab_size = 40,
                    .num_layers = 3, .num_heads = 2, .channels = 8};
    return c;
}

// writes raw bytes to a file
static void write_bytes(const char* path, const void* data, size_t n) {
    FILE* fp = fopen(path, "wb");
    cr_assert_not_null(fp);
    cr_assert_eq(fwrite(data, 1, n, fp), n);
    fclose(fp);
}

// reads a whole file into a new buffer
static unsigned char* read_all(const char* path, size_t* len) {
    FILE* fp = fopen(path, "rb");
    cr_assert_not_null(fp, "cannot open %s", path);
    fseek(fp, 0, SEEK_END);
    *len = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    unsigned char* b = malloc(*len);
    cr_assert_eq(fread(b, 1, *len, fp), *len);
    fclose(fp);
    return b;
}

// a writer renames its temporary file into place: none may be left
static void assert_no_tmp_file(const char* path) {
    char tmp[600];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    cr_assert_neq(access(tmp, F_OK), 0, "temporary file %s left behind", tmp);
}

// fp32 -> bf16 bits, round to nearest even, spelled out (no NaN here): the upper half,
// plus one when the lower half is past the midpoint, or at it with the upper half odd
static uint16_t bf16_round(float x) {
    uint32_t bits;
    memcpy(&bits, &x, 4);
    uint32_t hi = bits >> 16, lo = bits & 0xFFFF;
    if (lo > 0x8000 || (lo == 0x8000 && (hi & 1))) { hi++; }
    return (uint16_t)hi;
}

static float bf16_to_float(uint16_t b) {
    uint32_t bits = (uint32_t)b << 16;
    float x;
    memcpy(&x, &bits, 4);
    return x;
}

// builds the bytes of an llm.c model file from unit-major params, independently of
// gpt2_write_model: kind by kind, each block kind for all layers
static size_t build_file(const GPT2Config* c, const float* params, int version, unsigned char* out) {
    int32_t header[256] = {0};
    header[0] = 20240326; header[1] = version; header[2] = c->max_seq_len; header[3] = c->vocab_size;
    header[4] = c->num_layers; header[5] = c->num_heads; header[6] = c->channels; header[7] = c->padded_vocab_size;
    memcpy(out, header, 1024);
    size_t pos = 1024;
    size_t s[NUM_PARAM_KINDS];
    gpt2_param_sizes(c, s);
    size_t C = c->channels;
    for (int k = 0; k < NUM_PARAM_KINDS; k++) {
        int layers = gpt2_is_block_kind(k) ? c->num_layers : 1;
        for (int l = 0; l < layers; l++) {
            // where this tensor lives in the unit-major layout, computed by hand
            size_t off;
            if (k == P_WTE) { off = 0; }
            else if (k == P_WPE) { off = s[P_WTE]; }
            else if (k == P_LNFW) { off = gpt2_unit_offset(c, c->num_layers + 1); }
            else if (k == P_LNFB) { off = gpt2_unit_offset(c, c->num_layers + 1) + C; }
            else {
                off = gpt2_unit_offset(c, 1 + l);
                for (int j = P_LN1W; j < k; j++) { off += s[j]; }
            }
            for (size_t i = 0; i < s[k]; i++) {
                float x = params[off + i];
                if (version == 3) { memcpy(out + pos, &x, 4); pos += 4; }
                else { uint16_t b = bf16_round(x); memcpy(out + pos, &b, 2); pos += 2; }
            }
        }
    }
    return pos;
}

// ----------------------------------------------------------------------------
// descriptors

// the whole model of a source, unit by unit, into a new buffer (unit order): what every
// rank's shards together make
static float* source_whole(const GPT2Source* s) {
    float* q = malloc(gpt2_num_params(&s->config) * sizeof(float));
    for (int u = 0; u < gpt2_num_units(&s->config); u++) {
        if (gpt2_source_read(s, u, 0, gpt2_unit_size(&s->config, u), q + gpt2_unit_offset(&s->config, u)) != 0) {
            free(q);
            return NULL;
        }
    }
    return q;
}

// reads an llm.c file whole through gpt2_source_open and gpt2_source_read: 0 with *params
// (unit order) and *c, or -1 with *params NULL
static int read_model(const char* path, GPT2Config* c, float** params) {
    GPT2Source s;
    *params = NULL;
    if (gpt2_source_open(&s, path) != 0) { return -1; }
    *c = s.config;
    *params = source_whole(&s);
    gpt2_source_close(&s);
    return *params != NULL ? 0 : -1;
}

Test(descriptor, gpt2_depths) {
    GPT2Config c;
    cr_assert_eq(gpt2_config_from_descriptor("d12", &c), 0);
    cr_assert_eq(c.num_layers, 12); cr_assert_eq(c.num_heads, 12); cr_assert_eq(c.channels, 768);
    cr_assert_eq(c.max_seq_len, 1024); cr_assert_eq(c.vocab_size, 50257); cr_assert_eq(c.padded_vocab_size, 50304);
    // GPT-2 124M has 124,475,904 parameters with the padded vocabulary (llm.c's count)
    cr_assert_eq(gpt2_num_params(&c), 124475904u);
    // GPT-2 1558M: llm.c's d48 is 1600 channels, 25 heads; 1,557,686,400 parameters with
    // the padded vocabulary (12 L C^2 + 13 L C + 2 C + Vp C + 1024 C)
    cr_assert_eq(gpt2_config_from_descriptor("gpt2:d48", &c), 0);
    cr_assert_eq(c.num_layers, 48); cr_assert_eq(c.channels, 1600); cr_assert_eq(c.num_heads, 25);
    cr_assert_eq(gpt2_num_params(&c), 1557686400u);
    cr_assert_eq(gpt2_config_from_descriptor("d24", &c), 0);
    cr_assert_eq(c.channels, 1024); cr_assert_eq(c.num_heads, 16);
    cr_assert_eq(gpt2_config_from_descriptor("d3", &c), 0);  // not in the table: N heads of 64
    cr_assert_eq(c.channels, 192); cr_assert_eq(c.num_heads, 3);
    cr_assert_eq(gpt2_config_from_descriptor("d1", &c), 0);
    cr_assert_eq(c.channels, 64);
}

Test(descriptor, gpt3_widths) {
    GPT2Config c;
    cr_assert_eq(gpt2_config_from_descriptor("gpt3:c768", &c), 0);
    cr_assert_eq(c.num_layers, 12); cr_assert_eq(c.num_heads, 12); cr_assert_eq(c.max_seq_len, 2048);
    cr_assert_eq(gpt2_config_from_descriptor("gpt3:c12288", &c), 0);
    cr_assert_eq(c.num_layers, 96); cr_assert_eq(c.num_heads, 96);
    // 175B: the classic count is about 175e9
    double n = (double)gpt2_num_params(&c);
    cr_assert(n > 174e9 && n < 176e9, "gpt3:c12288 has %.3g parameters", n);
    cr_assert_eq(gpt2_config_from_descriptor("gpt3:c4096", &c), 0);
    cr_assert_eq(c.num_layers, 32);
    for (size_t i = 0; i < sizeof(gpt3_sizes) / sizeof(gpt3_sizes[0]); i++) {
        cr_assert_eq(gpt3_sizes[i].channels % gpt3_sizes[i].heads, 0, "%s", gpt3_sizes[i].name);
    }
}

Test(descriptor, malformed) {
    GPT2Config c;
    const char* bad[] = {"", "d", "d0", "d-3", "d12x", "dd12", "gpt2:c768", "gpt3:d12", "gpt3:c700",
                         "gpt3:c", "gpt4:d12", "12", "d99999999999", "model.bin"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cr_assert_eq(gpt2_config_from_descriptor(bad[i], &c), -1, "'%s' should be rejected", bad[i]);
        cr_assert_not_null(strstr(llmc_errmsg(), bad[i]), "message names the descriptor: %s", llmc_errmsg());
    }
}

// ----------------------------------------------------------------------------
// the unit layout

Test(layout, units_tile_the_buffer) {
    GPT2Config c = small_config();
    int nt = gpt2_num_tensors(&c);
    TensorRange* r = malloc(nt * sizeof(TensorRange));
    gpt2_tensor_ranges(&c, r);
    size_t total = 0;
    int prev_unit = -1;
    size_t expect_off = 0;
    for (int i = 0; i < nt; i++) {
        if (r[i].unit != prev_unit) {
            if (prev_unit >= 0) { cr_assert_eq(expect_off, gpt2_unit_size(&c, prev_unit)); }
            cr_assert_eq(r[i].unit, prev_unit + 1);
            prev_unit = r[i].unit;
            expect_off = 0;
        }
        cr_assert_eq(r[i].offset, expect_off, "tensor %d is not contiguous in its unit", i);
        expect_off += r[i].size;
        total += r[i].size;
    }
    cr_assert_eq(prev_unit, c.num_layers + 1);
    cr_assert_eq(total, gpt2_num_params(&c));
    cr_assert_eq(gpt2_unit_offset(&c, gpt2_num_units(&c)), total);
    // block units: 12 C^2 + 13 C parameters each
    size_t C = c.channels;
    cr_assert_eq(gpt2_unit_size(&c, 1), 12 * C * C + 13 * C);
    free(r);
}

// every range of every unit, cut into parts, lands on the file elements that the writer
// puts there: a model whose parameter i is i, written, then read at each part's file offset
Test(layout, unit_parts_find_the_file_elements, .init = make_tmpdir, .fini = remove_tmpdir) {
    GPT2Config c = small_config();
    size_t n = gpt2_num_params(&c);
    float* p = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) { p[i] = (float)i; }  // exact: n < 2^24
    char path[512];
    tmp_path(path, "m.bin");
    cr_assert_eq(gpt2_write_model(path, &c, p), 0, "%s", llmc_errmsg());
    size_t len;
    unsigned char* file = read_all(path, &len);
    const float* body = (const float*)(file + 1024);
    TensorRange* r = malloc(gpt2_num_tensors(&c) * sizeof(TensorRange));
    gpt2_tensor_ranges(&c, r);
    for (int u = 0; u < gpt2_num_units(&c); u++) {
        size_t numel = gpt2_unit_size(&c, u), base = gpt2_unit_offset(&c, u);
        // whole unit, the empty range, and ranges that start and end inside tensors
        size_t cuts[][2] = {{0, numel}, {3, 3}, {1, numel - 1}, {numel / 3, numel / 2}, {numel - 1, numel}};
        for (size_t k = 0; k < sizeof(cuts) / sizeof(cuts[0]); k++) {
            Gpt2Part parts[NUM_BLOCK_TENSORS];
            int np = gpt2_unit_parts(&c, u, cuts[k][0], cuts[k][1], parts);
            size_t next = cuts[k][0];
            for (int i = 0; i < np; i++) {
                cr_assert_eq(parts[i].unit_off, next, "unit %d: parts are not contiguous", u);
                cr_assert_gt(parts[i].n, 0);
                TensorRange t = r[parts[i].tensor];
                cr_assert_eq(t.unit, u);
                cr_assert_eq(t.kind, parts[i].kind);
                cr_assert_eq(t.layer, parts[i].layer);
                cr_assert_eq(t.offset + parts[i].elem, parts[i].unit_off, "unit %d tensor %d: elem", u, parts[i].tensor);
                for (size_t j = 0; j < parts[i].n; j++) {
                    cr_assert_eq(body[parts[i].file_off + j], (float)(base + parts[i].unit_off + j),
                                 "unit %d element %zu is not where the file has it", u, parts[i].unit_off + j);
                }
                next += parts[i].n;
            }
            cr_assert_eq(next, cuts[k][1], "unit %d: parts cover [%zu, %zu) only up to %zu", u, cuts[k][0], cuts[k][1], next);
        }
    }
    free(r);
    free(file);
    free(p);
}

Test(layout, decay_only_on_matrices_and_embeddings) {
    GPT2Config c = small_config();
    int nt = gpt2_num_tensors(&c);
    TensorRange* r = malloc(nt * sizeof(TensorRange));
    gpt2_tensor_ranges(&c, r);
    for (int i = 0; i < nt; i++) {
        int k = r[i].kind;
        int matrix = k == P_WTE || k == P_WPE || k == P_QKVW || k == P_ATTPROJW || k == P_FCW || k == P_FCPROJW;
        cr_assert_eq(r[i].decay, matrix, "%s", gpt2_param_names[k]);
    }
    free(r);
}

// ----------------------------------------------------------------------------
// model files

Test(model_file, round_trip_fp32, .init = make_tmpdir, .fini = remove_tmpdir) {
    GPT2Config c = small_config();
    size_t n = gpt2_num_params(&c);
    float* p = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) { p[i] = (float)i * 0.25f - 3.0f; }
    char path[512];
    tmp_path(path, "m.bin");
    cr_assert_eq(gpt2_write_model(path, &c, p), 0, "%s", llmc_errmsg());
    // the file's bytes are the independent kind-major serialization
    unsigned char* expect = malloc(1024 + 4 * n);
    size_t len = build_file(&c, p, 3, expect), got_len;
    unsigned char* got = read_all(path, &got_len);
    cr_assert_eq(got_len, len, "file has the wrong size");
    cr_assert_eq(memcmp(got, expect, len), 0, "file bytes differ from llm.c's layout");
    // and reads back to the same parameters and config
    GPT2Config c2;
    float* q = NULL;
    cr_assert_eq(read_model(path, &c2, &q), 0, "%s", llmc_errmsg());
    cr_assert_eq(memcmp(&c, &c2, sizeof(c)), 0);
    cr_assert_eq(memcmp(p, q, n * sizeof(float)), 0);
    assert_no_tmp_file(path);
    free(p); free(q); free(expect); free(got);
}

Test(model_file, reads_bf16, .init = make_tmpdir, .fini = remove_tmpdir) {
    GPT2Config c = small_config();
    size_t n = gpt2_num_params(&c);
    float* p = malloc(n * sizeof(float));
    // values exactly representable in bf16 (8 significant bits) read back exactly
    for (size_t i = 0; i < n; i++) { p[i] = (float)((int)(i % 255) - 127) / 64.0f; }
    unsigned char* bytes = malloc(1024 + 2 * n);
    size_t len = build_file(&c, p, 5, bytes);
    char path[512];
    tmp_path(path, "bf16.bin");
    write_bytes(path, bytes, len);
    float* q = NULL;
    GPT2Config c2;
    cr_assert_eq(read_model(path, &c2, &q), 0, "%s", llmc_errmsg());
    cr_assert_eq(memcmp(p, q, n * sizeof(float)), 0);
    free(p); free(q); free(bytes);
}

// llm.c's bf16 file (version 5), the one its default GPU trainer requires: llm.c's header,
// kind-major order, every parameter rounded to the nearest bf16
Test(model_file, writes_bf16, .init = make_tmpdir, .fini = remove_tmpdir) {
    GPT2Config c = small_config();
    size_t n = gpt2_num_params(&c);
    float* p = malloc(n * sizeof(float));
    // values with all 23 fraction bits in use, so nearly every one is rounded
    for (size_t i = 0; i < n; i++) { p[i] = sinf((float)i * 0.37f) * 3.0f + (float)i * 1e-4f; }
    char path[512];
    tmp_path(path, "m_bf16.bin");
    cr_assert_eq(gpt2_write_model_version(path, &c, p, GPT2_MODEL_VERSION_BF16), 0, "%s", llmc_errmsg());
    size_t len;
    unsigned char* got = read_all(path, &len);
    cr_assert_eq(len, 1024 + 2 * n, "a bf16 file is the header and 2 bytes a parameter: %zu bytes", len);
    int32_t h[8];
    memcpy(h, got, sizeof(h));
    cr_assert_eq(h[0], 20240326); cr_assert_eq(h[1], 5);
    cr_assert_eq(h[2], c.max_seq_len); cr_assert_eq(h[3], c.vocab_size); cr_assert_eq(h[4], c.num_layers);
    cr_assert_eq(h[5], c.num_heads); cr_assert_eq(h[6], c.channels); cr_assert_eq(h[7], c.padded_vocab_size);
    unsigned char* expect = malloc(1024 + 2 * n);
    cr_assert_eq(build_file(&c, p, 5, expect), len);
    cr_assert_eq(memcmp(got, expect, len), 0, "file bytes differ from llm.c's layout, rounded to nearest even");
    // reads back to the rounded parameters exactly
    GPT2Config c2;
    float* q = NULL;
    cr_assert_eq(read_model(path, &c2, &q), 0, "%s", llmc_errmsg());
    cr_assert_eq(memcmp(&c, &c2, sizeof(c)), 0);
    for (size_t i = 0; i < n; i++) {
        float want = bf16_to_float(bf16_round(p[i]));
        cr_assert(q[i] == want, "parameter %zu: read %a, bf16 of %a is %a", i, q[i], p[i], want);
    }
    assert_no_tmp_file(path);
    free(p); free(q); free(expect); free(got);
}

// bf16 rounding: ties go to the even neighbour, the rest to the nearest; in most of
// these cases dropping the low 16 bits (truncation) gives another answer
Test(model_file, bf16_rounds_to_nearest_even, .init = make_tmpdir, .fini = remove_tmpdir) {
    GPT2Config c = small_config();
    size_t n = gpt2_num_params(&c);
    float* p = calloc(n, sizeof(float));
    // bf16 keeps 7 fraction bits: next to 1.0 its step is 2^-7
    struct { float in; uint16_t out; } cases[] = {
        {1.0f + 0x1p-8f, 0x3F80},              // tie between 1 (even) and 1 + 2^-7: down
        {1.0f + 3 * 0x1p-8f, 0x3F82},          // tie between 1 + 2^-7 (odd) and 1 + 2^-6: up
        {1.0f + 0x1p-8f + 0x1p-20f, 0x3F81},   // just past the tie: up
        {1.0f + 0x1p-8f - 0x1p-20f, 0x3F80},   // just before it: down
        {-(1.0f + 3 * 0x1p-8f), 0xBF82},       // the same with a sign
        {0x1.fffffep127f, 0x7F80},             // past the largest bf16: infinity
        {-0.0f, 0x8000},
    };
    size_t nc = sizeof(cases) / sizeof(cases[0]);
    for (size_t i = 0; i < nc; i++) { p[i] = cases[i].in; }  // the first elements of wte, first in the file
    char path[512];
    tmp_path(path, "round.bin");
    cr_assert_eq(gpt2_write_model_version(path, &c, p, GPT2_MODEL_VERSION_BF16), 0, "%s", llmc_errmsg());
    size_t len;
    unsigned char* got = read_all(path, &len);
    for (size_t i = 0; i < nc; i++) {
        uint16_t b;
        memcpy(&b, got + 1024 + 2 * i, 2);
        cr_assert_eq(b, cases[i].out, "%a was written as 0x%04x, not 0x%04x", cases[i].in, b, cases[i].out);
        cr_assert_eq(bf16_round(cases[i].in), cases[i].out, "the test's own rounding disagrees for %a", cases[i].in);
    }
    free(p); free(got);
}

Test(model_file, write_unknown_version, .init = make_tmpdir, .fini = remove_tmpdir) {
    GPT2Config c = small_config();
    float* p = calloc(gpt2_num_params(&c), sizeof(float));
    char path[512];
    tmp_path(path, "v4.bin");
    cr_assert_eq(gpt2_write_model_version(path, &c, p, 4), -1);
    cr_assert_not_null(strstr(llmc_errmsg(), path), "message names the file: %s", llmc_errmsg());
    cr_assert_not_null(strstr(llmc_errmsg(), "version 4"), "message names the version: %s", llmc_errmsg());
    cr_assert_neq(access(path, F_OK), 0, "a file was written");
    free(p);
}

// writes a valid fp32 file, lets `mutate` damage it, and expects a -1 whose message
// names the file and contains `what`
static void expect_bad_file(void (*mutate)(unsigned char* bytes, size_t* len), const char* what) {
    GPT2Config c = small_config();
    size_t n = gpt2_num_params(&c);
    float* p = calloc(n, sizeof(float));
    unsigned char* bytes = malloc(1024 + 4 * n + 64);
    size_t len = build_file(&c, p, 3, bytes);
    mutate(bytes, &len);
    char path[512];
    tmp_path(path, "bad.bin");
    write_bytes(path, bytes, len);
    float* q = NULL;
    GPT2Config c2;
    cr_assert_eq(read_model(path, &c2, &q), -1);
    cr_assert_null(q);
    cr_assert_not_null(strstr(llmc_errmsg(), path), "message names the file: %s", llmc_errmsg());
    cr_assert_not_null(strstr(llmc_errmsg(), what), "message says '%s': %s", what, llmc_errmsg());
    free(p); free(bytes);
}

static void set_i32(unsigned char* b, int idx, int32_t v) { memcpy(b + 4 * idx, &v, 4); }
static void bad_magic(unsigned char* b, size_t* len) { (void)len; set_i32(b, 0, 12345); }
static void bad_version(unsigned char* b, size_t* len) { (void)len; set_i32(b, 1, 4); }
static void truncated(unsigned char* b, size_t* len) { (void)b; *len -= 100; }
static void too_long(unsigned char* b, size_t* len) { memset(b + *len, 0, 8); *len += 8; }
static void header_only_part(unsigned char* b, size_t* len) { (void)b; *len = 500; }
static void bad_heads(unsigned char* b, size_t* len) { (void)len; set_i32(b, 5, 3); }     // 8 channels, 3 heads
static void bad_padded(unsigned char* b, size_t* len) { (void)len; set_i32(b, 7, 30); }   // Vp < V
static void bad_layers(unsigned char* b, size_t* len) { (void)len; set_i32(b, 4, -2); }

Test(model_file, bad_magic, .init = make_tmpdir, .fini = remove_tmpdir) { expect_bad_file(bad_magic, "magic"); }
Test(model_file, bad_version, .init = make_tmpdir, .fini = remove_tmpdir) { expect_bad_file(bad_version, "version 4"); }
Test(model_file, truncated, .init = make_tmpdir, .fini = remove_tmpdir) { expect_bad_file(truncated, "truncated"); }
Test(model_file, size_mismatch, .init = make_tmpdir, .fini = remove_tmpdir) { expect_bad_file(too_long, "header describes"); }
Test(model_file, short_header, .init = make_tmpdir, .fini = remove_tmpdir) { expect_bad_file(header_only_part, "header"); }
Test(model_file, heads_do_not_divide, .init = make_tmpdir, .fini = remove_tmpdir) { expect_bad_file(bad_heads, "num_heads"); }
Test(model_file, padded_vocab_too_small, .init = make_tmpdir, .fini = remove_tmpdir) { expect_bad_file(bad_padded, "padded_vocab_size"); }
Test(model_file, negative_layers, .init = make_tmpdir, .fini = remove_tmpdir) { expect_bad_file(bad_layers, "num_layers"); }

// the model file tmpdir/name (made by `make`, unless NULL) is refused with a message that
// names it and says `what`
static void expect_refused(const char* name, int (*make)(const char*, mode_t), const char* what) {
    char path[512];
    tmp_path(path, name);
    if (make != NULL) { cr_assert_eq(make(path, 0700), 0); }
    float* q = NULL;
    GPT2Config c;
    cr_assert_eq(read_model(path, &c, &q), -1);
    cr_assert_not_null(strstr(llmc_errmsg(), path), "%s", llmc_errmsg());
    cr_assert_not_null(strstr(llmc_errmsg(), what), "%s", llmc_errmsg());
}

Test(model_file, missing, .init = make_tmpdir, .fini = remove_tmpdir) { expect_refused("nope.bin", NULL, "cannot open"); }
// a directory or a FIFO given as -e is named as what it is (a directory was "truncated:
// shorter than its 1024-byte header"; a FIFO waited for a writer)
Test(model_file, a_directory, .init = make_tmpdir, .fini = remove_tmpdir) {
    expect_refused("dir.bin", mkdir, "it is a directory, not a regular file");
}
Test(model_file, a_fifo, .init = make_tmpdir, .fini = remove_tmpdir) {
    expect_refused("fifo.bin", mkfifo, "it is a FIFO, not a regular file");
}

Test(model_file, unwritable_directory_leaves_nothing, .init = make_tmpdir, .fini = remove_tmpdir) {
    GPT2Config c = small_config();
    float* p = calloc(gpt2_num_params(&c), sizeof(float));
    char path[512];
    tmp_path(path, "no/such/dir/m.bin");
    cr_assert_eq(gpt2_write_model(path, &c, p), -1);
    cr_assert_not_null(strstr(llmc_errmsg(), "no/such/dir"));
    free(p);
}

// ----------------------------------------------------------------------------
// init

// a model made by the random init of seed, whole (unit order)
static float* init_whole(const GPT2Config* c, uint64_t seed) {
    GPT2Source s;
    gpt2_source_random(&s, c, seed);
    return source_whole(&s);
}

Test(init, gpt2_statistics_and_reproducible) {
    GPT2Config c = small_config();
    c.channels = 64; c.num_heads = 4; c.num_layers = 2; c.vocab_size = 500; c.padded_vocab_size = 512; c.max_seq_len = 64;
    size_t n = gpt2_num_params(&c);
    float* a = init_whole(&c, 42);
    float* b = init_whole(&c, 42);
    cr_assert_eq(memcmp(a, b, n * sizeof(float)), 0, "same seed, same model");
    free(b);
    b = init_whole(&c, 43);
    cr_assert_neq(memcmp(a, b, n * sizeof(float)), 0, "another seed, another model");
    BlockTensors w = gpt2_block_tensors(&c, a + gpt2_unit_offset(&c, 1));
    EmbedTensors e = gpt2_embed_tensors(&c, a);
    // std of the fc weights ~ 0.02, of the residual projection ~ 0.02/sqrt(2L) = 0.01
    double s1 = 0, s2 = 0;
    size_t nfc = 4 * 64 * 64;
    for (size_t i = 0; i < nfc; i++) { s1 += (double)w.fcw[i] * w.fcw[i]; s2 += (double)w.fcprojw[i] * w.fcprojw[i]; }
    double std1 = sqrt(s1 / nfc), std2 = sqrt(s2 / nfc);
    // 16384 samples: the sample std is within ~0.55% (1/sqrt(2n)) of the truth; 5% is 9 sigma
    cr_assert(fabs(std1 - 0.02) < 0.001, "fcw std %f", std1);
    cr_assert(fabs(std2 - 0.01) < 0.0005, "fcprojw std %f", std2);
    for (int i = 0; i < 64; i++) {
        cr_assert_eq(w.ln1w[i], 1.0f); cr_assert_eq(w.ln1b[i], 0.0f); cr_assert_eq(w.qkvb[i], 0.0f);
    }
    for (size_t i = (size_t)500 * 64; i < (size_t)512 * 64; i++) { cr_assert_eq(e.wte[i], 0.0f, "padding rows are zero"); }
    cr_assert_neq(e.wte[500 * 64 - 1], 0.0f, "the last real row is drawn");
    free(a); free(b);
}

// [Note: counter-based samples] in practice: any range of any unit, made alone, in any
// order, equals the same elements of the whole model: what lets each rank make only its
// shard. Cuts of random lengths (1 element up to a third of the unit), in a shuffled order.
Test(init, any_range_equals_the_whole) {
    GPT2Config c = small_config();
    GPT2Source s;
    gpt2_source_random(&s, &c, 7);
    float* whole = source_whole(&s);
    Rng rng;
    rng_init(&rng, 99);
    for (int trial = 0; trial < 20; trial++) {
        for (int u = 0; u < gpt2_num_units(&c); u++) {
            size_t un = gpt2_unit_size(&c, u), cuts[64], ncut = 0, at = 0;
            while (at < un && ncut < 63) {
                cuts[ncut++] = at;
                at += 1 + (size_t)rng_below(&rng, un / 3 + 1);
            }
            cuts[ncut] = un;
            int order[64];
            for (size_t i = 0; i < ncut; i++) { order[i] = (int)i; }
            rng_permute(&rng, order, ncut);
            float* got = malloc(un * sizeof(float));
            for (size_t i = 0; i < un; i++) { got[i] = NAN; }
            for (size_t k = 0; k < ncut; k++) {
                size_t b = cuts[order[k]], e = order[k] + 1 < (int)ncut ? cuts[order[k] + 1] : un;
                cr_assert_eq(gpt2_source_read(&s, u, b, e - b, got + b), 0, "%s", llmc_errmsg());
            }
            cr_assert_eq(memcmp(got, whole + gpt2_unit_offset(&c, u), un * sizeof(float)), 0, "unit %d, trial %d", u, trial);
            free(got);
        }
    }
    float x;
    cr_assert_eq(gpt2_source_read(&s, 1, gpt2_unit_size(&c, 1), 1, &x), -1, "a range past the unit is refused");
    free(whole);
}

// The init is made on every OpenMP thread (start-up: 39 s of d48 on one core): any thread
// count gives the bits of one thread, and of the samples made one at a time. A model whose
// blocks (4 x 12 x 64^2 = 196608 elements a unit) are well past the size it splits at.
Test(init, any_thread_count_same_bits) {
    GPT2Config c = small_config();
    c.channels = 64; c.num_heads = 4; c.num_layers = 2; c.vocab_size = 500; c.padded_vocab_size = 512; c.max_seq_len = 64;
    size_t n = gpt2_num_params(&c);
    omp_set_num_threads(1);
    float* one = init_whole(&c, 1234);
    for (int threads = 2; threads <= 7; threads += 5) {
        omp_set_num_threads(threads);
        float* many = init_whole(&c, 1234);
        cr_assert_eq(memcmp(one, many, n * sizeof(float)), 0, "%d threads made other bits than one", threads);
        free(many);
    }
    // block 1's fc weights, sample by sample: std * rng_normal_at(seed, its place in the file)
    BlockTensors w = gpt2_block_tensors(&c, one + gpt2_unit_offset(&c, 1));
    TensorRange* r = malloc(gpt2_num_tensors(&c) * sizeof(TensorRange));
    gpt2_tensor_ranges(&c, r);
    int t = 0;
    while (!(r[t].kind == P_FCW && r[t].layer == 0)) { t++; }
    size_t at = gpt2_file_offset(&c, &r[t]);
    for (size_t i = 0; i < r[t].size; i += 97) {
        cr_assert_eq(w.fcw[i], 0.02f * rng_normal_at(1234, at + i), "fcw[%zu]", i);
    }
    free(r);
    free(one);
}

// The samples themselves: n = 2^18 standard normals of one seed have mean 0 and variance 1
// (the sample mean's standard error is 1/sqrt(n) = 0.002, the variance's sqrt(2/n) =
// 0.0028: bounds of 5 standard errors), 4.55% beyond 2 (standard error 0.04%), and are
// uncorrelated with the next seed's and with their neighbours (standard error 1/sqrt(n)).
Test(init, counter_samples_are_standard_normal) {
    size_t n = (size_t)1 << 18;
    double sum = 0, sq = 0, cross_seed = 0, cross_next = 0, tails = 0;
    float prev = rng_normal_at(5, 0);
    for (size_t i = 0; i < n; i++) {
        float x = rng_normal_at(5, i), y = rng_normal_at(6, i);
        cr_assert(isfinite(x));
        sum += x; sq += (double)x * x; cross_seed += (double)x * y;
        if (i > 0) { cross_next += (double)x * prev; }
        if (fabs(x) > 2.0) { tails += 1; }
        prev = x;
    }
    double se = 1.0 / sqrt((double)n);
    cr_assert(fabs(sum / n) < 5 * se, "mean %g", sum / n);
    cr_assert(fabs(sq / n - 1.0) < 5 * sqrt(2.0) * se, "variance %g", sq / n);
    double p2 = 0.0455, tail = tails / n;
    cr_assert(fabs(tail - p2) < 5 * sqrt(p2 * (1 - p2) / n), "beyond 2 sigma: %g", tail);
    cr_assert(fabs(cross_seed / n) < 5 * se, "seeds 5 and 6 correlate: %g", cross_seed / n);
    cr_assert(fabs(cross_next / n) < 5 * se, "neighbours correlate: %g", cross_next / n);
    cr_assert_eq(rng_normal_at(5, 12345), rng_normal_at(5, 12345), "a pure function of (seed, index)");
}

// A file read in ranges equals the file read whole, whichever way the ranges cut its units
// (1 to 5 near-equal pieces, fp32 and bf16); a NaN is found by the range that holds it
// only, and named by tensor, layer, element and byte offset.
Test(model_file, ranges_equal_the_whole, .init = make_tmpdir, .fini = remove_tmpdir) {
    GPT2Config c = small_config();
    size_t n = gpt2_num_params(&c);
    float* p = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) { p[i] = (float)((int)(i % 255) - 127) / 64.0f; }  // exact in bf16
    unsigned char* bytes = malloc(1024 + 4 * n);
    char path[512];
    tmp_path(path, "ranges.bin");
    for (int version = 3; version <= 5; version += 2) {
        write_bytes(path, bytes, build_file(&c, p, version, bytes));
        GPT2Source s;
        cr_assert_eq(gpt2_source_open(&s, path), 0, "%s", llmc_errmsg());
        for (int u = 0; u < gpt2_num_units(&c); u++) {
            size_t un = gpt2_unit_size(&c, u), off = gpt2_unit_offset(&c, u);
            for (size_t pieces = 1; pieces <= 5; pieces++) {
                float* got = calloc(un, sizeof(float));
                for (size_t r = pieces; r-- > 0;) {  // the last piece first
                    size_t b = un * r / pieces, e = un * (r + 1) / pieces;
                    cr_assert_eq(gpt2_source_read(&s, u, b, e - b, got + b), 0, "%s", llmc_errmsg());
                }
                cr_assert_eq(memcmp(got, p + off, un * sizeof(float)), 0, "version %d unit %d in %zu pieces", version, u, pieces);
                free(got);
            }
        }
        gpt2_source_close(&s);
    }
    // a NaN in block 1's fcw, element 5 (unit 2 is block 1): fp32 file
    TensorRange* ranges = malloc(gpt2_num_tensors(&c) * sizeof(TensorRange));
    gpt2_tensor_ranges(&c, ranges);
    int ti = 2 + NUM_BLOCK_TENSORS + (P_FCW - P_LN1W);
    cr_assert_eq(ranges[ti].kind, P_FCW); cr_assert_eq(ranges[ti].layer, 1);
    size_t at = ranges[ti].offset + 5;  // in unit 2
    p[gpt2_unit_offset(&c, 2) + at] = NAN;
    write_bytes(path, bytes, build_file(&c, p, 3, bytes));
    GPT2Source s;
    cr_assert_eq(gpt2_source_open(&s, path), 0, "%s", llmc_errmsg());
    float* got = malloc(gpt2_unit_size(&c, 2) * sizeof(float));
    cr_assert_eq(gpt2_source_read(&s, 2, 0, at, got), 0, "the range before the NaN reads: %s", llmc_errmsg());
    cr_assert_eq(gpt2_source_read(&s, 2, at + 1, gpt2_unit_size(&c, 2) - at - 1, got), 0, "and the one after");
    cr_assert_eq(gpt2_source_read(&s, 2, at - 1, 3, got), -1, "the range with the NaN is refused");
    char want[256];
    snprintf(want, sizeof(want), "parameter fcw of layer 1 element 5 (byte offset %zu) is nan",
             (size_t)1024 + 4 * (gpt2_file_offset(&c, &ranges[ti]) + 5));
    cr_assert_not_null(strstr(llmc_errmsg(), want), "'%s' in: %s", want, llmc_errmsg());
    cr_assert_not_null(strstr(llmc_errmsg(), path), "names the file: %s", llmc_errmsg());
    gpt2_source_close(&s);
    free(got); free(ranges); free(p); free(bytes);
}

// ----------------------------------------------------------------------------
// flags

static int parse(TrainConfig* c, const char* line) {
    static char buf[1024];  // the parsed config points into it
    static char* argv[64];
    int argc = 0;
    strcpy(buf, line);
    argv[argc++] = "train";
    for (char* tok = strtok(buf, " "); tok != NULL; tok = strtok(NULL, " ")) { argv[argc++] = tok; }
    int rc = args_parse(c, argc, argv);
    return rc;
}

Test(flags, llmc_flags) {
    TrainConfig c;
    cr_assert_eq(parse(&c, "-e model.bin -b 8 -t 64 -a 1 -x 8 -l 1e-3 -u 0 -q 1.0 -c 0.1 -d 1024 -z 0 -r 2 -k linear -y 0 -n 5 -o out"), 0, "%s", llmc_errmsg());
    cr_assert_str_eq(c.model, "model.bin");
    cr_assert_eq(c.B, 8); cr_assert_eq(c.T, 64); cr_assert_eq(c.overfit_single_batch, 1); cr_assert_eq(c.max_steps, 8);
    cr_assert_float_eq(c.lr, 1e-3f, 1e-9); cr_assert_eq(c.warmup, 0); cr_assert_float_eq(c.final_lr_frac, 1.0f, 0);
    cr_assert_float_eq(c.weight_decay, 0.1f, 1e-9); cr_assert_eq(c.total_batch_size, 1024); cr_assert_eq(c.recompute, 2);
    cr_assert_str_eq(c.lr_schedule, "linear"); cr_assert_eq(c.checkpoint_every, 5); cr_assert_str_eq(c.output_dir, "out");
}

Test(flags, long_flags_both_forms) {
    TrainConfig c;
    cr_assert_eq(parse(&c, "--seed 7 --shuffle=0 --grad-clip 0.5 --report r.json --tokenizer=t.bin"), 0, "%s", llmc_errmsg());
    cr_assert_eq(c.seed, 7u); cr_assert_eq(c.shuffle, 0); cr_assert_float_eq(c.grad_clip, 0.5f, 0);
    cr_assert_str_eq(c.report, "r.json"); cr_assert_str_eq(c.tokenizer, "t.bin");
}

Test(flags, defaults_match_llmc) {
    TrainConfig c;
    cr_assert_eq(parse(&c, ""), 0);
    cr_assert_eq(c.B, 4); cr_assert_eq(c.T, 1024); cr_assert_float_eq(c.lr, 3e-4f, 1e-9);
    cr_assert_eq(c.val_every, 20); cr_assert_eq(c.sample_every, 20); cr_assert_eq(c.gen_T, 64);
    cr_assert_float_eq(c.grad_clip, 1.0f, 0);
}

Test(flags, help) {
    TrainConfig c;
    cr_assert_eq(parse(&c, "-h"), 1);
    cr_assert_eq(parse(&c, "-b 2 --help"), 1);
}

// -h with a value is llm.c's HellaSwag switch; its file defaults to llm.c's path
Test(flags, hellaswag) {
    TrainConfig c;
    cr_assert_eq(parse(&c, "-h 1"), 0);
    cr_assert_eq(c.hellaswag, 1);
    cr_assert_str_eq(c.hellaswag_file, "dev/data/hellaswag/hellaswag_val.bin");
    cr_assert_eq(parse(&c, "-h 0 --hellaswag-file x.bin"), 0);
    cr_assert_eq(c.hellaswag, 0);
    cr_assert_str_eq(c.hellaswag_file, "x.bin");
}

// each bad command line fails with a message that names the flag (or the argument)
Test(flags, errors_name_the_flag) {
    struct { const char* line; const char* names; } cases[] = {
        {"-b", "-b"},                   // missing value
        {"-b abc", "-b"},               // not a number
        {"-b 4x", "-b"},                // trailing garbage
        {"-b 0", "-b"},                 // out of range
        {"-b -3", "-b"},
        {"-t 99999999999999", "-t"},
        {"-l fast", "-l"},
        {"-l -1", "-l"},
        {"-q 1.5", "-q"},
        {"-z 4", "-z"},
        {"-r 3", "-r"},
        {"-a 2", "-a"},
        {"-y 7", "-y"},
        {"-d 0", "-d"},
        {"-m 0", "-m"},
        {"-k warmup_stable", "-k"},
        {"-zz 1", "-zz"},               // unknown flag
        {"-w 0", "-w"},                 // llm.c's, refused at this value
        {"-h 2", "-h"},                 // llm.c's HellaSwag switch: 0 or 1
        {"--frobnicate 1", "--frobnicate"},
        {"--seed -1", "--seed"},
        {"--seed 12ab", "--seed"},
        {"--shuffle yes", "--shuffle"},
        {"--grad-clip=", "--grad-clip"},
        {"stray", "stray"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        TrainConfig c;
        cr_assert_eq(parse(&c, cases[i].line), -1, "'%s' should fail", cases[i].line);
        cr_assert_not_null(strstr(llmc_errmsg(), cases[i].names), "'%s': message '%s' should name %s",
                           cases[i].line, llmc_errmsg(), cases[i].names);
    }
}

// a value too small for a float's normal range is a float all the same (strtof's ERANGE
// on the subnormal 1e-45 was "out of range [0, 10]", which it is not); one no float holds
// says so; an overflow is out of range
Test(flags, float_underflow) {
    TrainConfig c;
    cr_assert_eq(parse(&c, "-l 1e-45"), 0, "%s", llmc_errmsg());
    cr_assert_gt(c.lr, 0.0f);
    cr_assert_lt((double)c.lr, 2e-45);
    cr_assert_eq(parse(&c, "-c 1e-40"), 0, "%s", llmc_errmsg());
    cr_assert_eq(parse(&c, "-l 1e-50"), -1);
    cr_assert_not_null(strstr(llmc_errmsg(), "flag -l: 1e-50 is too small for a float: it would be 0"), "%s", llmc_errmsg());
    cr_assert_eq(parse(&c, "-l 0"), 0, "%s", llmc_errmsg());  // 0 itself is in range
    cr_assert_eq(parse(&c, "-l 1e39"), -1);
    cr_assert_not_null(strstr(llmc_errmsg(), "flag -l: 1e39 is out of range [0, 10]"), "%s", llmc_errmsg());
}

// -g beyond -t is refused, not cut to -t; the default (64) is cut to a shorter -t, and -g
// does not matter without samples
Test(flags, sample_longer_than_the_sequence) {
    TrainConfig c;
    cr_assert_eq(parse(&c, "-t 32 -g 33"), -1);
    cr_assert_not_null(strstr(llmc_errmsg(), "flag -g: 33 tokens per sample is more than the sequence length -t 32"), "%s",
                       llmc_errmsg());
    cr_assert_eq(parse(&c, "-g 32 -t 32"), 0, "%s", llmc_errmsg());
    cr_assert_eq(parse(&c, "-t 32"), 0, "%s", llmc_errmsg());
    cr_assert_eq(parse(&c, "-t 32 -g 100 -s 0"), 0, "%s", llmc_errmsg());
}

// ----------------------------------------------------------------------------
// --profile-ops (llmc/profile.h): the ops' costs, the table's rows, the timeline

// d12's shapes at B=4, T=64 in bf16, each figure worked out by hand (M = B*T = 256 rows)
Test(profile, op_costs_by_hand) {
    GPT2Config c = {.max_seq_len = 1024, .vocab_size = 50257, .padded_vocab_size = 50304, .num_layers = 12, .num_heads = 12,
                    .channels = 768};
    double f = 0, b = 0;
    // qkv: 2 M K N = 2 * 256 * 768 * 2304; (M K + N K + M N + N) * 2 = (196608 + 1769472 + 589824 + 2304) * 2
    cr_assert_eq(gpt2_op_cost(&c, 4, 64, 2, 1, "qkv", &f, &b), 0);
    cr_assert_eq(f, 905969664.0);
    cr_assert_eq(b, 5116416.0);
    // its backward: 4 M K N; (M N + M K + N K + M K + 2 (N K + N)) * 2 = (2752512 + 3543552) * 2
    cr_assert_eq(gpt2_op_cost(&c, 4, 64, 2, 1, "qkv_bwd", &f, &b), 0);
    cr_assert_eq(f, 1811939328.0);
    cr_assert_eq(b, 12592128.0);
    // flash attention: 4 B NH T^2 hs / 2 = 4 * 4 * 12 * 4096 * 64 / 2; q, k, v in and out: 4 * 196608 * 2, the lse 4 * 12 * 64 * 4
    cr_assert_eq(gpt2_op_cost(&c, 4, 64, 2, 1, "attention", &f, &b), 0);
    cr_assert_eq(f, 25165824.0);
    cr_assert_eq(b, 1585152.0);
    // the cuBLAS path computes the whole T x T products: twice the FLOPs
    cr_assert_eq(gpt2_op_cost(&c, 4, 64, 2, 0, "attention", &f, &b), 0);
    cr_assert_eq(f, 50331648.0);
    cr_assert_eq(gpt2_op_cost(&c, 4, 64, 2, 1, "no such op", &f, &b), -1);

    // the floor at 1 PFLOP/s and 1 TB/s: qkv is bound by its bytes, 5116416 / 1e12 s
    OpProfile* p = op_profile_new(&c, 4, 64, 2, 1, 1e15, 1e12, "test");
    cr_assert_not_null(p);
    op_profile_span(p, "qkv", 0, OP_TRACK_COMPUTE, 0.0, 0.5);
    op_profile_step(p, 0, 1000.0, 1.0);
    OpRow r[4];
    cr_assert_eq(op_profile_rows(p, r, 4), 2);
    cr_assert_str_eq(r[0].name, "qkv");
    cr_assert(fabs(r[0].floor_ms - 5.116416e-3) < 1e-12, "floor %.9g ms", r[0].floor_ms);
    op_profile_free(p);
}

// the timeline file op_profile_write_trace wrote at path, parsed (NULL: not JSON)
static cJSON* trace_parse(const char* path) {
    FILE* fp = fopen(path, "rb");
    cr_assert_not_null(fp);
    char text[8192];
    size_t len = fread(text, 1, sizeof(text) - 1, fp);
    fclose(fp);
    text[len] = '\0';
    return cJSON_Parse(text);
}

// Two steps of made-up spans: the rows per step, the longest first, the step's rest in
// "(no op)", the shares summing to the step; the timeline a JSON document with both tracks
// named and every span on the host's clock from the first step's start.
Test(profile, rows_and_timeline, .init = make_tmpdir, .fini = remove_tmpdir) {
    GPT2Config c = small_config();
    OpProfile* p = op_profile_new(&c, 2, 8, 4, 1, 0.0, 0.0, "ops here");
    cr_assert_not_null(p);
    // step 0 at t = 100 ms, 10 ms long: a 0-2, b 2-5; step 1 at 200 ms, 12 ms: a 0-1 and 1-3, b 3-4
    op_profile_span(p, "a", 0, OP_TRACK_COMPUTE, 0.0, 2.0);
    op_profile_span(p, "b", -1, OP_TRACK_COMPUTE, 2.0, 5.0);
    op_profile_span(p, "step", -1, OP_TRACK_HOST, 0.0, 10.0);
    op_profile_step(p, 0, 100.0, 10.0);
    op_profile_span(p, "a", 0, OP_TRACK_COMPUTE, 0.0, 1.0);
    op_profile_span(p, "a", 1, OP_TRACK_COMPUTE, 1.0, 3.0);
    op_profile_span(p, "b", -1, OP_TRACK_COMPUTE, 3.0, 4.0);
    op_profile_step(p, 1, 200.0, 12.0);
    cr_assert_eq(op_profile_steps(p), 2);
    OpRow r[8];
    int n = op_profile_rows(p, r, 8);
    cr_assert_eq(n, 3);
    // per step: a 1.5 calls, (2 + 3) / 2 = 2.5 ms; b 1 call, 2 ms; the rest (10 - 5 + 12 - 4) / 2 = 6.5 ms of 11
    cr_assert_str_eq(r[0].name, "a");
    cr_assert(r[0].calls == 1.5 && r[0].ms == 2.5, "a: %g calls, %g ms", r[0].calls, r[0].ms);
    cr_assert_str_eq(r[1].name, "b");
    cr_assert(r[1].calls == 1.0 && r[1].ms == 2.0);
    cr_assert_str_eq(r[2].name, "(no op)");
    cr_assert(fabs(r[2].ms - 6.5) < 1e-12, "rest %g", r[2].ms);
    cr_assert(fabs(r[0].share + r[1].share + r[2].share - 1.0) < 1e-12, "the shares sum to the step");
    cr_assert(!r[0].known && r[0].floor_ms == 0.0, "no cost known for a made-up op, no floor");

    char path[512];
    tmp_path(path, "trace.json");
    cr_assert_eq(op_profile_write_trace(p, path), 0, "%s", llmc_errmsg());
    cJSON* doc = trace_parse(path);
    cr_assert_not_null(doc, "the timeline is JSON");
    cJSON* ev = cJSON_GetObjectItem(doc, "traceEvents");
    cr_assert_eq(cJSON_GetArraySize(ev), 2 + 6, "two track names and six spans");
    int named = 0;
    double last_ts = -1.0, b1_ts = -1.0;
    for (int i = 0; i < cJSON_GetArraySize(ev); i++) {
        cJSON* e = cJSON_GetArrayItem(ev, i);
        const char* ph = cJSON_GetObjectItem(e, "ph")->valuestring;
        int tid = cJSON_GetObjectItem(e, "tid")->valueint;
        if (!strcmp(ph, "M")) {
            const char* nm = cJSON_GetObjectItem(cJSON_GetObjectItem(e, "args"), "name")->valuestring;
            named += (tid == OP_TRACK_HOST && !strcmp(nm, "host (the step)")) + (tid == OP_TRACK_COMPUTE && !strcmp(nm, "ops here"));
            continue;
        }
        double ts = cJSON_GetObjectItem(e, "ts")->valuedouble;
        if (!strcmp(cJSON_GetObjectItem(e, "name")->valuestring, "b") && ts > 100000.0) { b1_ts = ts; }
        last_ts = ts > last_ts ? ts : last_ts;
    }
    cr_assert_eq(named, 2, "both tracks named");
    // step 1's b at 200 + 3 ms on the host's clock: 103 ms after the first step's start, in microseconds
    cr_assert(fabs(b1_ts - 103000.0) < 1e-6, "b of step 1 at %g us", b1_ts);
    cJSON_Delete(doc);
    op_profile_free(p);
}

// The engine's movers beside the ops: spans on their tracks change no row and no share (a
// copy overlapping an op is not the step's time twice), get a table of their own, and in
// the timeline a named track of their own with the unit in args
Test(profile, movers_beside_ops, .init = make_tmpdir, .fini = remove_tmpdir) {
    GPT2Config c = small_config();
    OpProfile* p = op_profile_new(&c, 2, 8, 4, 1, 0.0, 0.0, "ops here");
    cr_assert_not_null(p);
    op_profile_span(p, "a", 0, OP_TRACK_COMPUTE, 0.0, 4.0);
    op_profile_span(p, "copy out", 3, OP_TRACK_COPIES, 1.0, 3.5);   // overlapping a
    op_profile_span(p, "copy out", 4, OP_TRACK_COPIES, 3.5, 6.0);   // and past it
    op_profile_span(p, "cpu adam", -1, OP_TRACK_ENGINE_HOST, 6.0, 9.0);
    op_profile_step(p, 0, 100.0, 10.0);
    OpRow r[8];
    int n = op_profile_rows(p, r, 8);
    cr_assert_eq(n, 2, "a and (no op): no mover row");
    cr_assert(r[0].ms == 4.0 && fabs(r[1].ms - 6.0) < 1e-12 && fabs(r[0].share + r[1].share - 1.0) < 1e-12,
              "a %g ms, rest %g ms", r[0].ms, r[1].ms);
    char path[512];
    tmp_path(path, "table.txt");
    FILE* fp = fopen(path, "w+b");
    cr_assert_not_null(fp);
    op_profile_print(p, fp);
    rewind(fp);
    char text[8192];
    size_t len = fread(text, 1, sizeof(text) - 1, fp);
    fclose(fp);
    text[len] = '\0';
    const char* movers = strstr(text, "the ZeRO engine's movers");
    cr_assert_not_null(movers, "the movers' table: %s", text);
    double calls = 0.0, ms = 0.0;
    const char* row = strstr(movers, "\n  copy out ");
    const char* track = row != NULL ? strstr(row, "ZeRO copies (copy streams)") : NULL;
    cr_assert(track != NULL && sscanf(track + strlen("ZeRO copies (copy streams)"), "%lf %lf", &calls, &ms) == 2,
              "a copy out row on its track: %s", movers);
    cr_assert(calls == 2.0 && fabs(ms - 5.0) < 1e-3, "copy out: %g calls, %g ms a step", calls, ms);
    cr_assert_not_null(strstr(movers, "\n  cpu adam "), "a cpu adam row");

    tmp_path(path, "trace.json");
    cr_assert_eq(op_profile_write_trace(p, path), 0, "%s", llmc_errmsg());
    cJSON* doc = trace_parse(path);
    cr_assert_not_null(doc, "the timeline is JSON");
    cJSON* ev = cJSON_GetObjectItem(doc, "traceEvents");
    cr_assert_eq(cJSON_GetArraySize(ev), 4 + 4, "four tracks named (no collectives: none had spans) and four spans");
    int units = 0, tracks = 0;
    for (int i = 0; i < cJSON_GetArraySize(ev); i++) {
        cJSON* e = cJSON_GetArrayItem(ev, i);
        int tid = cJSON_GetObjectItem(e, "tid")->valueint;
        cJSON* args = cJSON_GetObjectItem(e, "args");
        if (!strcmp(cJSON_GetObjectItem(e, "ph")->valuestring, "M")) {
            tracks += tid != OP_TRACK_COLLECTIVES;
            continue;
        }
        cJSON* unit = cJSON_GetObjectItem(args, "unit");
        if (!strcmp(cJSON_GetObjectItem(e, "name")->valuestring, "copy out")) {
            units += tid == OP_TRACK_COPIES && unit != NULL && (unit->valueint == 3 || unit->valueint == 4);
        }
    }
    cr_assert(units == 2 && tracks == 4, "copy outs with their units on the copies' track: %d; tracks %d", units, tracks);
    cJSON_Delete(doc);
    op_profile_free(p);
}

// -r -1: the least recompute whose activations fit the room, at each boundary (the table's
// sizes read back, so that the test holds whatever they are, as long as each recompute
// saves memory), 2 when none fits; the margin 5% of the GPU, at least 1 GiB
Test(activations, recompute_auto) {
    GPT2Config c = small_config();
    double a[3];
    for (int r = 0; r < 3; r++) { a[r] = gpt2_activations_total(&c, 4, 64, r, 0, 0, ACT_GPU, 2); }
    cr_assert(a[0] > a[1] && a[1] > a[2] && a[2] > 0, "each recompute saves memory: %g %g %g", a[0], a[1], a[2]);
    int got[6] = {
        gpt2_recompute_auto(&c, 4, 64, 0, 0, 2, a[0] + 1e9), gpt2_recompute_auto(&c, 4, 64, 0, 0, 2, a[0]),
        gpt2_recompute_auto(&c, 4, 64, 0, 0, 2, a[0] - 1), gpt2_recompute_auto(&c, 4, 64, 0, 0, 2, a[1]),
        gpt2_recompute_auto(&c, 4, 64, 0, 0, 2, a[1] - 1), gpt2_recompute_auto(&c, 4, 64, 0, 0, 2, -1.0),
    };
    int want[6] = {0, 0, 1, 1, 2, 2};
    for (int i = 0; i < 6; i++) { cr_assert_eq(got[i], want[i], "room %d: -r %d, not %d", i, got[i], want[i]); }
    const double GiB = 1073741824.0;
    cr_assert(gpt2_recompute_reserve(8 * GiB) == GiB && gpt2_recompute_reserve(80 * GiB) == 4 * GiB,
              "the margin: 1 GiB on 8 GiB, 4 GiB on 80 GiB");
}
