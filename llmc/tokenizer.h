/*
 GPT-2 tokenizer: a decoder over llm.c's tokenizer file, and an exact GPT-2
 byte-level BPE encoder built from encoder.json + vocab.bpe.

 Decoder (Tokenizer): reads the binary tokenizer file
   header: 256 x uint32 little-endian: [0]=20240328 magic, [1]=2 version,
           [2]=vocab_size, [3]=eot token id, rest 0
   body:   for each token id in order: uint8 length L (> 0), then L raw bytes
 and hands back each token's bytes, NUL-terminated (tokenizer_decode).

 Encoder (Bpe): the GPT-2 algorithm, step by step:
   1. pre-tokenize the UTF-8 text with GPT-2's regex (PCRE2, UTF + UCP),
   2. map every byte of a pre-token to its single-byte token,
   3. repeatedly merge all occurrences of the adjacent pair with the lowest merge
      rank (vocab.bpe line order), until no adjacent pair is a known merge.
 The symbols are token ids instead of GPT-2's byte-to-unicode strings: each
 symbol is always a vocabulary token and tokens are unique strings, so comparing
 ids is the same as comparing strings, and a merge (a, b) maps directly to the id
 of the string a+b.

 Decisions worth knowing:
 - Input must be valid UTF-8 (GPT-2's encoder works on Python str, so it never
   sees invalid UTF-8); bpe_encode rejects anything else and names the byte offset.
 - "<|endoftext|>" inside the text is plain text (7 tokens), as in GPT-2's
   encoder; callers insert eot_token themselves between documents.
 - The regex classes are spelled out (see BPE_PATTERN) so PCRE2 agrees with
   Python's `regex` module, the engine of GPT-2's reference encoder: PCRE2's \s
   also matches U+180E, and PCRE2 10.42 knows Unicode 14 while `regex` knows 15.0.
 - Merging is quadratic in the length of one pre-token (as in the reference); only
   pathological inputs (megabytes of letters without a space) feel it.
 - A Bpe keeps a cache and scratch buffers: one Bpe per thread.
*/
#ifndef LLMC_TOKENIZER_H
#define LLMC_TOKENIZER_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>        // pcre2_compile, pcre2_match: GPT-2's pre-tokenizer regex
#include <stdint.h>       // uint8_t, uint16_t, uint32_t, uint64_t
#include <stddef.h>       // size_t
#include <stdio.h>        // FILE, fread, fwrite

#ifdef __cplusplus
extern "C" {
#endif

#define TOKENIZER_MAGIC 20240328
#define TOKENIZER_VERSION 2
#define TOKENIZER_HEADER_INTS 256

// ----------------------------------------------------------------------------
// little-endian helpers: the files are little-endian whatever the host is

// v into p[0..4), little-endian
void tokenizer_write_u32le(unsigned char* p, uint32_t v);

// p[0..4) as a little-endian uint32
uint32_t tokenizer_read_u32le(const unsigned char* p);

// n uint16s to fp, little-endian, in chunks; 0, or -1 (errno) when a write fails
int tokenizer_fwrite_u16le(FILE* fp, const uint16_t* v, size_t n);

// reads all of the stream fp (closed here) into a malloc'd buffer (plus one NUL so text
// can be used as a C string); 0 or -1 with a message naming `path`, where it came from
int tokenizer_slurp_stream(FILE* fp, const char* path, char** data, size_t* size);

// the same for the regular file at path (file_fopen: a FIFO or a device is refused, never
// waited on; the text ./tokenize reads may be a pipe, through tokenizer_slurp_stream)
int tokenizer_slurp(const char* path, char** data, size_t* size);

// ----------------------------------------------------------------------------
// Decoder over the tokenizer file

typedef struct Tokenizer {
    uint32_t vocab_size;
    uint32_t eot_token;
    char* storage;        // every token's bytes, each followed by a NUL
    uint32_t* offsets;    // token id -> start in storage
    uint8_t* lengths;     // token id -> number of bytes (a token may contain a 0 byte)
    int init_ok;
} Tokenizer;

// reads an llm.c tokenizer file; 0, or -1 with llmc_errmsg() naming the file and what is wrong
int tokenizer_init(Tokenizer* t, const char* path);

// NUL-terminated bytes of the token, or NULL if out of range (or not initialized)
static inline const char* tokenizer_decode(const Tokenizer* t, uint32_t token) {
    if (!t->init_ok || token >= t->vocab_size) { return NULL; }
    return t->storage + t->offsets[token];
}

// like tokenizer_decode, and the byte count: needed for the token of the byte 0x00
static inline const char* tokenizer_decode_len(const Tokenizer* t, uint32_t token, size_t* len) {
    const char* s = tokenizer_decode(t, token);
    *len = s != NULL ? t->lengths[token] : 0;
    return s;
}

// frees the tokenizer's tables (safe on a zeroed one)
void tokenizer_free(Tokenizer* t);

// ----------------------------------------------------------------------------
// BPE encoder: hash maps

// byte string -> uint64 value; open addressing with linear probing. The keys live in
// one growing arena; slots refer to them by offset so the arena may move.
typedef struct BpeMapSlot {
    uint64_t hash;
    uint64_t value;
    size_t key_off;
    uint32_t key_len;
    uint32_t used;
} BpeMapSlot;

typedef struct BpeMap {
    BpeMapSlot* slots;
    size_t cap;        // power of two
    size_t count;
    char* keys;
    size_t keys_len, keys_cap;
} BpeMap;

// ----------------------------------------------------------------------------
// BPE encoder

// GPT-2's pattern  's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// with its classes written out so PCRE2 10.42 matches Python's `regex` module:
// - \s of `regex` is Unicode White_Space; PCRE2's \s adds U+180E, so list them;
// - \p{L} / \p{N} get the letters and digits that Unicode 15.0 added over PCRE2's
//   Unicode 14 (redundant, and harmless, with a newer PCRE2).
#define BPE_WS "\\t-\\r\\x20\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
#define BPE_L "\\p{L}\\x{1123F}-\\x{11240}\\x{11F02}\\x{11F04}-\\x{11F10}\\x{11F12}-\\x{11F33}\\x{1342F}" \
              "\\x{13441}-\\x{13446}\\x{1B132}\\x{1B155}\\x{1DF25}-\\x{1DF2A}\\x{1E030}-\\x{1E06D}" \
              "\\x{1E4D0}-\\x{1E4EB}\\x{2B739}\\x{31350}-\\x{323AF}"
#define BPE_N "\\p{N}\\x{11F50}-\\x{11F59}\\x{1D2C0}-\\x{1D2D3}\\x{1E4F0}-\\x{1E4F9}"
#define BPE_PATTERN "'s|'t|'re|'ve|'m|'ll|'d| ?[" BPE_L "]+| ?[" BPE_N "]+| ?[^" BPE_WS BPE_L BPE_N "]+" \
                    "|[" BPE_WS "]+(?![^" BPE_WS "])|[" BPE_WS "]+"

#define BPE_EOT_STRING "<|endoftext|>"
// pre-tokens up to this many bytes are cached; longer ones are rare and would bloat it
#define BPE_CACHE_MAX_KEY 64
// the cache is emptied when it holds this many pre-tokens, to bound its memory
#define BPE_CACHE_MAX_ENTRIES (1u << 20)
#define BPE_NO_PAIR UINT64_MAX

typedef struct Bpe {
    uint32_t vocab_size;
    uint32_t eot_token;
    // vocabulary: token id -> raw bytes
    char* tok_bytes;
    uint32_t* tok_off;
    uint32_t* tok_len;
    uint32_t byte_token[256];   // byte value -> id of its single-byte token
    // merges: packed pair (left id << 32 | right id) -> packed (rank << 32 | merged id)
    uint64_t* merge_keys;       // BPE_NO_PAIR marks an empty slot
    uint64_t* merge_vals;
    size_t merge_cap;
    size_t n_merges;
    // pre-token bytes -> (offset in cache_toks << 16 | token count)
    BpeMap cache;
    uint16_t* cache_toks;
    size_t cache_toks_len, cache_toks_cap;
    // the regex
    pcre2_code* re;
    pcre2_match_data* md;
    // scratch for merging one pre-token
    uint32_t* work;
    size_t work_cap;
    int init_ok;
} Bpe;

// frees the encoder's tables
void bpe_free(Bpe* b);

// loads GPT-2's encoder.json and vocab.bpe; 0, or -1 with llmc_errmsg()
int bpe_init(Bpe* b, const char* encoder_json, const char* vocab_bpe);

// the raw bytes of a vocabulary token (not NUL-terminated), or NULL if out of range
static inline const char* bpe_token_bytes(const Bpe* b, uint32_t id, size_t* len) {
    if (!b->init_ok || id >= b->vocab_size) { *len = 0; return NULL; }
    *len = b->tok_len[id];
    return b->tok_bytes + b->tok_off[id];
}

// byte offset of the first invalid UTF-8 sequence, or len if the text is valid
size_t bpe_utf8_invalid_at(const char* text, size_t len);

// encodes len bytes of UTF-8 text; *out is malloc'd (caller frees), *n_out tokens.
// Returns -1 with a message for invalid UTF-8 (naming the byte offset) or no memory.
int bpe_encode(Bpe* b, const char* text, size_t len, uint16_t** out, size_t* n_out);

// writes the decoder file (format at the top) for this vocabulary, whole or not at all
// (AtomicFile: a reader never sees a partial file)
int bpe_write_tokenizer_file(const Bpe* b, const char* path);

#ifdef __cplusplus
}
#endif

#endif // LLMC_TOKENIZER_H
