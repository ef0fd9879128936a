/*
 Encodes a UTF-8 text file with GPT-2's BPE into one llm.c data shard, or writes
 the tokenizer (decoder) file of the vocabulary.

   ./tokenize [--encoder PATH] [--vocab PATH] IN.txt OUT.bin
   ./tokenize [--encoder PATH] [--vocab PATH] --tokenizer-file OUT.bin

 Shard format: 256 x int32 little-endian header ([0]=20240520 magic, [1]=1 version,
 [2]=number of tokens), then the tokens as uint16 little-endian. The whole file is
 encoded as one document: no <|endoftext|> is added.

 Outputs are written to OUT.tmp and renamed, and the tmp file is removed on any
 error, so OUT is either complete or absent.

 build (from the repo root):
   gcc -O2 -Wall -Wextra -I. dev/tokenize.c -o tokenize $(pkg-config --cflags --libs libpcre2-8 libcjson)
*/
#include <stdio.h>           // printf, fprintf, fopen, fwrite, rename, remove
#include <stdlib.h>          // free, exit
#include <string.h>          // strcmp, strlen, strerror
#include <stdint.h>          // uint16_t, int32_t
#include <errno.h>           // errno for the messages
#include "llmc/utils.h"      // llmc_error, llmcCheck, mallocCheck
#include "llmc/tokenizer.h"  // Bpe: bpe_init, bpe_encode, bpe_write_tokenizer_file

#define SHARD_MAGIC 20240520
#define SHARD_VERSION 1
#define SHARD_HEADER_INTS 256

static void usage(FILE* fp) {
    fprintf(fp,
        "usage: ./tokenize [--encoder PATH] [--vocab PATH] IN.txt OUT.bin\n"
        "       ./tokenize [--encoder PATH] [--vocab PATH] --tokenizer-file OUT.bin\n"
        "  IN.txt OUT.bin          encode IN.txt (UTF-8) with GPT-2 BPE into one data shard\n"
        "  --tokenizer-file OUT    write the tokenizer (decoder) file of the vocabulary\n"
        "  --encoder PATH          encoder.json (default dev/data/gpt2/encoder.json)\n"
        "  --vocab PATH            vocab.bpe (default dev/data/gpt2/vocab.bpe)\n"
        "  -h, --help              this help\n");
}

// writes the shard to path.tmp and renames it; removes the tmp file on failure
static int shard_write(const char* path, const uint16_t* tokens, size_t n) {
    if (n > INT32_MAX) { return llmc_error("%s: %zu tokens do not fit the int32 header", path, n); }
    size_t plen = strlen(path);
    char* tmp = mallocCheck(plen + 5);
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    FILE* fp = fopen(tmp, "wb");
    if (fp == NULL) {
        int e = errno;
        free(tmp);
        return llmc_error("%s: cannot create %s.tmp: %s", path, path, strerror(e));
    }
    unsigned char header[SHARD_HEADER_INTS * 4];
    memset(header, 0, sizeof(header));
    tokenizer_write_u32le(header, SHARD_MAGIC);
    tokenizer_write_u32le(header + 4, SHARD_VERSION);
    tokenizer_write_u32le(header + 8, (uint32_t)n);
    int ok = fwrite(header, 1, sizeof(header), fp) == sizeof(header);
    // tokens go out in chunks, byte by byte little-endian, whatever the host order
    unsigned char buf[8192];
    for (size_t i = 0; ok && i < n;) {
        size_t k = 0;
        for (; i < n && k + 2 <= sizeof(buf); i++) {
            buf[k++] = (unsigned char)tokens[i];
            buf[k++] = (unsigned char)(tokens[i] >> 8);
        }
        ok = fwrite(buf, 1, k, fp) == k;
    }
    int e = errno;
    if (fclose(fp) != 0 && ok) { ok = 0; e = errno; }
    if (!ok) {
        remove(tmp);
        free(tmp);
        return llmc_error("%s: write failed: %s", path, strerror(e));
    }
    if (rename(tmp, path) != 0) {
        e = errno;
        remove(tmp);
        free(tmp);
        return llmc_error("%s: cannot rename %s.tmp into place: %s", path, path, strerror(e));
    }
    free(tmp);
    return 0;
}

// one line on stderr and exit 1: the way every error of this tool ends
static void die(const char* msg) {
    fprintf(stderr, "tokenize: %s\n", msg);
    exit(EXIT_FAILURE);
}

int main(int argc, char** argv) {
    const char* encoder_path = "dev/data/gpt2/encoder.json";
    const char* vocab_path = "dev/data/gpt2/vocab.bpe";
    const char* tokenizer_out = NULL;
    const char* positional[2];
    int n_positional = 0;
    char msg[1200];
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        }
        int takes_value = strcmp(a, "--encoder") == 0 || strcmp(a, "--vocab") == 0 ||
                          strcmp(a, "--tokenizer-file") == 0;
        if (takes_value) {
            if (i + 1 >= argc) {
                snprintf(msg, sizeof(msg), "option %s needs a PATH (see -h)", a);
                die(msg);
            }
            const char* v = argv[++i];
            if (strcmp(a, "--encoder") == 0) { encoder_path = v; }
            else if (strcmp(a, "--vocab") == 0) { vocab_path = v; }
            else { tokenizer_out = v; }
        } else if (a[0] == '-' && a[1] != '\0') {
            snprintf(msg, sizeof(msg), "unknown option %s (see -h)", a);
            die(msg);
        } else {
            if (n_positional == 2) {
                snprintf(msg, sizeof(msg), "too many arguments: unexpected %s (see -h)", a);
                die(msg);
            }
            positional[n_positional++] = a;
        }
    }
    if (tokenizer_out != NULL && n_positional != 0) {
        die("--tokenizer-file takes no IN.txt OUT.bin arguments (see -h)");
    }
    if (tokenizer_out == NULL && n_positional != 2) {
        die("expected IN.txt OUT.bin (see -h)");
    }

    Bpe bpe;
    if (bpe_init(&bpe, encoder_path, vocab_path) != 0) { die(llmc_errmsg()); }

    if (tokenizer_out != NULL) {
        if (bpe_write_tokenizer_file(&bpe, tokenizer_out) != 0) { bpe_free(&bpe); die(llmc_errmsg()); }
        printf("wrote tokenizer file %s: %u tokens, eot %u\n", tokenizer_out, bpe.vocab_size, bpe.eot_token);
        bpe_free(&bpe);
        return 0;
    }

    const char* in_path = positional[0];
    const char* out_path = positional[1];
    char* text;
    size_t size;
    if (tokenizer_slurp(in_path, &text, &size) != 0) { bpe_free(&bpe); die(llmc_errmsg()); }
    uint16_t* tokens;
    size_t n;
    if (bpe_encode(&bpe, text, size, &tokens, &n) != 0) {
        snprintf(msg, sizeof(msg), "%s: %s", in_path, llmc_errmsg());
        free(text);
        bpe_free(&bpe);
        die(msg);
    }
    free(text);
    if (shard_write(out_path, tokens, n) != 0) { free(tokens); bpe_free(&bpe); die(llmc_errmsg()); }
    printf("wrote %zu tokens to %s (from %zu bytes of %s)\n", n, out_path, size, in_path);
    free(tokens);
    bpe_free(&bpe);
    return 0;
}
