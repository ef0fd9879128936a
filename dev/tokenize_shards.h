/*
 ./tokenize's FineWeb mode: documents from files or standard input, plain text or JSON
 lines, encoded on every core, cut into shards as llm.c's dev/data/fineweb.py cuts them.

   ./tokenize --shards PREFIX [--shard-size N] [--jsonl] [--sections SEP] IN... ('-': stdin)

 Documents: with --jsonl each line of an input is a JSON object whose "text" string is a
 document (a line that is none, or has no "text", is an error naming the input and the
 line); else each input is one document, or with --sections SEP its sections are (as in
 the single-shard mode). Every document is preceded by <|endoftext|>.

 Shards: N tokens each (default 1e8, llm.c's), named PREFIX_val_000000.bin for the first
 and PREFIX_train_000001.bin, ... after it, as fineweb.py names them ("val" for shard 0,
 "train" for the rest); a document that does not fit is split, its remainder starting the
 next shard; the last shard holds what is left. Each is written whole or not at all.

 Parallel: documents are read in batches (up to SHARDS_BATCH_BYTES of text), each batch
 encoded by all OpenMP threads, each with its own Bpe (its cache and regex scratch are
 not shared), and appended in input order, so the output is the same at any thread count.
*/
#ifndef DEV_TOKENIZE_SHARDS_H
#define DEV_TOKENIZE_SHARDS_H

#include <omp.h>             // omp_get_max_threads, omp_get_thread_num: the batch's encoders
#include <cjson/cJSON.h>     // cJSON_ParseWithLength: a JSON line's "text"
#include "zero3/util.h"      // zero_now_ms: the throughput line

#define SHARDS_BATCH_BYTES ((size_t)64 << 20)  // text per parallel batch

// realloc, or exit with a message when memory is out
static void* shards_realloc(void* p, size_t bytes) {
    void* q = realloc(p, bytes);
    if (q == NULL) {
        fprintf(stderr, "tokenize: out of memory growing a batch to %zu bytes\n", bytes);
        exit(EXIT_FAILURE);
    }
    return q;
}

// a batch of documents: their text (pointers into owned copies) and their tokens
typedef struct {
    char** text;          // (n) each a malloc'd copy
    size_t* len;
    uint16_t** toks;      // (n) filled by the encoders
    size_t* ntoks;
    int n, cap;
    size_t bytes;
} ShardBatch;

// where the tokens go: the shard being filled and how many were written before it
typedef struct {
    const char* prefix;
    uint16_t* buf;        // (size)
    size_t size, fill;
    int index;            // of the shard being filled
    size_t total_tokens;
    double total_bytes;
} ShardOut;

static void shard_batch_add(ShardBatch* b, const char* text, size_t len) {
    if (b->n == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 1024;
        b->text = shards_realloc(b->text, (size_t)b->cap * sizeof(char*));
        b->len = shards_realloc(b->len, (size_t)b->cap * sizeof(size_t));
        b->toks = shards_realloc(b->toks, (size_t)b->cap * sizeof(uint16_t*));
        b->ntoks = shards_realloc(b->ntoks, (size_t)b->cap * sizeof(size_t));
    }
    char* copy = mallocCheck(len + 1);
    memcpy(copy, text, len);
    copy[len] = '\0';
    b->text[b->n] = copy;
    b->len[b->n] = len;
    b->toks[b->n] = NULL;
    b->n++;
    b->bytes += len;
}

// the shard being filled, to PREFIX_{val|train}_NNNNNN.bin
static int shard_flush(ShardOut* o) {
    char path[4200];
    snprintf(path, sizeof(path), "%s_%s_%06d.bin", o->prefix, o->index == 0 ? "val" : "train", o->index);
    if (shard_write(path, o->buf, o->fill) != 0) { return -1; }
    printf("wrote %zu tokens to %s\n", o->fill, path);
    o->index++;
    o->fill = 0;
    return 0;
}

// appends n tokens, writing each shard as it fills (a document is split across shards)
static int shard_append(ShardOut* o, const uint16_t* t, size_t n) {
    while (n > 0) {
        size_t k = o->size - o->fill < n ? o->size - o->fill : n;
        memcpy(o->buf + o->fill, t, k * sizeof(uint16_t));
        o->fill += k;
        o->total_tokens += k;
        t += k;
        n -= k;
        if (o->fill == o->size && shard_flush(o) != 0) { return -1; }
    }
    return 0;
}

// Encodes the batch on every thread (bpes: one per thread) and appends it in order:
// <|endoftext|>, then the document's tokens (with sep: <|endoftext|> before each section).
static int shard_batch_run(ShardBatch* b, Bpe* bpes, const char* sep, size_t sep_len, ShardOut* o, const char* what) {
    int failed = -1;  // the first document that failed, or -1
    char why[1200] = "";
    #pragma omp parallel for schedule(dynamic, 16)
    for (int i = 0; i < b->n; i++) {
        Bpe* bpe = &bpes[omp_get_thread_num()];
        int rc = sep != NULL ? sections_encode(bpe, b->text[i], b->len[i], sep, sep_len, &b->toks[i], &b->ntoks[i])
                             : bpe_encode(bpe, b->text[i], b->len[i], &b->toks[i], &b->ntoks[i]);
        if (rc != 0) {
            #pragma omp critical
            if (failed < 0 || i < failed) { failed = i; snprintf(why, sizeof(why), "%s", llmc_errmsg()); }
        }
    }
    int rc = 0;
    if (failed >= 0) { rc = llmc_error("%s, document %d of its batch: %s", what, failed + 1, why); }
    uint16_t eot = (uint16_t)bpes[0].eot_token;
    for (int i = 0; i < b->n; i++) {
        if (rc == 0 && sep == NULL) { rc = shard_append(o, &eot, 1); }  // (sections_encode puts its own)
        if (rc == 0) { rc = shard_append(o, b->toks[i], b->ntoks[i]); }
        o->total_bytes += (double)b->len[i];
        free(b->toks[i]);
        free(b->text[i]);
    }
    b->n = 0;
    b->bytes = 0;
    return rc;
}

// One input's documents into the batch (run whenever it holds SHARDS_BATCH_BYTES): the
// whole input (its stream closed here), or with jsonl each line's "text" (left open).
static int shard_input(FILE* in, const char* path, int jsonl, ShardBatch* b, Bpe* bpes, const char* sep, size_t sep_len,
                       ShardOut* o) {
    if (!jsonl) {
        char* text;
        size_t size;
        if (tokenizer_slurp_stream(in, path, &text, &size) != 0) { return -1; }
        shard_batch_add(b, text, size);
        free(text);
        return shard_batch_run(b, bpes, sep, sep_len, o, path);
    }
    char* line = NULL;
    size_t cap = 0;
    ssize_t len;
    long lineno = 0;
    int rc = 0;
    while (rc == 0 && (len = getline(&line, &cap, in)) >= 0) {
        lineno++;
        if (len == 0 || (len == 1 && line[0] == '\n')) { continue; }
        cJSON* j = cJSON_ParseWithLength(line, (size_t)len);
        const cJSON* t = j != NULL ? cJSON_GetObjectItemCaseSensitive(j, "text") : NULL;
        if (!cJSON_IsString(t)) {
            rc = llmc_error("%s line %ld: %s", path, lineno, j == NULL ? "not JSON" : "no \"text\" string");
        } else {
            shard_batch_add(b, t->valuestring, strlen(t->valuestring));
            if (b->bytes >= SHARDS_BATCH_BYTES) {
                char what[4200];
                snprintf(what, sizeof(what), "%s up to line %ld", path, lineno);
                rc = shard_batch_run(b, bpes, sep, sep_len, o, what);
            }
        }
        cJSON_Delete(j);
    }
    free(line);
    if (rc == 0 && ferror(in)) { rc = llmc_error("%s: read error: %s", path, strerror(errno)); }
    if (rc == 0 && b->n > 0) { rc = shard_batch_run(b, bpes, sep, sep_len, o, path); }
    return rc;
}

// the FineWeb mode: every input into PREFIX's shards of shard_size tokens; 0, or -1 with
// llmc_errmsg() naming the input
static int shards_run(const char* prefix, size_t shard_size, int jsonl, const char* sep, size_t sep_len, const char* const* ins,
                      int n_in, const char* encoder, const char* vocab) {
    int threads = omp_get_max_threads();
    Bpe* bpes = calloc((size_t)threads, sizeof(Bpe));
    if (bpes == NULL) { return llmc_error("out of memory for %d encoders", threads); }
    int rc = 0;
    for (int i = 0; i < threads && rc == 0; i++) { rc = bpe_init(&bpes[i], encoder, vocab); }
    ShardOut o = {prefix, NULL, shard_size, 0, 0, 0, 0.0};
    ShardBatch b;
    memset(&b, 0, sizeof(b));
    if (rc == 0) { o.buf = mallocCheck(shard_size * sizeof(uint16_t)); }
    double t0 = zero_now_ms();
    for (int i = 0; i < n_in && rc == 0; i++) {
        int is_stdin = strcmp(ins[i], "-") == 0;
        FILE* in = is_stdin ? stdin : fopen(ins[i], "rb");
        if (in == NULL) { rc = llmc_error("%s: cannot open: %s", ins[i], strerror(errno)); break; }
        rc = shard_input(in, is_stdin ? "standard input" : ins[i], jsonl, &b, bpes, sep, sep_len, &o);
        if (jsonl && !is_stdin) { fclose(in); }  // (a whole-file document's stream is closed by tokenizer_slurp_stream)
    }
    if (rc == 0 && o.fill > 0) { rc = shard_flush(&o); }
    double s = (zero_now_ms() - t0) / 1e3;
    if (rc == 0) {
        printf("tokenize: %zu tokens in %d shard%s from %.1f MB of text in %.2f s on %d thread%s: %.2f MB/s, %.0f tokens/s\n",
               o.total_tokens, o.index, o.index == 1 ? "" : "s", o.total_bytes / 1e6, s, threads, threads == 1 ? "" : "s",
               o.total_bytes / 1e6 / s, (double)o.total_tokens / s);
    }
    for (int i = 0; i < b.n; i++) { free(b.text[i]); free(b.toks[i]); }
    free(b.text); free(b.len); free(b.toks); free(b.ntoks);
    free(o.buf);
    for (int i = 0; i < threads; i++) { bpe_free(&bpes[i]); }
    free(bpes);
    return rc;
}

#endif // DEV_TOKENIZE_SHARDS_H
