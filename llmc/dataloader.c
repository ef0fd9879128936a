// The token shards' loader (llmc/dataloader.h): the shards, their checks, batches, the state a checkpoint keeps.
#include "llmc/dataloader.h" // the interface, its types and the headers its bodies use
#include <stdlib.h>     // malloc, calloc, free, qsort
#include <string.h>     // memset, memcpy, strlen, strcmp, strerror
#include <limits.h>     // INT_MAX: rng_permute works on int indices
#include <errno.h>      // errno, EINTR
#include <glob.h>       // glob, globfree, GLOB_NOMATCH
#include <fcntl.h>      // O_RDONLY
#include <unistd.h>     // pread, close
#include <sys/stat.h>   // fstat: the file size checked against the header
#include "llmc/utils.h" // llmc_error: one-line error messages, return -1
#include "common/file.h" // file_open: a shard that is a FIFO or a device is refused, never waited on
#include "llmc/rand.h"  // Rng, rng_init, rng_u64, rng_permute: the shared deterministic RNG

static int32_t dataloader_read_i32le(const uint8_t* p) {
    // assembled byte by byte so the format is read the same on any host byte order
    uint32_t u = (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
    return (int32_t)u;
}

static int dataloader_path_compare(const void* a, const void* b) {
    // byte-wise, not strcoll: every rank must agree on the order whatever its locale
    return strcmp(*(const char* const*)a, *(const char* const*)b);
}

// reads exactly n bytes at byte offset off, retrying short reads; 0 ok, -1 with errno or
// errno = 0 at end of file
static int dataloader_pread_full(int fd, uint8_t* buf, size_t n, off_t off) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, buf + got, n - got, off + (off_t)got);
        if (r < 0) {
            if (errno == EINTR) { continue; }
            return -1;
        }
        if (r == 0) { errno = 0; return -1; }
        got += (size_t)r;
    }
    return 0;
}

// the seed of the shuffle of one epoch: a hash of (seed, epoch) so that consecutive epochs
// get unrelated streams (seeding splitmix with seed+epoch would only shift one stream)
static uint64_t dataloader_epoch_seed(uint64_t seed, uint64_t epoch) {
    Rng rng;
    rng_init(&rng, seed);
    uint64_t a = rng_u64(&rng);
    rng_init(&rng, a ^ epoch);
    return rng_u64(&rng);
}

// fills shard_order and chunk_order for the given epoch; from identity every time, so the
// order depends on (seed, epoch) only and not on what was read before
static void dataloader_compute_order(DataLoader* dl, uint64_t epoch) {
    for (size_t f = 0; f < dl->num_shards; f++) {
        dl->shard_order[f] = (int)f;
        for (size_t i = 0; i < dl->shard_nchunks[f]; i++) {
            dl->chunk_order[dl->chunk_offset[f] + i] = (int)i;
        }
    }
    if (!dl->shuffle) { return; }
    Rng rng;
    rng_init(&rng, dataloader_epoch_seed(dl->seed, epoch));
    // shards first, then each shard's chunks in file-index order: a fixed sequence of draws
    rng_permute(&rng, dl->shard_order, dl->num_shards);
    for (size_t f = 0; f < dl->num_shards; f++) {
        rng_permute(&rng, dl->chunk_order + dl->chunk_offset[f], dl->shard_nchunks[f]);
    }
}

// opens shard f, checks its header against its size; fills *ntok. The fd is closed.
static int dataloader_check_shard(const char* path, size_t* ntok) {
    const char* why = NULL;
    int fd = file_open(path, O_RDONLY, 0, FILE_REGULAR, &why);  // a regular file: a FIFO a glob matched is no shard
    if (fd < 0) {
        return llmc_error("dataloader: cannot open shard %s: %s", path, why);
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return llmc_error("dataloader: cannot stat shard %s: %s", path, strerror(e));
    }
    long long size = (long long)st.st_size;
    if (size < DATALOADER_HEADER_BYTES) {
        close(fd);
        return llmc_error("dataloader: shard %s is truncated: %lld bytes, shorter than the %d-byte header",
                          path, size, DATALOADER_HEADER_BYTES);
    }
    uint8_t header[DATALOADER_HEADER_BYTES];
    if (dataloader_pread_full(fd, header, sizeof(header), 0) != 0) {
        int e = errno;
        close(fd);
        return llmc_error("dataloader: cannot read the header of shard %s: %s", path,
                          e ? strerror(e) : "unexpected end of file");
    }
    close(fd);
    int32_t magic = dataloader_read_i32le(header + 0);
    int32_t version = dataloader_read_i32le(header + 4);
    int32_t count = dataloader_read_i32le(header + 8);
    if (magic != DATALOADER_MAGIC) {
        return llmc_error("dataloader: shard %s has bad magic %d (expected %d)", path, (int)magic, DATALOADER_MAGIC);
    }
    if (version != DATALOADER_VERSION) {
        return llmc_error("dataloader: shard %s has unsupported version %d (expected %d)", path, (int)version,
                          DATALOADER_VERSION);
    }
    if (count < 0) {
        return llmc_error("dataloader: shard %s has a negative token count %d in its header", path, (int)count);
    }
    long long expected = (long long)DATALOADER_HEADER_BYTES + 2LL * (long long)count;
    if (size < expected) {
        return llmc_error("dataloader: shard %s is truncated: header says %d tokens (%lld bytes) but the file has %lld bytes",
                          path, (int)count, expected, size);
    }
    if (size > expected) {
        return llmc_error("dataloader: shard %s size mismatch: header says %d tokens (%lld bytes) but the file has %lld bytes",
                          path, (int)count, expected, size);
    }
    *ntok = (size_t)count;
    return 0;
}

void dataloader_free(DataLoader* dl) {
    if (dl->fd >= 0) { close(dl->fd); }
    dl->fd = -1;
    if (dl->shard_paths != NULL) {
        for (size_t f = 0; f < dl->num_shards; f++) { free(dl->shard_paths[f]); }
    }
    free(dl->shard_paths);    dl->shard_paths = NULL;
    free(dl->shard_ntok);     dl->shard_ntok = NULL;
    free(dl->shard_nchunks);  dl->shard_nchunks = NULL;
    free(dl->shard_scanned);  dl->shard_scanned = NULL;
    free(dl->chunk_offset);   dl->chunk_offset = NULL;
    free(dl->shard_order);    dl->shard_order = NULL;
    free(dl->chunk_order);    dl->chunk_order = NULL;
    free(dl->buffer);         dl->buffer = NULL;
    free(dl->inputs);         dl->inputs = NULL;
    free(dl->targets);        dl->targets = NULL;
    dl->num_shards = 0;
    dl->total_chunks = 0;
}

int dataloader_init(DataLoader* dl, const char* pattern, size_t B, size_t T, int rank, int nproc,
                                  int shuffle, uint64_t seed) {
    memset(dl, 0, sizeof(*dl));
    dl->fd = -1;
    if (pattern == NULL) { return llmc_error("dataloader: pattern is NULL"); }
    if (B == 0 || T == 0) { return llmc_error("dataloader: B=%zu and T=%zu must both be positive", B, T); }
    if (nproc < 1 || rank < 0 || rank >= nproc) {
        return llmc_error("dataloader: rank %d is not in [0, nproc=%d)", rank, nproc);
    }
    // overflow of B*T, nproc*B*T or the byte count of one read would silently corrupt offsets
    if (T > (SIZE_MAX / 4 - 1) / B || B * T > (SIZE_MAX / 4 - 1) / (size_t)nproc) {
        return llmc_error("dataloader: nproc*B*T = %d*%zu*%zu overflows", nproc, B, T);
    }
    dl->B = B;
    dl->T = T;
    dl->rank = rank;
    dl->nproc = nproc;
    dl->shuffle = shuffle != 0;
    dl->seed = seed;
    dl->global_tokens = (size_t)nproc * B * T;

    // the shard list
    glob_t g;
    int grc = glob(pattern, 0, NULL, &g);
    if (grc == GLOB_NOMATCH) {
        globfree(&g);
        return llmc_error("dataloader: no file matches pattern %s", pattern);
    }
    if (grc != 0) {
        globfree(&g);
        return llmc_error("dataloader: glob of pattern %s failed (%s)", pattern,
                          grc == GLOB_NOSPACE ? "out of memory" : "read error");
    }
    if (g.gl_pathc > (size_t)INT_MAX) {
        globfree(&g);
        return llmc_error("dataloader: pattern %s matches too many files", pattern);
    }
    dl->num_shards = g.gl_pathc;
    dl->shard_paths = (char**)calloc(dl->num_shards, sizeof(char*));
    if (dl->shard_paths == NULL) {
        globfree(&g);
        llmc_error("dataloader: out of memory for the shard paths of %s", pattern);
        dataloader_free(dl);
        return -1;
    }
    for (size_t f = 0; f < dl->num_shards; f++) {
        size_t len = strlen(g.gl_pathv[f]);
        dl->shard_paths[f] = (char*)malloc(len + 1);
        if (dl->shard_paths[f] == NULL) {
            globfree(&g);
            llmc_error("dataloader: out of memory for the shard paths of %s", pattern);
            dataloader_free(dl);
            return -1;
        }
        memcpy(dl->shard_paths[f], g.gl_pathv[f], len + 1);
    }
    globfree(&g);
    qsort(dl->shard_paths, dl->num_shards, sizeof(char*), dataloader_path_compare);

    // validate every shard now, so a bad file fails at startup and not hours into training
    dl->shard_ntok = (size_t*)calloc(dl->num_shards, sizeof(size_t));
    dl->shard_nchunks = (size_t*)calloc(dl->num_shards, sizeof(size_t));
    dl->chunk_offset = (size_t*)calloc(dl->num_shards, sizeof(size_t));
    dl->shard_order = (int*)calloc(dl->num_shards, sizeof(int));
    dl->shard_scanned = (uint8_t*)calloc(dl->num_shards, 1);
    if (!dl->shard_ntok || !dl->shard_nchunks || !dl->chunk_offset || !dl->shard_order || !dl->shard_scanned) {
        llmc_error("dataloader: out of memory for %zu shards", dl->num_shards);
        dataloader_free(dl);
        return -1;
    }
    for (size_t f = 0; f < dl->num_shards; f++) {
        size_t ntok = 0;
        if (dataloader_check_shard(dl->shard_paths[f], &ntok) != 0) {
            dataloader_free(dl);
            return -1;  // message already recorded, naming the file
        }
        if (ntok < dl->global_tokens + 1) {
            llmc_error("dataloader: shard %s has %zu tokens, fewer than one global batch of nproc*B*T+1 = %zu",
                       dl->shard_paths[f], ntok, dl->global_tokens + 1);
            dataloader_free(dl);
            return -1;
        }
        size_t nchunks = (ntok - 1) / dl->global_tokens;
        if (nchunks > (size_t)INT_MAX) {
            llmc_error("dataloader: shard %s has %zu chunks, more than the shuffle supports", dl->shard_paths[f], nchunks);
            dataloader_free(dl);
            return -1;
        }
        dl->shard_ntok[f] = ntok;
        dl->shard_nchunks[f] = nchunks;
        dl->chunk_offset[f] = dl->total_chunks;
        dl->total_chunks += nchunks;
    }

    size_t bt = B * T;
    dl->chunk_order = (int*)malloc(dl->total_chunks * sizeof(int));
    dl->buffer = (uint8_t*)malloc((bt + 1) * 2);
    dl->inputs = (int*)malloc(bt * sizeof(int));
    dl->targets = (int*)malloc(bt * sizeof(int));
    if (!dl->chunk_order || !dl->buffer || !dl->inputs || !dl->targets) {
        llmc_error("dataloader: out of memory for a batch of B*T = %zu tokens", bt);
        dataloader_free(dl);
        return -1;
    }
    memset(dl->inputs, 0, bt * sizeof(int));
    memset(dl->targets, 0, bt * sizeof(int));
    dataloader_compute_order(dl, 0);
    return 0;
}

void dataloader_reset(DataLoader* dl) {
    if (dl->epoch != 0) { dataloader_compute_order(dl, 0); }
    dl->epoch = 0;
    dl->shard_pos = 0;
    dl->chunk_pos = 0;
}

// The first token id of `count` raw little-endian tokens at `bytes` that is not below
// vocab_size, named with its token index (`first` is the first one's) and byte offset
// (`at` is the first one's) in shard f. Returns 0, or -1 with llmc_errmsg().
static int dataloader_check_ids(const DataLoader* dl, size_t f, const uint8_t* bytes, size_t count, size_t first,
                                       long long at) {
    for (size_t i = 0; i < count; i++) {
        int id = (int)((unsigned)bytes[2 * i] | ((unsigned)bytes[2 * i + 1] << 8));
        if (id >= dl->vocab_size) {
            return llmc_error("dataloader: shard %s: token %zu (byte offset %lld) is %d, not below the model's vocabulary "
                              "size %d", dl->shard_paths[f], first + i, at + 2LL * (long long)i, id, dl->vocab_size);
        }
    }
    return 0;
}

// Every token id of shard f below vocab_size, read in 1 MiB pieces from the open fd: done
// once per shard, when the loader first opens it, so that a bad id stops the run before a
// batch of that shard is trained on (the first shard's before the first step), not at the
// step that happens to read it. One sequential read of the shard per rank: a few
// milliseconds per 100M-token shard against the minutes spent training on it.
static int dataloader_scan_shard(DataLoader* dl, size_t f) {
    enum { PIECE = 1 << 20 };
    uint8_t* piece = (uint8_t*)malloc(PIECE);
    if (piece == NULL) { return llmc_error("dataloader: out of memory to check shard %s", dl->shard_paths[f]); }
    size_t n = dl->shard_ntok[f];
    for (size_t first = 0; first < n; first += PIECE / 2) {
        size_t count = n - first < PIECE / 2 ? n - first : PIECE / 2;
        off_t at = (off_t)DATALOADER_HEADER_BYTES + (off_t)first * 2;
        if (dataloader_pread_full(dl->fd, piece, count * 2, at) != 0) {
            int e = errno;
            free(piece);
            return llmc_error("dataloader: cannot read shard %s at byte offset %lld: %s", dl->shard_paths[f], (long long)at,
                              e ? strerror(e) : "unexpected end of file (shard changed since init?)");
        }
        if (dataloader_check_ids(dl, f, piece, count, first, (long long)at) != 0) {
            free(piece);
            return -1;
        }
    }
    free(piece);
    dl->shard_scanned[f] = 1;
    return 0;
}

int dataloader_next_batch(DataLoader* dl) {
    if (dl->num_shards == 0 || dl->inputs == NULL) {
        return llmc_error("dataloader: next_batch on a loader that is not initialized");
    }
    size_t f = (size_t)dl->shard_order[dl->shard_pos];
    size_t chunk = (size_t)dl->chunk_order[dl->chunk_offset[f] + dl->chunk_pos];
    size_t bt = dl->B * dl->T;
    size_t token_offset = chunk * dl->global_tokens + (size_t)dl->rank * bt;  // in tokens, within the shard
    if (dl->fd < 0 || dl->fd_shard != f) {
        if (dl->fd >= 0) { close(dl->fd); dl->fd = -1; }
        const char* why = NULL;
        dl->fd = file_open(dl->shard_paths[f], O_RDONLY, 0, FILE_REGULAR, &why);
        if (dl->fd < 0) {
            return llmc_error("dataloader: cannot open shard %s: %s", dl->shard_paths[f], why);
        }
        dl->fd_shard = f;
    }
    if (dl->vocab_size > 0 && !dl->shard_scanned[f] && dataloader_scan_shard(dl, f) != 0) { return -1; }
    off_t byte_offset = (off_t)DATALOADER_HEADER_BYTES + (off_t)token_offset * 2;
    if (dataloader_pread_full(dl->fd, dl->buffer, (bt + 1) * 2, byte_offset) != 0) {
        int e = errno;
        return llmc_error("dataloader: cannot read %zu tokens at token %zu of shard %s: %s", bt + 1, token_offset,
                          dl->shard_paths[f], e ? strerror(e) : "unexpected end of file (shard changed since init?)");
    }
    // uint16 little-endian -> int, every id below the vocabulary; targets are the same
    // tokens shifted by one. The position is left unchanged on a bad id, as on an I/O error.
    if (dl->vocab_size > 0 && dataloader_check_ids(dl, f, dl->buffer, bt + 1, token_offset, (long long)byte_offset) != 0) {
        return -1;
    }
    for (size_t i = 0; i < bt; i++) {
        dl->inputs[i] = (int)((unsigned)dl->buffer[2 * i] | ((unsigned)dl->buffer[2 * i + 1] << 8));
        dl->targets[i] = (int)((unsigned)dl->buffer[2 * i + 2] | ((unsigned)dl->buffer[2 * i + 3] << 8));
    }
    // advance to the next batch
    dl->chunk_pos++;
    if (dl->chunk_pos == dl->shard_nchunks[f]) {
        dl->chunk_pos = 0;
        dl->shard_pos++;
        if (dl->shard_pos == dl->num_shards) {
            dl->shard_pos = 0;
            dl->epoch++;
            if (dl->shuffle) { dataloader_compute_order(dl, dl->epoch); }
        }
    }
    return 0;
}

void dataloader_get_state(const DataLoader* dl, DataLoaderState* s) {
    s->epoch = dl->epoch;
    s->shard = (uint64_t)dl->shard_pos;
    s->batch = (uint64_t)dl->chunk_pos;
}

int dataloader_set_state(DataLoader* dl, const DataLoaderState* s) {
    if (dl->num_shards == 0) { return llmc_error("dataloader: set_state on a loader that is not initialized"); }
    if (s->shard >= (uint64_t)dl->num_shards) {
        return llmc_error("dataloader: state shard %llu out of range (%zu shards)", (unsigned long long)s->shard,
                          dl->num_shards);
    }
    if (dl->shuffle && s->epoch != dl->epoch) { dataloader_compute_order(dl, s->epoch); }
    size_t f = (size_t)dl->shard_order[s->shard];
    if (s->batch >= (uint64_t)dl->shard_nchunks[f]) {
        // put back the order of the epoch we are still in
        if (dl->shuffle && s->epoch != dl->epoch) { dataloader_compute_order(dl, dl->epoch); }
        return llmc_error("dataloader: state batch %llu out of range (shard %s at position %llu of epoch %llu has %zu batches)",
                          (unsigned long long)s->batch, dl->shard_paths[f], (unsigned long long)s->shard,
                          (unsigned long long)s->epoch, dl->shard_nchunks[f]);
    }
    dl->epoch = s->epoch;
    dl->shard_pos = (size_t)s->shard;
    dl->chunk_pos = (size_t)s->batch;
    return 0;
}
