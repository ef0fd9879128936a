// zero3/crc32c.c: CRC32C, by table or by SSE4.2 (the interface and its notes: zero3/crc32c.h)
#include <stddef.h>   // size_t
#include <stdint.h>   // uint32_t, uint64_t
#include <string.h>   // memcpy: unaligned 8-byte loads; strerror
#include <stdio.h>    // FILE, fread: a file's checksum
#include <stdlib.h>   // malloc: the read buffer
#include <errno.h>    // errno, ENOMEM, EIO
#include "zero3/crc32c.h"   // this module's prototypes
#include "common/file.h"  // file_fopen: opened without blocking on a FIFO or a device
#if defined(__x86_64__)
#include <nmmintrin.h>  // _mm_crc32_u8, _mm_crc32_u64: SSE4.2's crc32 instruction
#endif


// the table of the byte-wise algorithm, built on first use
static uint32_t crc32c_table[256];
static int crc32c_table_ready = 0;

static void crc32c_table_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) { c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1; }
        crc32c_table[i] = c;
    }
    crc32c_table_ready = 1;
}

uint32_t crc32c_soft(uint32_t crc, const unsigned char* p, size_t n) {
    if (!crc32c_table_ready) { crc32c_table_init(); }
    for (size_t i = 0; i < n; i++) { crc = crc32c_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8); }
    return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2")))
static uint32_t crc32c_hard(uint32_t crc, const unsigned char* p, size_t n) {
    uint64_t c = crc;
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = _mm_crc32_u64(c, w);
    }
    uint32_t c32 = (uint32_t)c;
    for (; n > 0; p++, n--) { c32 = _mm_crc32_u8(c32, *p); }
    return c32;
}
#endif

#if defined(__x86_64__)
// four blocks of `block` bytes (a multiple of 8) at p, p + block, ...: four chains at once
__attribute__((target("sse4.2")))
static void crc32c_hard4(const unsigned char* p, size_t block, uint32_t* out) {
    uint64_t c0 = ~0u, c1 = ~0u, c2 = ~0u, c3 = ~0u;
    for (size_t i = 0; i < block; i += 8) {
        uint64_t w0, w1, w2, w3;
        memcpy(&w0, p + i, 8);
        memcpy(&w1, p + block + i, 8);
        memcpy(&w2, p + 2 * block + i, 8);
        memcpy(&w3, p + 3 * block + i, 8);
        c0 = _mm_crc32_u64(c0, w0);
        c1 = _mm_crc32_u64(c1, w1);
        c2 = _mm_crc32_u64(c2, w2);
        c3 = _mm_crc32_u64(c3, w3);
    }
    out[0] = ~(uint32_t)c0; out[1] = ~(uint32_t)c1; out[2] = ~(uint32_t)c2; out[3] = ~(uint32_t)c3;
}
#endif

uint32_t crc32c_update(uint32_t crc, const void* data, size_t n) {
    const unsigned char* p = (const unsigned char*)data;
    crc = ~crc;
#if defined(__x86_64__)
    if (__builtin_cpu_supports("sse4.2")) { return ~crc32c_hard(crc, p, n); }
#endif
    return ~crc32c_soft(crc, p, n);
}

void crc32c_blocks(const void* data, size_t n, size_t block, uint32_t* out) {
    const unsigned char* p = (const unsigned char*)data;
    size_t i = 0;
#if defined(__x86_64__)
    if (block % 8 == 0 && __builtin_cpu_supports("sse4.2")) {
        for (; i + 4 <= n; i += 4) { crc32c_hard4(p + i * block, block, out + i); }
    }
#endif
    for (; i < n; i++) { out[i] = crc32c_update(0, p + i * block, block); }
}

int crc32c_file(const char* path, uint32_t* crc, uint64_t* size, const char** why) {
    enum { PIECE = 4 << 20 };
    unsigned char* buf = (unsigned char*)malloc(PIECE);
    if (buf == NULL) { *why = strerror(ENOMEM); return -1; }
    FILE* fp = file_fopen(path, O_RDONLY, 0, "rb", why);  // a FIFO named like a checkpoint file is refused, never waited on
    if (fp == NULL) { free(buf); return -1; }
    uint32_t c = 0;
    uint64_t total = 0;
    size_t got;
    while ((got = fread(buf, 1, PIECE, fp)) > 0) {
        c = crc32c_update(c, buf, got);
        total += got;
    }
    int err = ferror(fp) ? (errno != 0 ? errno : EIO) : 0;
    fclose(fp);
    free(buf);
    if (err != 0) { *why = strerror(err); return -1; }
    *crc = c;
    *size = total;
    return 0;
}
