// Multiple-choice evaluation in llm.c's eval file format (llmc/hellaswag.h).
#include "llmc/hellaswag.h"  // the interface
#include <stdio.h>           // FILE, fwrite
#include <stdlib.h>          // malloc, free
#include <string.h>          // memset, strerror
#include <errno.h>           // errno for the messages
#include <fcntl.h>           // O_RDONLY
#include "llmc/utils.h"      // llmc_error, AtomicFile: atomic_open, atomic_commit
#include "llmc/tokenizer.h"  // tokenizer_read_u32le, tokenizer_write_u32le, tokenizer_fwrite_u16le, tokenizer_slurp_stream
#include "common/file.h"     // file_fopen: the eval file opened without waiting on a FIFO or a device

void evalset_free(EvalSet* s) {
    free(s->label); free(s->first); free(s->ctx_at); free(s->ctx_len);
    free(s->comp_at); free(s->comp_len); free(s->tokens);
    memset(s, 0, sizeof(*s));
}

// one example at w (uint16 words, nw of them from w on): its fields into s as example i
static int parse_example(EvalSet* s, const char* path, const unsigned char* w, size_t nw, int i, int* comps, int* ntok,
                         size_t* used) {
#define W(k) ((unsigned)w[2 * (k)] | (unsigned)w[2 * (k) + 1] << 8)
    if (nw < 6) { return llmc_error("%s: example %d: the file ends inside its fields", path, i); }
    if (W(0) != EVAL_START) { return llmc_error("%s: example %d does not start with %u (found %u): not an eval file, or damaged", path, i, EVAL_START, W(0)); }
    size_t words = W(1) / 2;
    if (W(1) % 2 != 0 || words < 6 || words > nw) { return llmc_error("%s: example %d: size %u bytes is odd, too small or past the file's end", path, i, W(1)); }
    if ((int)W(2) != i) { return llmc_error("%s: example %d has the index %u: examples must come in order", path, i, W(2)); }
    int label = (int)W(3), k = (int)W(4);
    if (k < 1 || label >= k) { return llmc_error("%s: example %d: label %d of %d completions", path, i, label, k); }
    size_t at = 5;
    s->label[i] = label;
    s->ctx_len[i] = (int)W(at);
    s->ctx_at[i] = *ntok;
    if (s->ctx_len[i] < 1 || at + 1 + (size_t)s->ctx_len[i] > words) { return llmc_error("%s: example %d: context of %d tokens (at least 1, within the example)", path, i, s->ctx_len[i]); }
    for (int t = 0; t < s->ctx_len[i]; t++) { s->tokens[(*ntok)++] = (uint16_t)W(at + 1 + t); }
    at += 1 + (size_t)s->ctx_len[i];
    s->first[i] = *comps;
    for (int j = 0; j < k; j++) {
        int len = at < words ? (int)W(at) : -1;
        if (len < 1 || at + 1 + (size_t)len > words) { return llmc_error("%s: example %d: completion %d has no tokens or runs past the example", path, i, j); }
        s->comp_at[*comps] = *ntok;
        s->comp_len[(*comps)++] = len;
        for (int t = 0; t < len; t++) { s->tokens[(*ntok)++] = (uint16_t)W(at + 1 + t); }
        at += 1 + (size_t)len;
    }
    if (at != words) { return llmc_error("%s: example %d: %zu bytes after its last completion", path, i, 2 * (words - at)); }
    *used = words;
    return 0;
#undef W
}

// every token id below vocab_size, every row within T, every example within B rows
static int check_fits(EvalSet* s, const char* path, int B, int T, int vocab_size) {
    for (int i = 0; i < s->n; i++) {
        int k = s->first[i + 1] - s->first[i];
        if (k > B) { return llmc_error("%s: example %d has %d completions, one row each: more than the batch's -b %d rows", path, i, k, B); }
        for (int j = s->first[i]; j < s->first[i + 1]; j++) {
            int row = s->ctx_len[i] + s->comp_len[j];
            if (row > s->longest) { s->longest = row; }
            if (row > T) { return llmc_error("%s: example %d: context and completion %d take %d tokens, more than -t %d", path, i, j - s->first[i], row, T); }
        }
        int end = s->comp_at[s->first[i + 1] - 1] + s->comp_len[s->first[i + 1] - 1];
        for (int t = s->ctx_at[i]; t < end; t++) {
            if (s->tokens[t] >= vocab_size) { return llmc_error("%s: example %d: token %u is not in the model's vocabulary of %d", path, i, s->tokens[t], vocab_size); }
        }
    }
    return 0;
}

int evalset_load(EvalSet* s, const char* path, int B, int T, int vocab_size) {
    memset(s, 0, sizeof(*s));
    // read whole (HellaSwag's validation set is 3.6 MB), only when it is a regular file
    const char* why = NULL;
    FILE* fp = file_fopen(path, O_RDONLY, 0, "rb", &why);
    if (fp == NULL) { return llmc_error("%s: cannot open: %s", path, why); }
    char* text = NULL;
    size_t size = 0;
    if (tokenizer_slurp_stream(fp, path, &text, &size) != 0) { return -1; }
    unsigned char* buf = (unsigned char*)text;
    int rc = -1;
    if (size < EVAL_HEADER_INTS * 4) { llmc_error("%s: %zu bytes: shorter than the eval file's header", path, size); goto done; }
    if (tokenizer_read_u32le(buf) != EVAL_MAGIC) { llmc_error("%s: magic %u, not an eval file (%d); a token shard or model file given as the eval file?", path, tokenizer_read_u32le(buf), EVAL_MAGIC); goto done; }
    if (tokenizer_read_u32le(buf + 4) != EVAL_VERSION) { llmc_error("%s: eval file version %u; this build reads version %d", path, tokenizer_read_u32le(buf + 4), EVAL_VERSION); goto done; }
    int n = (int)tokenizer_read_u32le(buf + 8);
    size_t nw = (size - EVAL_HEADER_INTS * 4) / 2;
    if (n < 1 || (size_t)n > nw / 6) { llmc_error("%s: %d examples in the header, for %zu bytes of examples", path, n, size - EVAL_HEADER_INTS * 4); goto done; }
    s->n = n;
    s->label = (int*)malloc((size_t)n * sizeof(int)); s->first = (int*)malloc(((size_t)n + 1) * sizeof(int));
    s->ctx_at = (int*)malloc((size_t)n * sizeof(int)); s->ctx_len = (int*)malloc((size_t)n * sizeof(int));
    s->comp_at = (int*)malloc(nw * sizeof(int)); s->comp_len = (int*)malloc(nw * sizeof(int));
    s->tokens = (uint16_t*)malloc(nw * sizeof(uint16_t));
    if (!s->label || !s->first || !s->ctx_at || !s->ctx_len || !s->comp_at || !s->comp_len || !s->tokens) {
        llmc_error("%s: out of memory for %d examples", path, n);
        goto done;
    }
    const unsigned char* w = buf + EVAL_HEADER_INTS * 4;
    int comps = 0, ntok = 0;
    for (int i = 0; i < n; i++) {
        size_t used = 0;
        if (parse_example(s, path, w, nw, i, &comps, &ntok, &used) != 0) { goto done; }
        w += 2 * used;
        nw -= used;
    }
    if (nw != 0 || (size - EVAL_HEADER_INTS * 4) % 2 != 0) { llmc_error("%s: bytes after the last of its %d examples", path, n); goto done; }
    s->first[n] = comps;
    s->completions = comps;
    rc = check_fits(s, path, B, T, vocab_size);
done:
    free(buf);
    if (rc != 0) { evalset_free(s); }
    return rc;
}

int evalset_write(const EvalSet* s, const char* path) {
    if (s->n < 1 || s->n > 65535) { return llmc_error("%s: %d examples: the format holds 1 to 65535", path, s->n); }
    size_t cap = 0;
    for (int i = 0; i < s->n; i++) {
        size_t words = 6 + (size_t)s->ctx_len[i];
        for (int j = s->first[i]; j < s->first[i + 1]; j++) { words += 1 + (size_t)s->comp_len[j]; }
        if (2 * words > 65535) { return llmc_error("%s: example %d takes %zu bytes: the format's limit is 65535", path, i, 2 * words); }
        cap += words;
    }
    // 65535 opens an example, so no id may be it (nor a label or length past 65534: none is)
    size_t ntok = 0;
    for (int i = 0; i < s->n; i++) {
        int end = s->comp_at[s->first[i + 1] - 1] + s->comp_len[s->first[i + 1] - 1];
        ntok = (size_t)end > ntok ? (size_t)end : ntok;
    }
    for (size_t t = 0; t < ntok; t++) {
        if (s->tokens[t] == EVAL_START) { return llmc_error("%s: token id %u is the format's example marker", path, EVAL_START); }
    }
    uint16_t* out = (uint16_t*)malloc(cap * sizeof(uint16_t));
    if (out == NULL) { return llmc_error("%s: out of memory", path); }
    size_t n = 0, longest = 0;
    for (int i = 0; i < s->n; i++) {
        size_t start = n;
        out[n++] = EVAL_START;
        out[n++] = 0;  // the example's size, below
        out[n++] = (uint16_t)i;
        out[n++] = (uint16_t)s->label[i];
        out[n++] = (uint16_t)(s->first[i + 1] - s->first[i]);
        out[n++] = (uint16_t)s->ctx_len[i];
        for (int t = 0; t < s->ctx_len[i]; t++) { out[n++] = s->tokens[s->ctx_at[i] + t]; }
        for (int j = s->first[i]; j < s->first[i + 1]; j++) {
            out[n++] = (uint16_t)s->comp_len[j];
            for (int t = 0; t < s->comp_len[j]; t++) { out[n++] = s->tokens[s->comp_at[j] + t]; }
        }
        out[start + 1] = (uint16_t)(2 * (n - start));
        if (2 * (n - start) > longest) { longest = 2 * (n - start); }
    }
    unsigned char header[EVAL_HEADER_INTS * 4];
    memset(header, 0, sizeof(header));
    tokenizer_write_u32le(header, EVAL_MAGIC);
    tokenizer_write_u32le(header + 4, EVAL_VERSION);
    tokenizer_write_u32le(header + 8, (uint32_t)s->n);
    tokenizer_write_u32le(header + 12, (uint32_t)longest);
    AtomicFile f;
    if (atomic_open(&f, path) != 0) { free(out); return -1; }
    int ok = fwrite(header, 1, sizeof(header), f.fp) == sizeof(header) && tokenizer_fwrite_u16le(f.fp, out, n) == 0;
    free(out);
    return atomic_commit(&f, ok);
}

// rank's examples (r, r + world, ...) packed in order, whole, into batches of B rows:
// calls visit(ctx, batch, example) for each; returns the number of batches
static int pack(const EvalSet* s, int B, int rank, int world, void (*visit)(void*, int, int), void* ctx) {
    int batch = 0, rows = 0;
    for (int i = rank; i < s->n; i += world) {
        int k = s->first[i + 1] - s->first[i];
        if (rows + k > B) { batch++; rows = 0; }
        rows += k;
        if (visit != NULL) { visit(ctx, batch, i); }
    }
    return rows > 0 ? batch + 1 : 0;
}

int evalset_num_batches(const EvalSet* s, int B, int world) {
    int most = 0;
    for (int r = 0; r < world; r++) {
        int nb = pack(s, B, r, world, NULL, NULL);
        most = nb > most ? nb : most;
    }
    return most;
}

typedef struct { int want, count; int* ex; } Pick;
static void pick(void* ctx, int batch, int example) {
    Pick* p = (Pick*)ctx;
    if (batch == p->want) { p->ex[p->count++] = example; }
}

int evalset_batch(const EvalSet* s, int B, int T, int rank, int world, int k, int* inputs, int* targets, int* ex) {
    Pick p = {k, 0, ex};
    pack(s, B, rank, world, pick, &p);
    memset(inputs, 0, (size_t)B * T * sizeof(int));
    memset(targets, 0, (size_t)B * T * sizeof(int));
    int row = 0;
    for (int e = 0; e < p.count; e++) {
        int i = ex[e];
        for (int j = s->first[i]; j < s->first[i + 1]; j++, row++) {
            int* in = inputs + (size_t)row * T;
            int* tg = targets + (size_t)row * T;
            int c = s->ctx_len[i], len = c + s->comp_len[j];
            for (int t = 0; t < c; t++) { in[t] = s->tokens[s->ctx_at[i] + t]; }
            for (int t = c; t < len; t++) { in[t] = s->tokens[s->comp_at[j] + t - c]; }
            for (int t = 0; t + 1 < len; t++) { tg[t] = in[t + 1]; }
        }
    }
    return p.count;
}

void evalset_score(const EvalSet* s, int T, const int* ex, int count, const float* losses, double* scores) {
    int row = 0;
    for (int e = 0; e < count; e++) {
        int i = ex[e];
        for (int j = s->first[i]; j < s->first[i + 1]; j++, row++) {
            const float* l = losses + (size_t)row * T;
            double sum = 0.0;
            // position p predicts token p + 1: the completion's tokens c .. c+len-1
            for (int p = s->ctx_len[i] - 1; p < s->ctx_len[i] + s->comp_len[j] - 1; p++) { sum += l[p]; }
            scores[j] = sum / s->comp_len[j];
        }
    }
}

int evalset_predict(const EvalSet* s, int i, const double* scores) {
    int best = s->first[i];
    for (int j = s->first[i] + 1; j < s->first[i + 1]; j++) {
        if (scores[j] < scores[best]) { best = j; }
    }
    return best - s->first[i];
}
