/*
 Encodes UTF-8 text with GPT-2's BPE into llm.c data shards, or writes the
 tokenizer (decoder) file of the vocabulary.

   ./tokenize [--encoder PATH] [--vocab PATH] [--sections SEP] IN.txt OUT.bin
   ./tokenize [--encoder PATH] [--vocab PATH] [--sections SEP] --val-tokens N IN.txt VAL.bin TRAIN.bin
   ./tokenize [--encoder PATH] [--vocab PATH] --tokenizer-file OUT.bin
   ./tokenize [--encoder PATH] [--vocab PATH] --shards PREFIX [--shard-size N] [--jsonl] [--sections SEP] IN...
     (FineWeb's way, on every core: see "--shards" below)
   ./tokenize [--encoder PATH] [--vocab PATH] --hellaswag IN.jsonl OUT.bin
     (HellaSwag's examples into llm.c's eval file: see "--hellaswag" below)

 Shard format: 256 x int32 little-endian header ([0]=20240520 magic, [1]=1 version,
 [2]=number of tokens), then the tokens as uint16 little-endian.

 Documents. Without --sections the whole file is encoded as one piece of text and no
 <|endoftext|> is added. With --sections SEP the text is cut after every SEP into
 sections, as llm.c's dev/data/tinyshakespeare.py does with SEP = "\n\n":
   - each section is a document and <|endoftext|> comes *before* it (so the stream
     starts with one);
   - each section keeps its SEP at its end; only the last has none (llm.c meant to drop
     the separators but kept them, and keeps that for backwards compatibility);
   - each section is encoded on its own: BPE never sees across a section boundary, so a
     "\n\n" at the end of a section is one token (628) instead of the "\n" "\n" that
     the regex gives when a word follows it.
 SEP may use the escapes \n, \t, \r and \\ so that a shell needs no special quoting.

 Split. With --val-tokens N the first N tokens go to VAL.bin and the rest to
 TRAIN.bin: llm.c's validation split (N = 32768 for tinyshakespeare).

 Vocabulary. The defaults dev/data/gpt2/encoder.json and vocab.bpe are relative to the
 repository root. When they are not found from the current directory they are looked
 up next to the executable (`make tokenize` puts it in the root), so ./tokenize works
 from anywhere; --encoder and --vocab are used exactly as given.

 --hellaswag. Each line of IN.jsonl is one of HellaSwag's examples (hellaswag_val.jsonl):
 its "ctx" string, its "endings" (strings) and its "label" (the right ending's index, a
 number or a string of digits). The context is encoded as it is and each ending with a
 space before it, as llm.c's dev/data/hellaswag.py does, into the eval file of
 llmc/hellaswag.h (magic 20240522) that the trainers' -h 1 reads.

 Outputs are written to OUT.tmp and renamed, and the tmp file is removed on any
 error, so OUT is either complete or absent. No output replaces an input (IN.txt, the
 vocabulary files; compared by device and inode) or the other output: refused before
 anything is read.

 build (from the repo root):
   gcc -O2 -Wall -Wextra -I. dev/tokenize.c -o tokenize $(pkg-config --cflags --libs libpcre2-8 libcjson)
*/
#ifndef _GNU_SOURCE
#define _GNU_SOURCE          // memmem (the Makefile defines it already)
#endif
#include <stdio.h>           // printf, fprintf, fwrite; fopen: the text to tokenize
#include <stdlib.h>          // free, exit, strtoull
#include <string.h>          // strcmp, strlen, strerror, memmem
#include <stdint.h>          // uint16_t, int32_t
#include <errno.h>           // errno for the messages
#include <limits.h>          // PATH_MAX
#include <unistd.h>          // access, readlink, getcwd
#include <sys/stat.h>        // stat: VAL.bin and TRAIN.bin the same file
#include "llmc/utils.h"      // llmc_error, llmcCheck, mallocCheck; llmc_input_add, output_check, path_in_dir: no output over an input
#include "llmc/tokenizer.h"  // Bpe: bpe_init, bpe_encode, bpe_write_tokenizer_file; tokenizer_fwrite_u16le
#include "zero3/util.h"      // zero_now_ms: --shards' throughput line
#include <omp.h>             // omp_get_max_threads, omp_get_thread_num: --shards' encoders
#include <cjson/cJSON.h>     // cJSON_ParseWithLength: a JSON line's "text" (--shards --jsonl), HellaSwag's examples
#include "llmc/hellaswag.h"  // EvalSet, evalset_write: --hellaswag's eval file

#define SHARD_MAGIC 20240520
#define SHARD_VERSION 1
#define SHARD_HEADER_INTS 256
#define DEFAULT_ENCODER "dev/data/gpt2/encoder.json"
#define DEFAULT_VOCAB "dev/data/gpt2/vocab.bpe"
#define HELLASWAG_MAX_ENDINGS 16  // HellaSwag has 4; room for other multiple-choice sets

static void usage(FILE* fp) {
    fprintf(fp,
        "usage: ./tokenize [--encoder PATH] [--vocab PATH] [--sections SEP] IN.txt OUT.bin\n"
        "       ./tokenize [--encoder PATH] [--vocab PATH] [--sections SEP] --val-tokens N IN.txt VAL.bin TRAIN.bin\n"
        "       ./tokenize [--encoder PATH] [--vocab PATH] --tokenizer-file OUT.bin\n"
        "       ./tokenize [--encoder PATH] [--vocab PATH] --shards PREFIX [--shard-size N] [--jsonl] [--sections SEP] IN...\n"
        "       ./tokenize [--encoder PATH] [--vocab PATH] --hellaswag IN.jsonl OUT.bin\n"
        "  IN.txt OUT.bin          encode IN.txt (UTF-8) with GPT-2 BPE into one data shard\n"
        "  --sections SEP          cut the text after every SEP into documents, each preceded by\n"
        "                          <|endoftext|> and encoded on its own; SEP keeps its place at the\n"
        "                          end of its section (llm.c's tinyshakespeare: --sections '\\n\\n');\n"
        "                          escapes \\n \\t \\r \\\\ are understood\n"
        "  --val-tokens N          the first N tokens go to VAL.bin, the rest to TRAIN.bin\n"
        "  --tokenizer-file OUT    write the tokenizer (decoder) file of the vocabulary\n"
        "  --shards PREFIX         FineWeb's way, on every core (OMP_NUM_THREADS): the inputs (files, or - for\n"
        "                          standard input) as documents, each after <|endoftext|>, into shards of\n"
        "                          --shard-size tokens (default 1e8) named as llm.c's fineweb.py names them:\n"
        "                          PREFIX_val_000000.bin, then PREFIX_train_000001.bin, ...\n"
        "  --jsonl                 with --shards: each input line is a JSON object whose \"text\" is a document\n"
        "  --hellaswag IN OUT      HellaSwag's jsonl (\"ctx\", \"endings\", \"label\" per line) into llm.c's eval\n"
        "                          file for the trainers' -h 1 (each ending encoded after a space)\n"
        "  --encoder PATH          encoder.json (default " DEFAULT_ENCODER ", from the current\n"
        "                          directory or else next to this executable)\n"
        "  --vocab PATH            vocab.bpe (default " DEFAULT_VOCAB ", looked up the same way)\n"
        "  -h, --help              this help\n");
}

// writes the shard whole or not at all (AtomicFile: path.tmp, renamed once complete)
static int shard_write(const char* path, const uint16_t* tokens, size_t n) {
    if (n > INT32_MAX) { return llmc_error("%s: %zu tokens do not fit the int32 header", path, n); }
    AtomicFile f;
    if (atomic_open(&f, path) != 0) { return -1; }
    unsigned char header[SHARD_HEADER_INTS * 4];
    memset(header, 0, sizeof(header));
    tokenizer_write_u32le(header, SHARD_MAGIC);
    tokenizer_write_u32le(header + 4, SHARD_VERSION);
    tokenizer_write_u32le(header + 8, (uint32_t)n);
    int ok = fwrite(header, 1, sizeof(header), f.fp) == sizeof(header) && tokenizer_fwrite_u16le(f.fp, tokens, n) == 0;
    return atomic_commit(&f, ok);
}

// one line on stderr and exit 1: the way every error of this tool ends
static void die(const char* msg) {
    fprintf(stderr, "tokenize: %s\n", msg);
    exit(EXIT_FAILURE);
}

// ----------------------------------------------------------------------------
// finding the vocabulary

// The default vocabulary path rel (relative to the repo root) as it exists: from the
// current directory, else from the directory of this executable, which `make tokenize`
// puts in the repo root. Only for the defaults: a path the user gives is used as it is.
// out gets the path found (cap bytes); 0, or -1 with a message naming every path tried.
static int vocab_path_find(const char* rel, const char* flag, char* out, size_t cap) {
    if (access(rel, F_OK) == 0) {
        snprintf(out, cap, "%s", rel);
        return 0;
    }
    char cwd[PATH_MAX];
    if (getcwd(cwd, sizeof(cwd)) == NULL) { snprintf(cwd, sizeof(cwd), "."); }
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (len <= 0) {
        return llmc_error("cannot find %s/%s, nor this executable's directory (/proc/self/exe: %s); pass %s PATH",
                          cwd, rel, strerror(errno), flag);
    }
    exe[len] = '\0';
    *strrchr(exe, '/') = '\0';  // the directory: readlink gives an absolute path
    if (snprintf(out, cap, "%s/%s", exe, rel) < (int)cap && access(out, F_OK) == 0) { return 0; }
    if (strcmp(cwd, exe) == 0) {  // run from the executable's own directory: one place tried
        return llmc_error("cannot find %s/%s; pass %s PATH", cwd, rel, flag);
    }
    return llmc_error("cannot find %s: tried %s/%s (from the current directory) and %s/%s "
                      "(next to the executable); pass %s PATH", rel, cwd, rel, exe, rel, flag);
}

// ----------------------------------------------------------------------------
// documents

// SEP from the command line with \n, \t, \r and \\ turned into their bytes, in a new
// NUL-terminated string (*len bytes); 0, or -1 for an empty SEP or an unknown escape
static int sections_unescape(const char* arg, char** sep, size_t* len) {
    char* s = mallocCheck(strlen(arg) + 1);
    size_t n = 0;
    for (const char* p = arg; *p != '\0'; p++) {
        if (*p != '\\') { s[n++] = *p; continue; }
        p++;
        if (*p == 'n') { s[n++] = '\n'; }
        else if (*p == 't') { s[n++] = '\t'; }
        else if (*p == 'r') { s[n++] = '\r'; }
        else if (*p == '\\') { s[n++] = '\\'; }
        else {
            free(s);
            return llmc_error("--sections '%s': unknown escape '\\%.1s' (known: \\n \\t \\r \\\\)", arg, p);
        }
    }
    if (n == 0) { free(s); return llmc_error("--sections: the separator is empty"); }
    s[n] = '\0';
    *sep = s;
    *len = n;
    return 0;
}

// Encodes text as documents cut after every sep (see the top comment): for each
// section, <|endoftext|> and then its tokens, BPE run on the section alone.
// *out is malloc'd; 0, or -1 with a message (invalid UTF-8: its byte offset).
static int sections_encode(Bpe* bpe, const char* text, size_t size, const char* sep, size_t sep_len,
                           uint16_t** out, size_t* n_out) {
    // checked here once so that the message gives the offset in the file, not in a section
    size_t bad = bpe_utf8_invalid_at(text, size);
    if (bad != size) {
        return llmc_error("invalid UTF-8 at byte offset %zu (byte 0x%02x)", bad, (unsigned char)text[bad]);
    }
    // every token covers at least one byte, and each of the at most size / sep_len + 1
    // sections adds one <|endoftext|>
    uint16_t* toks = mallocCheck((size + size / sep_len + 1) * sizeof(uint16_t));
    size_t n = 0, start = 0;
    while (1) {
        const char* hit = memmem(text + start, size - start, sep, sep_len);
        size_t end = hit != NULL ? (size_t)(hit - text) + sep_len : size;  // the sep stays in its section
        uint16_t* piece;
        size_t k;
        if (bpe_encode(bpe, text + start, end - start, &piece, &k) != 0) { free(toks); return -1; }
        toks[n++] = (uint16_t)bpe->eot_token;
        memcpy(toks + n, piece, k * sizeof(uint16_t));
        n += k;
        free(piece);
        if (hit == NULL) { break; }
        start = end;
    }
    *out = toks;
    *n_out = n;
    return 0;
}

// ----------------------------------------------------------------------------
// --shards: FineWeb's way
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

// Each non-blank line of `in` (named `path` in messages) parsed as JSON and handed to
// fn(ctx, json, lineno) until fn fails (its message names the line). 0, or -1 with
// llmc_errmsg(): fn's, a line that is not JSON, or a read error. --shards --jsonl and
// --hellaswag read their inputs through it.
static int jsonl_each(FILE* in, const char* path, int (*fn)(void* ctx, const cJSON* j, long lineno), void* ctx) {
    char* line = NULL;
    size_t cap = 0;
    ssize_t len;
    long lineno = 0;
    int rc = 0;
    while (rc == 0 && (len = getline(&line, &cap, in)) >= 0) {
        lineno++;
        if (len == 0 || (len == 1 && line[0] == '\n')) { continue; }
        cJSON* j = cJSON_ParseWithLength(line, (size_t)len);
        rc = j == NULL ? llmc_error("%s line %ld: not JSON", path, lineno) : fn(ctx, j, lineno);
        cJSON_Delete(j);
    }
    free(line);
    if (rc == 0 && ferror(in)) { rc = llmc_error("%s: read error: %s", path, strerror(errno)); }
    return rc;
}

// what a JSON line's document goes into (shard_line)
typedef struct {
    const char* path;
    ShardBatch* b;
    Bpe* bpes;
    const char* sep;
    size_t sep_len;
    ShardOut* o;
} ShardLines;

// one JSON line's "text" into the batch, which runs whenever it holds SHARDS_BATCH_BYTES
static int shard_line(void* ctx, const cJSON* j, long lineno) {
    ShardLines* c = (ShardLines*)ctx;
    const cJSON* t = cJSON_GetObjectItemCaseSensitive(j, "text");
    if (!cJSON_IsString(t)) { return llmc_error("%s line %ld: no \"text\" string", c->path, lineno); }
    shard_batch_add(c->b, t->valuestring, strlen(t->valuestring));
    if (c->b->bytes < SHARDS_BATCH_BYTES) { return 0; }
    char what[4200];
    snprintf(what, sizeof(what), "%s up to line %ld", c->path, lineno);
    return shard_batch_run(c->b, c->bpes, c->sep, c->sep_len, c->o, what);
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
    ShardLines c = {path, b, bpes, sep, sep_len, o};
    int rc = jsonl_each(in, path, shard_line, &c);
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

// Before anything is read: no output replaces an input (the text, --encoder, --vocab,
// compared by device and inode, so another name for the same file counts: atomic_open's
// output_check), or the other output (VAL.bin and TRAIN.bin one file: the second would
// replace the first). outputs[1] may be NULL. Returns 0, or -1 with llmc_errmsg() naming both.
static int outputs_check(const char* text, const char* encoder, const char* vocab, const char* outputs[2]) {
    if (llmc_input_add(text, "IN.txt") != 0 || llmc_input_add(encoder, "--encoder") != 0 || llmc_input_add(vocab, "--vocab") != 0) {
        return -1;
    }
    for (int i = 0; i < 2 && outputs[i] != NULL; i++) {
        if (output_check(outputs[i]) != 0) { return -1; }
    }
    if (outputs[1] == NULL) { return 0; }
    char dir0[4096];
    path_dir(outputs[0], dir0, sizeof(dir0));
    const char* base0 = strrchr(outputs[0], '/') != NULL ? strrchr(outputs[0], '/') + 1 : outputs[0];
    const char* base1 = strrchr(outputs[1], '/') != NULL ? strrchr(outputs[1], '/') + 1 : outputs[1];
    struct stat a, b;
    int linked = stat(outputs[0], &a) == 0 && stat(outputs[1], &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
    if (linked || (strcmp(base0, base1) == 0 && path_in_dir(outputs[1], dir0))) {
        return llmc_error("VAL.bin %s and TRAIN.bin %s are the same file: the second would replace the first", outputs[0],
                          outputs[1]);
    }
    return 0;
}

// a vocabulary file's path: arg as given, else the default rel as found (vocab_path_find,
// into found); dies when missing
static const char* vocab_path(const char* arg, const char* rel, const char* flag, char* found, size_t cap) {
    if (arg != NULL) { return arg; }
    if (vocab_path_find(rel, flag, found, cap) != 0) { die(llmc_errmsg()); }
    return found;
}

// --shards: its own checks, then shards_run
static int shards_main(const char* prefix, const char* size_arg, int jsonl, const char* sections_arg, const char* val_tokens_arg,
                       const char* tokenizer_out, const char* encoder_arg, const char* vocab_arg, const char** ins, int n_in) {
    if (prefix == NULL) { die("--shard-size and --jsonl go with --shards PREFIX (see -h)"); }
    if (val_tokens_arg != NULL || tokenizer_out != NULL) { die("--shards takes no --val-tokens (its first shard is the validation one) or --tokenizer-file (see -h)"); }
    if (n_in == 0) { die("--shards PREFIX needs at least one input (a file, or - for standard input; see -h)"); }
    size_t shard_size = 100000000;
    if (size_arg != NULL) {
        char* end;
        errno = 0;
        double v = strtod(size_arg, &end);
        if (*end != '\0' || errno != 0 || !(v >= 1) || v > INT32_MAX || v != (double)(size_t)v) {
            char msg[256];
            snprintf(msg, sizeof(msg), "--shard-size '%s': expected a whole token count from 1 to %d (1e8 allowed)", size_arg, INT32_MAX);
            die(msg);
        }
        shard_size = (size_t)v;
    }
    char* sep = NULL;
    size_t sep_len = 0;
    if (sections_arg != NULL && sections_unescape(sections_arg, &sep, &sep_len) != 0) { die(llmc_errmsg()); }
    char encoder_found[PATH_MAX + 64], vocab_found[PATH_MAX + 64];
    const char* encoder = vocab_path(encoder_arg, DEFAULT_ENCODER, "--encoder", encoder_found, sizeof(encoder_found));
    const char* vocab = vocab_path(vocab_arg, DEFAULT_VOCAB, "--vocab", vocab_found, sizeof(vocab_found));
    // no shard replaces an input: each is checked as it is written (atomic_open's output_check)
    for (int i = 0; i < n_in; i++) {
        if (strcmp(ins[i], "-") != 0 && llmc_input_add(ins[i], "IN") != 0) { die(llmc_errmsg()); }
    }
    if (llmc_input_add(encoder, "--encoder") != 0 || llmc_input_add(vocab, "--vocab") != 0) { die(llmc_errmsg()); }
    int rc = shards_run(prefix, shard_size, jsonl, sep, sep_len, ins, n_in, encoder, vocab);
    free(sep);
    if (rc != 0) { die(llmc_errmsg()); }
    return 0;
}

// ----------------------------------------------------------------------------
// --hellaswag

// text encoded onto the end of s->tokens (cap: its room, grown); its length into *len
static int hellaswag_encode(Bpe* bpe, const char* text, EvalSet* s, size_t* ntok, size_t* cap, int* len) {
    uint16_t* t;
    size_t n;
    if (bpe_encode(bpe, text, strlen(text), &t, &n) != 0) { return -1; }
    if (*ntok + n > *cap) {
        size_t want = (*ntok + n) * 2;
        uint16_t* grown = (uint16_t*)realloc(s->tokens, want * sizeof(uint16_t));
        if (grown == NULL) { free(t); return llmc_error("out of memory"); }
        s->tokens = grown;
        *cap = want;
    }
    memcpy(s->tokens + *ntok, t, n * sizeof(uint16_t));
    *ntok += n;
    *len = (int)n;
    free(t);
    return n > 0 ? 0 : llmc_error("encodes to no tokens");
}

// one line's example (JSON j) as example i of s; the arrays have room for it
static int hellaswag_example(Bpe* bpe, const cJSON* j, EvalSet* s, int i, size_t* ntok, size_t* cap) {
    const cJSON* ctx = cJSON_GetObjectItemCaseSensitive(j, "ctx");
    const cJSON* endings = cJSON_GetObjectItemCaseSensitive(j, "endings");
    const cJSON* label = cJSON_GetObjectItemCaseSensitive(j, "label");
    if (!cJSON_IsString(ctx)) { return llmc_error("no \"ctx\" string"); }
    int k = cJSON_IsArray(endings) ? cJSON_GetArraySize(endings) : 0;
    if (k < 1 || k > HELLASWAG_MAX_ENDINGS) { return llmc_error("\"endings\" must be an array of 1 to %d strings", HELLASWAG_MAX_ENDINGS); }
    char* end = NULL;
    long lab = cJSON_IsNumber(label) ? (long)label->valuedouble
             : cJSON_IsString(label) && label->valuestring[0] != '\0' ? strtol(label->valuestring, &end, 10) : -1;
    if ((end != NULL && *end != '\0') || (cJSON_IsNumber(label) && label->valuedouble != (double)lab) || lab < 0 || lab >= k) {
        return llmc_error("\"label\" must be the index of one of its %d endings", k);
    }
    s->label[i] = (int)lab;
    s->ctx_at[i] = (int)*ntok;
    if (hellaswag_encode(bpe, ctx->valuestring, s, ntok, cap, &s->ctx_len[i]) != 0) { return llmc_error("\"ctx\": %s", llmc_errmsg()); }
    s->first[i] = s->completions;
    for (int e = 0; e < k; e++) {
        const cJSON* x = cJSON_GetArrayItem(endings, e);
        if (!cJSON_IsString(x)) { return llmc_error("ending %d is not a string", e); }
        size_t n = strlen(x->valuestring);
        char* spaced = (char*)mallocCheck(n + 2);
        spaced[0] = ' ';  // the ending follows the context after a space
        memcpy(spaced + 1, x->valuestring, n + 1);
        int c = s->completions++;
        s->comp_at[c] = (int)*ntok;
        int rc = hellaswag_encode(bpe, spaced, s, ntok, cap, &s->comp_len[c]);
        free(spaced);
        if (rc != 0) { return llmc_error("ending %d: %s", e, llmc_errmsg()); }
    }
    s->first[i + 1] = s->completions;
    return 0;
}

// the eval set being read (hellaswag_line)
typedef struct {
    Bpe* bpe;
    const char* path;
    EvalSet s;
    size_t ntok, cap, room;  // tokens in s.tokens, its room; examples s's arrays have room for
} HellaswagLines;

// one JSON line as the next example, the arrays grown first when full
static int hellaswag_line(void* ctx, const cJSON* j, long lineno) {
    HellaswagLines* c = (HellaswagLines*)ctx;
    EvalSet* s = &c->s;
    if ((size_t)s->n + 1 >= c->room) {  // room for one more example and its completions
        c->room = c->room == 0 ? 1024 : c->room * 2;
        s->label = (int*)realloc(s->label, c->room * sizeof(int)); s->first = (int*)realloc(s->first, (c->room + 1) * sizeof(int));
        s->ctx_at = (int*)realloc(s->ctx_at, c->room * sizeof(int)); s->ctx_len = (int*)realloc(s->ctx_len, c->room * sizeof(int));
        s->comp_at = (int*)realloc(s->comp_at, c->room * HELLASWAG_MAX_ENDINGS * sizeof(int));
        s->comp_len = (int*)realloc(s->comp_len, c->room * HELLASWAG_MAX_ENDINGS * sizeof(int));
        if (!s->label || !s->first || !s->ctx_at || !s->ctx_len || !s->comp_at || !s->comp_len) { return llmc_error("out of memory"); }
    }
    int rc = hellaswag_example(c->bpe, j, s, s->n, &c->ntok, &c->cap);
    s->n++;
    if (rc == 0) { return 0; }
    char msg[1100];
    snprintf(msg, sizeof(msg), "%s line %ld: %s", c->path, lineno, llmc_errmsg());
    return llmc_error("%s", msg);
}

// every line of in_path into out_path's eval file; 0, or -1 with llmc_errmsg() naming the line
static int hellaswag_run(Bpe* bpe, const char* in_path, const char* out_path) {
    FILE* in = fopen(in_path, "rb");
    if (in == NULL) { return llmc_error("%s: cannot open: %s", in_path, strerror(errno)); }
    HellaswagLines c;
    memset(&c, 0, sizeof(c));
    c.bpe = bpe;
    c.path = in_path;
    int rc = jsonl_each(in, in_path, hellaswag_line, &c);
    if (rc == 0 && c.s.n == 0) { rc = llmc_error("%s: no examples", in_path); }
    fclose(in);
    if (rc == 0) { rc = evalset_write(&c.s, out_path); }
    if (rc == 0) { printf("wrote %d examples (%d endings, %zu tokens) to %s\n", c.s.n, c.s.completions, c.ntok, out_path); }
    evalset_free(&c.s);
    return rc;
}

// ----------------------------------------------------------------------------

int main(int argc, char** argv) {
    const char* encoder_arg = NULL;   // NULL: the default, looked up by vocab_path_find
    const char* vocab_arg = NULL;
    const char* tokenizer_out = NULL;
    const char* sections_arg = NULL;
    const char* val_tokens_arg = NULL;
    const char* shards_arg = NULL;
    const char* shard_size_arg = NULL;
    int jsonl = 0, hellaswag = 0;
    const char* positional[argc];  // (argc >= 1: the program name)
    int n_positional = 0;
    char msg[1200];
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        }
        const char** value = strcmp(a, "--encoder") == 0 ? &encoder_arg
                           : strcmp(a, "--vocab") == 0 ? &vocab_arg
                           : strcmp(a, "--tokenizer-file") == 0 ? &tokenizer_out
                           : strcmp(a, "--sections") == 0 ? &sections_arg
                           : strcmp(a, "--val-tokens") == 0 ? &val_tokens_arg
                           : strcmp(a, "--shards") == 0 ? &shards_arg
                           : strcmp(a, "--shard-size") == 0 ? &shard_size_arg
                           : NULL;
        if (strcmp(a, "--jsonl") == 0) { jsonl = 1; continue; }
        if (strcmp(a, "--hellaswag") == 0) { hellaswag = 1; continue; }
        if (value != NULL) {
            if (i + 1 >= argc) {
                snprintf(msg, sizeof(msg), "option %s needs a value (see -h)", a);
                die(msg);
            }
            *value = argv[++i];
        } else if (a[0] == '-' && a[1] != '\0') {
            snprintf(msg, sizeof(msg), "unknown option %s (see -h)", a);
            die(msg);
        } else {
            if (n_positional == 3 && shards_arg == NULL) {
                snprintf(msg, sizeof(msg), "too many arguments: unexpected %s (see -h)", a);
                die(msg);
            }
            positional[n_positional++] = a;
        }
    }
    if (shards_arg != NULL || shard_size_arg != NULL || jsonl) { return shards_main(shards_arg, shard_size_arg, jsonl, sections_arg,
                                                                                  val_tokens_arg, tokenizer_out, encoder_arg,
                                                                                  vocab_arg, positional, n_positional); }
    if (hellaswag && (tokenizer_out != NULL || sections_arg != NULL || val_tokens_arg != NULL || n_positional != 2)) {
        die("--hellaswag expects IN.jsonl OUT.bin and no --tokenizer-file, --sections or --val-tokens (see -h)");
    }
    if (tokenizer_out != NULL && (n_positional != 0 || sections_arg != NULL || val_tokens_arg != NULL)) {
        die("--tokenizer-file takes no IN.txt OUT.bin arguments, --sections or --val-tokens (see -h)");
    }
    if (tokenizer_out == NULL && val_tokens_arg == NULL && n_positional != 2) {
        die("expected IN.txt OUT.bin (see -h)");
    }
    if (val_tokens_arg != NULL && n_positional != 3) {
        die("--val-tokens N expects IN.txt VAL.bin TRAIN.bin (see -h)");
    }
    size_t val_tokens = 0;
    if (val_tokens_arg != NULL) {
        char* end;
        errno = 0;
        unsigned long long v = strtoull(val_tokens_arg, &end, 10);
        if (val_tokens_arg[0] < '0' || val_tokens_arg[0] > '9' || *end != '\0' || errno != 0 || v == 0 || v > INT32_MAX) {
            snprintf(msg, sizeof(msg), "--val-tokens '%s': expected a token count from 1 to %d", val_tokens_arg, INT32_MAX);
            die(msg);
        }
        val_tokens = (size_t)v;
    }
    char* sep = NULL;
    size_t sep_len = 0;
    if (sections_arg != NULL && sections_unescape(sections_arg, &sep, &sep_len) != 0) { die(llmc_errmsg()); }

    char encoder_found[PATH_MAX + 64], vocab_found[PATH_MAX + 64];
    const char* encoder_path = vocab_path(encoder_arg, DEFAULT_ENCODER, "--encoder", encoder_found, sizeof(encoder_found));
    const char* vocab_file = vocab_path(vocab_arg, DEFAULT_VOCAB, "--vocab", vocab_found, sizeof(vocab_found));
    const char* outputs[2] = {tokenizer_out != NULL ? tokenizer_out : positional[1], val_tokens_arg != NULL ? positional[2] : NULL};
    if (outputs_check(tokenizer_out == NULL ? positional[0] : NULL, encoder_path, vocab_file, outputs) != 0) { die(llmc_errmsg()); }
    Bpe bpe;
    if (bpe_init(&bpe, encoder_path, vocab_file) != 0) { die(llmc_errmsg()); }

    if (hellaswag) {
        int rc = hellaswag_run(&bpe, positional[0], positional[1]);
        bpe_free(&bpe);
        if (rc != 0) { die(llmc_errmsg()); }
        return 0;
    }
    if (tokenizer_out != NULL) {
        if (bpe_write_tokenizer_file(&bpe, tokenizer_out) != 0) { bpe_free(&bpe); die(llmc_errmsg()); }
        printf("wrote tokenizer file %s: %u tokens, eot %u\n", tokenizer_out, bpe.vocab_size, bpe.eot_token);
        bpe_free(&bpe);
        return 0;
    }

    const char* in_path = positional[0];
    char* text;
    size_t size;
    // plain fopen: the text may come through a pipe (./tokenize <(zcat a.txt.gz) a.bin)
    FILE* in = fopen(in_path, "rb");
    if (in == NULL) {
        snprintf(msg, sizeof(msg), "%s: cannot open: %s", in_path, strerror(errno));
        bpe_free(&bpe);
        die(msg);
    }
    if (tokenizer_slurp_stream(in, in_path, &text, &size) != 0) { bpe_free(&bpe); die(llmc_errmsg()); }
    uint16_t* tokens;
    size_t n;
    int rc = sep != NULL ? sections_encode(&bpe, text, size, sep, sep_len, &tokens, &n)
                         : bpe_encode(&bpe, text, size, &tokens, &n);
    free(text);
    free(sep);
    bpe_free(&bpe);
    if (rc != 0) {
        snprintf(msg, sizeof(msg), "%s: %s", in_path, llmc_errmsg());
        die(msg);
    }
    if (val_tokens_arg != NULL && n <= val_tokens) {
        snprintf(msg, sizeof(msg), "%s: %zu tokens, so --val-tokens %zu leaves none for %s",
                 in_path, n, val_tokens, positional[2]);
        free(tokens);
        die(msg);
    }
    // one shard, or the first val_tokens to VAL.bin and the rest to TRAIN.bin
    int n_shards = val_tokens_arg != NULL ? 2 : 1;
    const char* out_paths[2] = {positional[1], positional[2]};
    size_t first[2] = {0, val_tokens};
    size_t count[2] = {n_shards == 2 ? val_tokens : n, n - val_tokens};
    for (int s = 0; s < n_shards; s++) {
        if (shard_write(out_paths[s], tokens + first[s], count[s]) != 0) { free(tokens); die(llmc_errmsg()); }
        printf("wrote %zu tokens to %s (from %zu bytes of %s%s)\n", count[s], out_paths[s], size, in_path,
               sections_arg != NULL ? ", in sections" : "");
    }
    free(tokens);
    return 0;
}
