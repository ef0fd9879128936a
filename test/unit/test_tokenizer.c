/*
 Unit tests of llmc/tokenizer.h: known GPT-2 encodings, decode(encode(x)) == x,
 the tokenizer file round trip, and the failure paths.

 build and run (from the repo root, so the vocabulary paths resolve):
   make build/test_tokenizer   (links the library, build/lib/opt/lib.a)
   ./build/test_tokenizer
*/
#define _DEFAULT_SOURCE           // mkdtemp and access under -std=c11
#include <criterion/criterion.h>  // Test, cr_assert*, suite fixtures
#include <stdio.h>                // FILE, fopen, fwrite, snprintf
#include <stdlib.h>               // mkdtemp, free, malloc
#include <string.h>               // strlen, strstr, memcmp
#include <unistd.h>               // access: checking no .tmp file is left
#include "llmc/tokenizer.h"       // Bpe, Tokenizer: the code under test
#include "llmc/utils.h"     // llmc_error, llmc_errmsg, the checked wrappers

#define ENCODER_JSON "dev/data/gpt2/encoder.json"
#define VOCAB_BPE "dev/data/gpt2/vocab.bpe"

static Bpe bpe;

static void load_bpe(void) {
    cr_assert_eq(bpe_init(&bpe, ENCODER_JSON, VOCAB_BPE), 0, "bpe_init: %s", llmc_errmsg());
}

static void free_bpe(void) { bpe_free(&bpe); }

// a fresh temp directory per test; Criterion runs each test in its own process
static char tmpdir[64];
static void make_tmpdir(void) {
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/test_tokenizer.XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
}

static void remove_tmpdir(void) {
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    cr_assert_eq(system(cmd), 0);
}

static void setup(void) { load_bpe(); make_tmpdir(); }
static void teardown(void) { free_bpe(); remove_tmpdir(); }

// encodes s and checks the ids
static void expect_tokens(const char* s, const uint16_t* want, size_t n_want) {
    uint16_t* got;
    size_t n;
    cr_assert_eq(bpe_encode(&bpe, s, strlen(s), &got, &n), 0, "encode \"%s\": %s", s, llmc_errmsg());
    cr_assert_eq(n, n_want, "\"%s\": %zu tokens, want %zu", s, n, n_want);
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(got[i], want[i], "\"%s\": token %zu is %u, want %u", s, i, got[i], want[i]);
    }
    free(got);
}

// decode(encode(s)) == s, byte for byte, through the encoder's vocabulary
static void expect_round_trip(const char* s, size_t len) {
    uint16_t* toks;
    size_t n;
    cr_assert_eq(bpe_encode(&bpe, s, len, &toks, &n), 0, "encode: %s", llmc_errmsg());
    char* back = malloc(len + 1);
    size_t pos = 0;
    for (size_t i = 0; i < n; i++) {
        size_t tl;
        const char* tb = bpe_token_bytes(&bpe, toks[i], &tl);
        cr_assert_not_null(tb);
        cr_assert_leq(pos + tl, len, "decoded text is longer than the input");
        memcpy(back + pos, tb, tl);
        pos += tl;
    }
    cr_assert_eq(pos, len, "decoded %zu bytes, want %zu", pos, len);
    cr_assert_eq(memcmp(back, s, len), 0, "decoded bytes differ from the input");
    free(back);
    free(toks);
}

static void write_file(const char* path, const void* data, size_t n) {
    FILE* fp = fopen(path, "wb");
    cr_assert_not_null(fp, "cannot create %s", path);
    cr_assert_eq(fwrite(data, 1, n, fp), n);
    fclose(fp);
}

static char* read_file(const char* path, size_t* n) {
    char* data;
    cr_assert_eq(tokenizer_slurp(path, &data, n), 0, "%s", llmc_errmsg());
    return data;
}

// ----------------------------------------------------------------------------
// known encodings

TestSuite(bpe, .init = setup, .fini = teardown);

Test(bpe, vocabulary_shape) {
    cr_assert_eq(bpe.vocab_size, 50257);
    cr_assert_eq(bpe.eot_token, 50256);
}

Test(bpe, known_encodings) {
    expect_tokens("Hello world", (uint16_t[]){15496, 995}, 2);
    expect_tokens("hello world", (uint16_t[]){31373, 995}, 2);
    expect_tokens(" Hello", (uint16_t[]){18435}, 1);
    expect_tokens(" the", (uint16_t[]){262}, 1);
    expect_tokens("\n", (uint16_t[]){198}, 1);
    expect_tokens("\n\n", (uint16_t[]){628}, 1);
    expect_tokens("!", (uint16_t[]){0}, 1);
    // the special token's text is plain text to GPT-2's encoder: < | end of text | >
    expect_tokens("<|endoftext|>", (uint16_t[]){27, 91, 437, 1659, 5239, 91, 29}, 7);
}

Test(bpe, empty_text) {
    uint16_t* toks;
    size_t n = 99;
    cr_assert_eq(bpe_encode(&bpe, "", 0, &toks, &n), 0);
    cr_assert_eq(n, 0);
    free(toks);
}

Test(bpe, round_trip_tricky_strings) {
    const char* cases[] = {
        "Hello world", "   leading spaces", "trailing spaces   ", "trailing newline\n",
        "a\r\nb\r\n\r\n", "tabs\t\tand\tmore\t", "\n\n\n\n", "   \n  \n ", " ",
        "it's IT'S y'all'd don't 'S '''re", "1234567 3.14 1,000 -42", "<|endoftext|>",
        "\xe6\x88\x91\xe8\x83\xbd\xe5\x90\x9e", "\xd9\x85\xd8\xb1\xd8\xad\xd8\xa8\xd8\xa7",
        "\xe0\xa4\xa8\xe0\xa4\xae\xe0\xa4\xb8\xe0\xa5\x8d\xe0\xa4\xa4\xe0\xa5\x87",
        "\xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82", "\xce\x9a\xce\xb1\xce\xbb\xce\xb7",
        "e\xcc\x81 a\xcc\x88\xcc\x84", "\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7",
        "\xf0\x9f\x87\xba\xf0\x9f\x87\xb8 \xf0\x9d\x84\x9e", "\xe2\x88\x80x\xe2\x88\x88\xe2\x84\x9d",
        "!!! ??? ... --- ***", "x \xe1\xa0\x8ey", "\xc2\x85\xc2\xa0\xe3\x80\x80",
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        expect_round_trip(cases[i], strlen(cases[i]));
    }
    // a 0 byte is an ordinary character
    expect_round_trip("a\0b\0\0 c", 7);
}

Test(bpe, round_trip_files) {
    const char* files[] = {"test/e2e/data/tricky.txt", "dev/data/tinyshakespeare/input.txt"};
    for (int i = 0; i < 2; i++) {
        size_t n;
        char* text = read_file(files[i], &n);
        expect_round_trip(text, n);
        free(text);
    }
}

Test(bpe, invalid_utf8_names_offset) {
    struct { const char* s; size_t offset; } cases[] = {
        {"ok \xff bad", 3},           // never valid in UTF-8
        {"ab\xc0\xaf", 2},            // overlong "/"
        {"\xed\xa0\x80", 0},          // UTF-16 surrogate
        {"x\xe2\x82", 1},             // truncated at the end
        {"\xf4\x90\x80\x80", 0},      // past U+10FFFF
        {"\xe2\x82\xac\x80", 3},      // stray continuation byte after a valid euro sign
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint16_t* toks = (uint16_t*)1;
        size_t n;
        cr_assert_eq(bpe_encode(&bpe, cases[i].s, strlen(cases[i].s), &toks, &n), -1, "case %zu", i);
        cr_assert_null(toks);
        char want[64];
        snprintf(want, sizeof(want), "offset %zu", cases[i].offset);
        cr_assert_not_null(strstr(llmc_errmsg(), want), "case %zu: \"%s\" lacks \"%s\"", i, llmc_errmsg(), want);
    }
}

// ----------------------------------------------------------------------------
// tokenizer file

Test(bpe, tokenizer_file_round_trip) {
    char path[128], tmp[140];
    snprintf(path, sizeof(path), "%s/gpt2_tokenizer.bin", tmpdir);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    cr_assert_eq(bpe_write_tokenizer_file(&bpe, path), 0, "%s", llmc_errmsg());
    cr_assert_neq(access(tmp, F_OK), 0, "the .tmp file was left behind");
    Tokenizer t;
    cr_assert_eq(tokenizer_init(&t, path), 0, "%s", llmc_errmsg());
    cr_assert_eq(t.vocab_size, 50257);
    cr_assert_eq(t.eot_token, 50256);
    cr_assert_str_eq(tokenizer_decode(&t, t.eot_token), "<|endoftext|>");
    cr_assert_str_eq(tokenizer_decode(&t, 15496), "Hello");
    cr_assert_str_eq(tokenizer_decode(&t, 995), " world");
    for (uint32_t id = 0; id < t.vocab_size; id++) {
        size_t want_len, got_len;
        const char* want = bpe_token_bytes(&bpe, id, &want_len);
        const char* got = tokenizer_decode_len(&t, id, &got_len);
        cr_assert_not_null(got);
        cr_assert_eq(got_len, want_len, "token %u: %zu bytes, want %zu", id, got_len, want_len);
        cr_assert_eq(memcmp(got, want, want_len), 0, "token %u differs", id);
        cr_assert_eq(got[got_len], '\0', "token %u is not NUL-terminated", id);
    }
    cr_assert_null(tokenizer_decode(&t, t.vocab_size));
    cr_assert_null(tokenizer_decode(&t, UINT32_MAX));
    tokenizer_free(&t);
}

// writes a good tokenizer file and returns its bytes, for the corruption tests
static char* good_tokenizer_file(const char* path, size_t* n) {
    cr_assert_eq(bpe_write_tokenizer_file(&bpe, path), 0, "%s", llmc_errmsg());
    return read_file(path, n);
}

// tokenizer_init must fail, leave the struct empty and name the path and `what`
static void expect_init_fails(const char* path, const char* what) {
    Tokenizer t;
    cr_assert_eq(tokenizer_init(&t, path), -1, "tokenizer_init accepted %s", path);
    cr_assert_not_null(strstr(llmc_errmsg(), path), "message \"%s\" does not name %s", llmc_errmsg(), path);
    cr_assert_not_null(strstr(llmc_errmsg(), what), "message \"%s\" lacks \"%s\"", llmc_errmsg(), what);
    cr_assert_null(tokenizer_decode(&t, 0));
    tokenizer_free(&t);  // safe on a failed init
}

Test(bpe, tokenizer_missing_file) {
    char path[128];
    snprintf(path, sizeof(path), "%s/does_not_exist.bin", tmpdir);
    expect_init_fails(path, "cannot open");
}

Test(bpe, tokenizer_bad_magic) {
    char path[128];
    snprintf(path, sizeof(path), "%s/bad_magic.bin", tmpdir);
    size_t n;
    char* data = good_tokenizer_file(path, &n);
    data[0] ^= 0x01;
    write_file(path, data, n);
    expect_init_fails(path, "bad magic");
    free(data);
}

Test(bpe, tokenizer_bad_version) {
    char path[128];
    snprintf(path, sizeof(path), "%s/bad_version.bin", tmpdir);
    size_t n;
    char* data = good_tokenizer_file(path, &n);
    data[4] = 7;
    write_file(path, data, n);
    expect_init_fails(path, "unsupported version");
    free(data);
}

Test(bpe, tokenizer_truncated) {
    char path[128];
    snprintf(path, sizeof(path), "%s/truncated.bin", tmpdir);
    size_t n;
    char* data = good_tokenizer_file(path, &n);
    write_file(path, data, n - 3);             // inside the last token
    expect_init_fails(path, "truncated");
    write_file(path, data, n / 2);             // half way
    expect_init_fails(path, "truncated");
    write_file(path, data, 1024);              // header only
    expect_init_fails(path, "truncated");
    write_file(path, data, 100);               // not even a header
    expect_init_fails(path, "truncated");
    free(data);
}

Test(bpe, tokenizer_trailing_garbage) {
    char path[128];
    snprintf(path, sizeof(path), "%s/trailing.bin", tmpdir);
    size_t n;
    char* data = good_tokenizer_file(path, &n);
    char* more = malloc(n + 2);
    memcpy(more, data, n);
    more[n] = 1;
    more[n + 1] = 'x';
    write_file(path, more, n + 2);
    expect_init_fails(path, "unexpected bytes");
    free(more);
    free(data);
}

Test(bpe, tokenizer_file_unwritable) {
    char path[128];
    snprintf(path, sizeof(path), "%s/no_such_dir/tok.bin", tmpdir);
    cr_assert_eq(bpe_write_tokenizer_file(&bpe, path), -1);
    cr_assert_not_null(strstr(llmc_errmsg(), path), "message \"%s\" does not name %s", llmc_errmsg(), path);
}

// ----------------------------------------------------------------------------
// bpe_init failures (no fixture: these build their own Bpe)

Test(bpe_init, missing_encoder) {
    Bpe b;
    cr_assert_eq(bpe_init(&b, "no/such/encoder.json", VOCAB_BPE), -1);
    cr_assert_not_null(strstr(llmc_errmsg(), "no/such/encoder.json"), "%s", llmc_errmsg());
    bpe_free(&b);
}

Test(bpe_init, missing_vocab) {
    Bpe b;
    cr_assert_eq(bpe_init(&b, ENCODER_JSON, "no/such/vocab.bpe"), -1);
    cr_assert_not_null(strstr(llmc_errmsg(), "no/such/vocab.bpe"), "%s", llmc_errmsg());
    bpe_free(&b);
}

Test(bpe_init, swapped_files) {
    // vocab.bpe is not JSON, and encoder.json has no "#version" line
    Bpe b;
    cr_assert_eq(bpe_init(&b, VOCAB_BPE, ENCODER_JSON), -1);
    cr_assert_not_null(strstr(llmc_errmsg(), VOCAB_BPE), "%s", llmc_errmsg());
    bpe_free(&b);
}
