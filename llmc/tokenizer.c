// The GPT-2 tokenizer (llmc/tokenizer.h): its file, decoding, and the encoder tokenize uses.
#include "llmc/tokenizer.h" // the interface, its types and the headers its bodies use
#include <cjson/cJSON.h>  // cJSON_Parse: reading encoder.json
#include <stdlib.h>       // malloc, realloc, calloc, free
#include <string.h>       // memcpy, memcmp, strlen, strerror
#include <errno.h>        // errno for the messages
#include "llmc/utils.h"   // llmc_error: the 0 / -1 error convention; AtomicFile
#include "common/file.h"  // file_fopen: the tokenizer, encoder.json and vocab.bpe opened without waiting on a FIFO

uint32_t tokenizer_read_u32le(const unsigned char* p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

void tokenizer_write_u32le(unsigned char* p, uint32_t v) {
    p[0] = (unsigned char)v; p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16); p[3] = (unsigned char)(v >> 24);
}

int tokenizer_fwrite_u16le(FILE* fp, const uint16_t* v, size_t n) {
    unsigned char buf[8192];
    for (size_t i = 0; i < n;) {
        size_t k = 0;
        for (; i < n && k + 2 <= sizeof(buf); i++) {
            buf[k++] = (unsigned char)v[i];
            buf[k++] = (unsigned char)(v[i] >> 8);
        }
        if (fwrite(buf, 1, k, fp) != k) { return -1; }
    }
    return 0;
}

int tokenizer_slurp_stream(FILE* fp, const char* path, char** data, size_t* size) {
    *data = NULL;
    *size = 0;
    size_t cap = 1 << 16, n = 0;
    char* buf = (char*)malloc(cap + 1);
    if (buf == NULL) { fclose(fp); return llmc_error("%s: out of memory", path); }
    // read in chunks instead of trusting ftell, so pipes and /proc files work too
    for (;;) {
        if (n == cap) {
            cap *= 2;
            char* nb = (char*)realloc(buf, cap + 1);
            if (nb == NULL) { free(buf); fclose(fp); return llmc_error("%s: out of memory", path); }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - n, fp);
        n += got;
        if (got == 0) { break; }
    }
    int failed = ferror(fp);
    int saved = errno;
    fclose(fp);
    if (failed) { free(buf); return llmc_error("%s: read error: %s", path, strerror(saved)); }
    buf[n] = '\0';
    *data = buf;
    *size = n;
    return 0;
}

int tokenizer_slurp(const char* path, char** data, size_t* size) {
    const char* why = NULL;
    FILE* fp = file_fopen(path, O_RDONLY, 0, "rb", &why);
    if (fp == NULL) { *data = NULL; *size = 0; return llmc_error("%s: cannot open: %s", path, why); }
    return tokenizer_slurp_stream(fp, path, data, size);
}

int tokenizer_init(Tokenizer* t, const char* path) {
    memset(t, 0, sizeof(*t));
    char* data;
    size_t size;
    if (tokenizer_slurp(path, &data, &size) != 0) { return -1; }
    const unsigned char* p = (const unsigned char*)data;
    size_t header_bytes = TOKENIZER_HEADER_INTS * sizeof(uint32_t);
    if (size < header_bytes) {
        free(data);
        return llmc_error("%s: truncated header (%zu of %zu bytes)", path, size, header_bytes);
    }
    uint32_t magic = tokenizer_read_u32le(p), version = tokenizer_read_u32le(p + 4);
    uint32_t vocab_size = tokenizer_read_u32le(p + 8), eot = tokenizer_read_u32le(p + 12);
    if (magic != TOKENIZER_MAGIC) {
        free(data);
        return llmc_error("%s: bad magic %u (expected %u): not a tokenizer file", path, magic, TOKENIZER_MAGIC);
    }
    if (version != TOKENIZER_VERSION) {
        free(data);
        return llmc_error("%s: unsupported version %u (expected %u)", path, version, TOKENIZER_VERSION);
    }
    if (vocab_size == 0 || eot >= vocab_size) {
        free(data);
        return llmc_error("%s: bad header: vocab_size %u, eot token %u", path, vocab_size, eot);
    }
    // each token takes 1 length byte + L bytes in the file and L bytes + 1 NUL in
    // storage, so the body size is exactly the storage size
    size_t body = size - header_bytes;
    // every token takes at least 2 bytes (its length and one byte): a header claiming more
    // tokens than that would have us allocate gigabytes for a file of a few bytes
    if (vocab_size > body / 2) {
        free(data);
        return llmc_error("%s: truncated: the header says %u tokens but the %zu bytes after it hold at most %zu",
                          path, vocab_size, body, body / 2);
    }
    t->storage = (char*)malloc(body > 0 ? body : 1);
    t->offsets = (uint32_t*)malloc((size_t)vocab_size * sizeof(uint32_t));
    t->lengths = (uint8_t*)malloc(vocab_size);
    int rc = 0;
    if (t->storage == NULL || t->offsets == NULL || t->lengths == NULL) {
        rc = llmc_error("%s: out of memory for %u tokens", path, vocab_size);
    }
    size_t pos = header_bytes, out = 0;
    for (uint32_t i = 0; rc == 0 && i < vocab_size; i++) {
        if (pos >= size) {
            rc = llmc_error("%s: truncated: file ends at token %u of %u (byte offset %zu)", path, i, vocab_size, pos);
            break;
        }
        uint8_t len = p[pos];
        if (len == 0) {
            rc = llmc_error("%s: token %u has length 0 (offset %zu)", path, i, pos);
            break;
        }
        if (size - pos - 1 < len) {
            rc = llmc_error("%s: truncated: token %u (byte offset %zu) needs %u bytes, %zu left", path, i, pos, len,
                            size - pos - 1);
            break;
        }
        memcpy(t->storage + out, p + pos + 1, len);
        t->storage[out + len] = '\0';
        t->offsets[i] = (uint32_t)out;
        t->lengths[i] = len;
        out += (size_t)len + 1;
        pos += (size_t)len + 1;
    }
    if (rc == 0 && pos != size) {
        rc = llmc_error("%s: %zu unexpected bytes after the last token", path, size - pos);
    }
    free(data);
    if (rc != 0) {
        free(t->storage); free(t->offsets); free(t->lengths);
        memset(t, 0, sizeof(*t));
        return -1;
    }
    t->vocab_size = vocab_size;
    t->eot_token = eot;
    t->init_ok = 1;
    return 0;
}

void tokenizer_free(Tokenizer* t) {
    free(t->storage);
    free(t->offsets);
    free(t->lengths);
    memset(t, 0, sizeof(*t));
}

static uint64_t bpe_hash_bytes(const char* s, size_t n) {
    // FNV-1a, 64-bit: simple and good enough for short keys
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) { h ^= (unsigned char)s[i]; h *= 1099511628211ULL; }
    return h;
}

static uint64_t bpe_hash_u64(uint64_t x) {
    // splitmix64 finalizer: spreads the two packed ids over all bits
    x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27; x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

static void bpe_map_free(BpeMap* m) {
    free(m->slots);
    free(m->keys);
    memset(m, 0, sizeof(*m));
}

// empties the map but keeps its memory
static void bpe_map_clear(BpeMap* m) {
    if (m->slots != NULL) { memset(m->slots, 0, m->cap * sizeof(BpeMapSlot)); }
    m->count = 0;
    m->keys_len = 0;
}

static int bpe_map_find(const BpeMap* m, const char* key, size_t len, uint64_t* value) {
    if (m->cap == 0) { return 0; }
    uint64_t h = bpe_hash_bytes(key, len);
    for (size_t i = h & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        const BpeMapSlot* s = &m->slots[i];
        if (!s->used) { return 0; }
        if (s->hash == h && s->key_len == len && memcmp(m->keys + s->key_off, key, len) == 0) {
            *value = s->value;
            return 1;
        }
    }
}

// inserts or overwrites; 0 or -1 (out of memory, message recorded)
static int bpe_map_put(BpeMap* m, const char* key, size_t len, uint64_t value) {
    if ((m->count + 1) * 2 > m->cap) {
        // grow at half load so probe chains stay short
        size_t ncap = m->cap ? m->cap * 2 : 1024;
        BpeMapSlot* ns = (BpeMapSlot*)calloc(ncap, sizeof(BpeMapSlot));
        if (ns == NULL) { return llmc_error("tokenizer: out of memory growing a hash map to %zu slots", ncap); }
        for (size_t i = 0; i < m->cap; i++) {
            if (!m->slots[i].used) { continue; }
            size_t j = m->slots[i].hash & (ncap - 1);
            while (ns[j].used) { j = (j + 1) & (ncap - 1); }
            ns[j] = m->slots[i];
        }
        free(m->slots);
        m->slots = ns;
        m->cap = ncap;
    }
    uint64_t h = bpe_hash_bytes(key, len);
    size_t i = h & (m->cap - 1);
    for (; m->slots[i].used; i = (i + 1) & (m->cap - 1)) {
        BpeMapSlot* s = &m->slots[i];
        if (s->hash == h && s->key_len == len && memcmp(m->keys + s->key_off, key, len) == 0) {
            s->value = value;
            return 0;
        }
    }
    if (m->keys_len + len > m->keys_cap) {
        size_t ncap = m->keys_cap ? m->keys_cap : 4096;
        while (ncap < m->keys_len + len) { ncap *= 2; }
        char* nk = (char*)realloc(m->keys, ncap);
        if (nk == NULL) { return llmc_error("tokenizer: out of memory growing a key arena to %zu bytes", ncap); }
        m->keys = nk;
        m->keys_cap = ncap;
    }
    memcpy(m->keys + m->keys_len, key, len);
    BpeMapSlot* s = &m->slots[i];
    s->hash = h;
    s->value = value;
    s->key_off = m->keys_len;
    s->key_len = (uint32_t)len;
    s->used = 1;
    m->keys_len += len;
    m->count++;
    return 0;
}

// GPT-2 stores every token as a printable unicode string: byte b becomes code point
// b when b is printable and not a space (33..126, 161..172, 174..255), and the
// others become 256, 257, ... in byte order. This returns the inverse, code point
// -> byte, for the 324 code points in use (-1 for the rest).
static void bpe_unicode_to_byte(int inv[324]) {
    for (int i = 0; i < 324; i++) { inv[i] = -1; }
    int next = 256;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        if (printable) { inv[b] = b; } else { inv[next++] = b; }
    }
}

// decodes one UTF-8 sequence at s[*i]; returns the code point or -1 if invalid
// (overlong forms, surrogates and values past U+10FFFF are invalid, as in Python)
static int32_t bpe_utf8_next(const unsigned char* s, size_t n, size_t* i) {
    unsigned char c = s[*i];
    if (c < 0x80) { (*i)++; return c; }
    int extra;
    int32_t cp, min;
    if (c >= 0xC2 && c <= 0xDF) { extra = 1; cp = c & 0x1F; min = 0x80; }
    else if (c >= 0xE0 && c <= 0xEF) { extra = 2; cp = c & 0x0F; min = 0x800; }
    else if (c >= 0xF0 && c <= 0xF4) { extra = 3; cp = c & 0x07; min = 0x10000; }
    else { return -1; }
    if (n - *i <= (size_t)extra) { return -1; }
    for (int k = 1; k <= extra; k++) {
        unsigned char cc = s[*i + k];
        if ((cc & 0xC0) != 0x80) { return -1; }
        cp = (cp << 6) | (cc & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) { return -1; }
    *i += (size_t)extra + 1;
    return cp;
}

// turns a token string of encoder.json / vocab.bpe (GPT-2's byte alphabet, UTF-8)
// into raw bytes in out (room for len bytes is enough: each char gives one byte);
// returns the byte count or -1 if a character is outside the alphabet
static long bpe_alphabet_to_bytes(const int inv[324], const char* s, size_t len, char* out) {
    size_t i = 0;
    long n = 0;
    while (i < len) {
        int32_t cp = bpe_utf8_next((const unsigned char*)s, len, &i);
        if (cp < 0 || cp >= 324 || inv[cp] < 0) { return -1; }
        out[n++] = (char)inv[cp];
    }
    return n;
}

static int bpe_merge_put(Bpe* b, uint32_t left, uint32_t right, uint32_t rank, uint32_t merged) {
    uint64_t key = ((uint64_t)left << 32) | right;
    size_t i = bpe_hash_u64(key) & (b->merge_cap - 1);
    while (b->merge_keys[i] != BPE_NO_PAIR && b->merge_keys[i] != key) { i = (i + 1) & (b->merge_cap - 1); }
    if (b->merge_keys[i] == BPE_NO_PAIR) { b->n_merges++; }
    // a repeated merge keeps its later rank, as GPT-2's dict(zip(merges, range(...))) does
    b->merge_keys[i] = key;
    b->merge_vals[i] = ((uint64_t)rank << 32) | merged;
    return 0;
}

// packed (rank << 32 | merged id) of the pair, or BPE_NO_PAIR if it is not a merge
static uint64_t bpe_merge_find(const Bpe* b, uint32_t left, uint32_t right) {
    uint64_t key = ((uint64_t)left << 32) | right;
    size_t i = bpe_hash_u64(key) & (b->merge_cap - 1);
    for (;; i = (i + 1) & (b->merge_cap - 1)) {
        if (b->merge_keys[i] == key) { return b->merge_vals[i]; }
        if (b->merge_keys[i] == BPE_NO_PAIR) { return BPE_NO_PAIR; }
    }
}

void bpe_free(Bpe* b) {
    free(b->tok_bytes);
    free(b->tok_off);
    free(b->tok_len);
    free(b->merge_keys);
    free(b->merge_vals);
    bpe_map_free(&b->cache);
    free(b->cache_toks);
    if (b->md != NULL) { pcre2_match_data_free(b->md); }
    if (b->re != NULL) { pcre2_code_free(b->re); }
    free(b->work);
    memset(b, 0, sizeof(*b));
}

// reads encoder.json into the vocabulary arrays; `vocab` gets bytes -> id
static int bpe_load_encoder(Bpe* b, const char* path, const int inv[324], BpeMap* vocab) {
    char* text;
    size_t size;
    if (tokenizer_slurp(path, &text, &size) != 0) { return -1; }
    cJSON* root = cJSON_ParseWithLength(text, size);
    free(text);
    if (root == NULL || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return llmc_error("%s: not a JSON object (parse error)", path);
    }
    int n = cJSON_GetArraySize(root);
    if (n <= 0 || n > 65536) {
        cJSON_Delete(root);
        // the shards store tokens as uint16, so ids must fit
        return llmc_error("%s: %d entries: expected 1..65536 tokens", path, n);
    }
    b->vocab_size = (uint32_t)n;
    b->tok_off = (uint32_t*)malloc((size_t)n * sizeof(uint32_t));
    b->tok_len = (uint32_t*)calloc((size_t)n, sizeof(uint32_t));
    uint8_t* seen = (uint8_t*)calloc((size_t)n, 1);
    size_t bytes_cap = 1 << 20, bytes_len = 0;
    b->tok_bytes = (char*)malloc(bytes_cap);
    if (b->tok_off == NULL || b->tok_len == NULL || seen == NULL || b->tok_bytes == NULL) {
        free(seen); cJSON_Delete(root);
        return llmc_error("%s: out of memory", path);
    }
    int rc = 0;
    const cJSON* item;
    cJSON_ArrayForEach(item, root) {
        const char* key = item->string;
        size_t klen = strlen(key);
        if (!cJSON_IsNumber(item) || item->valuedouble < 0 || item->valuedouble >= n ||
            item->valuedouble != (double)(int)item->valuedouble) {
            rc = llmc_error("%s: token \"%s\": id is not an integer in 0..%d", path, key, n - 1);
            break;
        }
        int id = item->valueint;
        if (seen[id]) { rc = llmc_error("%s: id %d is used twice (token \"%s\")", path, id, key); break; }
        seen[id] = 1;
        if (bytes_len + klen > bytes_cap) {
            while (bytes_len + klen > bytes_cap) { bytes_cap *= 2; }
            char* nb = (char*)realloc(b->tok_bytes, bytes_cap);
            if (nb == NULL) { rc = llmc_error("%s: out of memory", path); break; }
            b->tok_bytes = nb;
        }
        long blen = bpe_alphabet_to_bytes(inv, key, klen, b->tok_bytes + bytes_len);
        if (blen <= 0) {
            rc = llmc_error("%s: token \"%s\" (id %d) is empty or not in GPT-2's byte alphabet", path, key, id);
            break;
        }
        b->tok_off[id] = (uint32_t)bytes_len;
        b->tok_len[id] = (uint32_t)blen;
        if (bpe_map_put(vocab, b->tok_bytes + bytes_len, (size_t)blen, (uint64_t)id) != 0) { rc = -1; break; }
        bytes_len += (size_t)blen;
    }
    free(seen);
    cJSON_Delete(root);
    if (rc != 0) { return rc; }
    if (vocab->count != (size_t)n) {
        return llmc_error("%s: two ids map to the same bytes (%zu distinct of %d)", path, vocab->count, n);
    }
    uint64_t v;
    for (int c = 0; c < 256; c++) {
        char byte = (char)c;
        if (!bpe_map_find(vocab, &byte, 1, &v)) {
            return llmc_error("%s: the single-byte token for byte 0x%02x is missing", path, c);
        }
        b->byte_token[c] = (uint32_t)v;
    }
    if (!bpe_map_find(vocab, BPE_EOT_STRING, strlen(BPE_EOT_STRING), &v)) {
        return llmc_error("%s: token %s is missing", path, BPE_EOT_STRING);
    }
    b->eot_token = (uint32_t)v;
    return 0;
}

// reads vocab.bpe: a first line "#version...", then one merge "a b" per line;
// the rank is the merge's position (0 for the first)
static int bpe_load_merges(Bpe* b, const char* path, const int inv[324], const BpeMap* vocab) {
    char* text;
    size_t size;
    if (tokenizer_slurp(path, &text, &size) != 0) { return -1; }
    size_t lines = 1;
    for (size_t i = 0; i < size; i++) { lines += text[i] == '\n'; }
    b->merge_cap = 1;
    while (b->merge_cap < lines * 2) { b->merge_cap *= 2; }
    b->merge_keys = (uint64_t*)malloc(b->merge_cap * sizeof(uint64_t));
    b->merge_vals = (uint64_t*)malloc(b->merge_cap * sizeof(uint64_t));
    char* buf = (char*)malloc(size + 1);
    if (b->merge_keys == NULL || b->merge_vals == NULL || buf == NULL) {
        free(text); free(buf);
        return llmc_error("%s: out of memory", path);
    }
    memset(b->merge_keys, 0xFF, b->merge_cap * sizeof(uint64_t));  // all BPE_NO_PAIR
    int rc = 0;
    size_t pos = 0, line_no = 0;
    uint32_t rank = 0;
    while (pos < size) {
        size_t end = pos;
        while (end < size && text[end] != '\n') { end++; }
        line_no++;
        const char* line = text + pos;
        size_t len = end - pos;
        pos = end + 1;
        if (len > 0 && line[len - 1] == '\r') { len--; }  // tolerate CRLF files
        if (line_no == 1) {
            // GPT-2's loader skips the first line, which is a "#version" comment
            if (len < 8 || memcmp(line, "#version", 8) != 0) {
                rc = llmc_error("%s: line 1 is not a \"#version\" comment: not a vocab.bpe file", path);
                break;
            }
            continue;
        }
        if (len == 0) { continue; }
        // split at whitespace into exactly two parts; GPT-2's alphabet has no spaces
        const char* parts[3];
        size_t part_len[3];
        int np = 0;
        for (size_t i = 0; i < len;) {
            while (i < len && (line[i] == ' ' || line[i] == '\t')) { i++; }
            if (i >= len) { break; }
            size_t s = i;
            while (i < len && line[i] != ' ' && line[i] != '\t') { i++; }
            if (np < 3) { parts[np] = line + s; part_len[np] = i - s; }
            np++;
        }
        if (np != 2) { rc = llmc_error("%s:%zu: expected two tokens, got %d", path, line_no, np); break; }
        long la = bpe_alphabet_to_bytes(inv, parts[0], part_len[0], buf);
        long lb = la > 0 ? bpe_alphabet_to_bytes(inv, parts[1], part_len[1], buf + la) : -1;
        if (la <= 0 || lb <= 0) {
            rc = llmc_error("%s:%zu: a token is not in GPT-2's byte alphabet", path, line_no);
            break;
        }
        uint64_t ida, idb, idm;
        if (!bpe_map_find(vocab, buf, (size_t)la, &ida) || !bpe_map_find(vocab, buf + la, (size_t)lb, &idb) ||
            !bpe_map_find(vocab, buf, (size_t)(la + lb), &idm)) {
            rc = llmc_error("%s:%zu: merge \"%.*s\" uses or makes a token missing from the encoder",
                            path, line_no, (int)len, line);
            break;
        }
        bpe_merge_put(b, (uint32_t)ida, (uint32_t)idb, rank, (uint32_t)idm);
        rank++;
    }
    free(text);
    free(buf);
    if (rc == 0 && rank == 0) { rc = llmc_error("%s: no merges found", path); }
    return rc;
}

int bpe_init(Bpe* b, const char* encoder_json, const char* vocab_bpe) {
    memset(b, 0, sizeof(*b));
    int inv[324];
    bpe_unicode_to_byte(inv);
    BpeMap vocab = {0};
    if (bpe_load_encoder(b, encoder_json, inv, &vocab) != 0 ||
        bpe_load_merges(b, vocab_bpe, inv, &vocab) != 0) {
        bpe_map_free(&vocab);
        bpe_free(b);
        return -1;
    }
    bpe_map_free(&vocab);
    int err;
    PCRE2_SIZE err_off;
    b->re = pcre2_compile((PCRE2_SPTR)BPE_PATTERN, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &err, &err_off, NULL);
    if (b->re == NULL) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof(msg));
        bpe_free(b);
        return llmc_error("tokenizer: cannot compile the GPT-2 regex at offset %zu: %s", (size_t)err_off, (char*)msg);
    }
    // JIT makes matching several times faster; without it (unsupported CPU) the
    // interpreter gives the same matches, so a failure here is not an error
    pcre2_jit_compile(b->re, PCRE2_JIT_COMPLETE);
    b->md = pcre2_match_data_create_from_pattern(b->re, NULL);
    b->work_cap = 256;
    b->work = (uint32_t*)malloc(b->work_cap * sizeof(uint32_t));
    if (b->md == NULL || b->work == NULL) {
        bpe_free(b);
        return llmc_error("tokenizer: out of memory");
    }
    b->init_ok = 1;
    return 0;
}

size_t bpe_utf8_invalid_at(const char* text, size_t len) {
    size_t i = 0;
    while (i < len) {
        size_t at = i;
        if (bpe_utf8_next((const unsigned char*)text, len, &i) < 0) { return at; }
    }
    return len;
}

// BPE of one pre-token; appends its tokens to out[*n]
static int bpe_encode_word(Bpe* b, const char* s, size_t len, uint16_t* out, size_t* n) {
    uint64_t cached;
    if (len <= BPE_CACHE_MAX_KEY && bpe_map_find(&b->cache, s, len, &cached)) {
        size_t count = cached & 0xFFFF;
        memcpy(out + *n, b->cache_toks + (cached >> 16), count * sizeof(uint16_t));
        *n += count;
        return 0;
    }
    if (len > b->work_cap) {
        uint32_t* nw = (uint32_t*)realloc(b->work, len * sizeof(uint32_t));
        if (nw == NULL) { return llmc_error("tokenizer: out of memory for a %zu-byte pre-token", len); }
        b->work = nw;
        b->work_cap = len;
    }
    uint32_t* w = b->work;
    size_t m = len;
    for (size_t i = 0; i < len; i++) { w[i] = b->byte_token[(unsigned char)s[i]]; }
    while (m > 1) {
        // the adjacent pair with the lowest rank...
        uint64_t best = BPE_NO_PAIR;
        size_t best_i = 0;
        for (size_t i = 0; i + 1 < m; i++) {
            uint64_t v = bpe_merge_find(b, w[i], w[i + 1]);
            if (v < best) { best = v; best_i = i; }  // rank is in the high bits: compares ranks
        }
        if (best == BPE_NO_PAIR) { break; }
        // ...is merged everywhere, left to right, without overlaps
        uint32_t left = w[best_i], right = w[best_i + 1], merged = (uint32_t)best;
        size_t j = 0;
        for (size_t i = 0; i < m;) {
            if (i + 1 < m && w[i] == left && w[i + 1] == right) {
                w[j++] = merged;
                i += 2;
            } else {
                w[j++] = w[i++];
            }
        }
        m = j;
    }
    for (size_t i = 0; i < m; i++) { out[*n + i] = (uint16_t)w[i]; }
    if (len <= BPE_CACHE_MAX_KEY) {
        if (b->cache.count >= BPE_CACHE_MAX_ENTRIES) {
            bpe_map_clear(&b->cache);
            b->cache_toks_len = 0;
        }
        if (b->cache_toks_len + m > b->cache_toks_cap) {
            size_t ncap = b->cache_toks_cap ? b->cache_toks_cap * 2 : 1 << 16;
            uint16_t* nt = (uint16_t*)realloc(b->cache_toks, ncap * sizeof(uint16_t));
            if (nt == NULL) { return llmc_error("tokenizer: out of memory growing the cache"); }
            b->cache_toks = nt;
            b->cache_toks_cap = ncap;
        }
        memcpy(b->cache_toks + b->cache_toks_len, out + *n, m * sizeof(uint16_t));
        if (bpe_map_put(&b->cache, s, len, ((uint64_t)b->cache_toks_len << 16) | m) != 0) { return -1; }
        b->cache_toks_len += m;
    }
    *n += m;
    return 0;
}

int bpe_encode(Bpe* b, const char* text, size_t len, uint16_t** out, size_t* n_out) {
    *out = NULL;
    *n_out = 0;
    if (!b->init_ok) { return llmc_error("bpe_encode: the encoder is not initialized"); }
    size_t bad = bpe_utf8_invalid_at(text, len);
    if (bad != len) {
        return llmc_error("bpe_encode: invalid UTF-8 at byte offset %zu (byte 0x%02x)", bad, (unsigned char)text[bad]);
    }
    // every token covers at least one byte, so len tokens is always enough
    uint16_t* toks = (uint16_t*)malloc((len > 0 ? len : 1) * sizeof(uint16_t));
    if (toks == NULL) { return llmc_error("bpe_encode: out of memory for %zu tokens", len); }
    size_t n = 0, off = 0;
    while (off < len) {
        // validated above, so PCRE2 need not re-check the UTF-8 on every call
        int rc = pcre2_match(b->re, (PCRE2_SPTR)text, len, off, PCRE2_NO_UTF_CHECK, b->md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) { break; }  // cannot happen: some alternative matches any char
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof(msg));
            free(toks);
            return llmc_error("bpe_encode: regex failed at byte offset %zu: %s", off, (char*)msg);
        }
        PCRE2_SIZE* ov = pcre2_get_ovector_pointer(b->md);
        size_t start = ov[0], end = ov[1];
        if (end <= start) {
            // an empty match would loop forever; the pattern has none, but be safe
            off = start + 1;
            continue;
        }
        // text between matches is dropped, as Python's findall does (there is none)
        if (bpe_encode_word(b, text + start, end - start, toks, &n) != 0) { free(toks); return -1; }
        off = end;
    }
    uint16_t* shrunk = (uint16_t*)realloc(toks, (n > 0 ? n : 1) * sizeof(uint16_t));
    *out = shrunk != NULL ? shrunk : toks;
    *n_out = n;
    return 0;
}

int bpe_write_tokenizer_file(const Bpe* b, const char* path) {
    if (!b->init_ok) { return llmc_error("%s: the encoder is not initialized", path); }
    for (uint32_t i = 0; i < b->vocab_size; i++) {
        if (b->tok_len[i] == 0 || b->tok_len[i] > 255) {
            return llmc_error("%s: token %u has %u bytes: the format allows 1..255", path, i, b->tok_len[i]);
        }
    }
    AtomicFile f;
    if (atomic_open(&f, path) != 0) { return -1; }
    unsigned char header[TOKENIZER_HEADER_INTS * 4];
    memset(header, 0, sizeof(header));
    tokenizer_write_u32le(header, TOKENIZER_MAGIC);
    tokenizer_write_u32le(header + 4, TOKENIZER_VERSION);
    tokenizer_write_u32le(header + 8, b->vocab_size);
    tokenizer_write_u32le(header + 12, b->eot_token);
    int ok = fwrite(header, 1, sizeof(header), f.fp) == sizeof(header);
    for (uint32_t i = 0; ok && i < b->vocab_size; i++) {
        unsigned char len = (unsigned char)b->tok_len[i];
        ok = fputc(len, f.fp) != EOF && fwrite(b->tok_bytes + b->tok_off[i], 1, len, f.fp) == len;
    }
    return atomic_commit(&f, ok);
}
