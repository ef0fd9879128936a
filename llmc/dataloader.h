/*
 Dataloader over llm.c token shards, for data-parallel training on nproc ranks.

 Shard file format (all little-endian):
   header: 256 int32 = 1024 bytes; [0] = 20240520 (magic), [1] = 1 (version), [2] = ntok
   body:   ntok uint16 token ids; the file is exactly 1024 + 2*ntok bytes

 Layout: a global batch is nproc*B*T tokens. Each shard is cut into
 (ntok-1) / (nproc*B*T) global chunks (the -1 because the targets need one token past
 the inputs). For chunk k, rank r reads the B*T+1 consecutive tokens starting at token
 k*nproc*B*T + r*B*T: inputs are the first B*T, targets the last B*T. The ranks together
 therefore read exactly what one rank with batch size nproc*B reads, so a global batch
 gives the same loss at any number of ranks. Leftover tokens at a shard's end are unused.

 Order: an epoch visits every shard once and every chunk of a shard once. Without
 shuffle the shards come in byte-wise sorted file-name order and chunks in file order.
 With shuffle, at the start of each epoch the shard order and, per shard, the chunk
 order are permuted by an Rng seeded from (seed, epoch) alone, so every rank computes
 the same permutation without talking to the others, and a resumed run (set_state)
 recomputes it exactly.

 Reads use pread of only the B*T+1 tokens needed: real shards are ~100M tokens and are
 never loaded whole. One file descriptor (the shard being read) is kept open.

 POSIX: glob, pread, open and fstat are POSIX, not C11. Under gcc's default gnu dialect
 they are always declared; under a strict -std=c11 this header must be included before
 any system header so that the _POSIX_C_SOURCE below takes effect.
*/
#ifndef LLMC_DATALOADER_H
#define LLMC_DATALOADER_H

#if !defined(_POSIX_C_SOURCE) && !defined(_GNU_SOURCE) && !defined(_DEFAULT_SOURCE)
#define _POSIX_C_SOURCE 200809L  // glob, pread, O_CLOEXEC under a strict -std=c11
#endif

#include <stdint.h>     // uint8_t, uint64_t, int32_t, SIZE_MAX
#include <stddef.h>     // size_t

#ifdef __cplusplus
extern "C" {
#endif

#define DATALOADER_MAGIC 20240520
#define DATALOADER_VERSION 1
#define DATALOADER_HEADER_INTS 256
#define DATALOADER_HEADER_BYTES (DATALOADER_HEADER_INTS * 4)

typedef struct DataLoader {
    size_t B, T;            // batch size and sequence length of this rank
    int rank, nproc;        // this rank and the number of ranks
    int vocab_size;         // every id read must be below it (dataloader_set_vocab); 0: unchecked
    int* inputs;            // (B, T) token ids of the current batch
    int* targets;           // (B, T) the next tokens
    // configuration
    int shuffle;            // 0: sorted shards, chunks in order; else permuted per epoch
    uint64_t seed;          // with the epoch, the only input of the shuffle
    size_t global_tokens;   // nproc*B*T tokens per global batch (one chunk)
    // shards, in byte-wise sorted file-name order (the "file index")
    size_t num_shards;
    char** shard_paths;     // (num_shards) owned copies of the glob results
    size_t* shard_ntok;     // (num_shards) tokens in each shard
    size_t* shard_nchunks;  // (num_shards) global chunks in each shard
    size_t* chunk_offset;   // (num_shards) where a shard's chunks start in chunk_order
    size_t total_chunks;    // sum of shard_nchunks: global batches per epoch
    // order of the current epoch
    int* shard_order;       // (num_shards) file index of the shard at each position
    int* chunk_order;       // (total_chunks) chunk_order[chunk_offset[f] + i]: i-th chunk read of file f
    // position of the NEXT batch: always valid (normalized after every advance)
    uint64_t epoch;
    size_t shard_pos;       // position in shard_order
    size_t chunk_pos;       // position in the chunk order of that shard
    // I/O
    int fd;                 // open descriptor of file index fd_shard, or -1
    size_t fd_shard;
    uint8_t* shard_scanned; // (num_shards) 1: every id of the shard was checked against vocab_size
    uint8_t* buffer;        // (B*T+1)*2 raw little-endian bytes of one read
} DataLoader;

// position in the data, saved in checkpoints: epoch, shard position within the epoch's
// shard order, batch (chunk) position within that shard's chunk order
typedef struct { uint64_t epoch, shard, batch; } DataLoaderState;

// ----------------------------------------------------------------------------
// helpers

// ----------------------------------------------------------------------------
// API

// safe on a zeroed loader, on one whose init failed, and twice
void dataloader_free(DataLoader* dl);

// opens the shards of pattern for rank of nproc at (B, T), checking each; shuffle with
// seed, or in order. 0, or -1 with llmc_errmsg() naming the shard and the problem
int dataloader_init(DataLoader* dl, const char* pattern, size_t B, size_t T, int rank, int nproc,
                                  int shuffle, uint64_t seed);

// back to the first batch of epoch 0 (validation loaders call this before each evaluation)
void dataloader_reset(DataLoader* dl);

// global batches per epoch, summed over all shards (the same on every rank)
static inline size_t dataloader_num_batches(const DataLoader* dl) { return dl->total_chunks; }

// reads the batch at the current position into inputs/targets, then advances; at the end of
// a shard it moves to the next shard, after the last shard to epoch+1 (reshuffled). On an I/O
// error the position is left unchanged, so get_state still names the batch that failed.
int dataloader_next_batch(DataLoader* dl);

// The model's vocabulary size V: from now on every token id read must be < V. An id at or
// past V would index past wte (a crash on the CPU, a wild read in the GPU's encoder) and
// one in the padding rows V..Vp-1 would be a class no softmax ever predicts (an infinite
// loss). Set by the trainer after init, before the first batch; each shard is checked
// whole when the loader first opens it (dataloader_scan_shard), and each batch again as it
// is read (cheap, and it covers a shard changed underneath the run).
static inline void dataloader_set_vocab(DataLoader* dl, int vocab_size) { dl->vocab_size = vocab_size; }

// the position of the NEXT batch that dataloader_next_batch will return
void dataloader_get_state(const DataLoader* dl, DataLoaderState* s);

// resumes at a position from dataloader_get_state (of a loader with the same shards, B, T,
// nproc, shuffle and seed): the next batch is the one that would have come next. The batch
// index is checked against the shard at that position in that epoch's order.
int dataloader_set_state(DataLoader* dl, const DataLoaderState* s);

#ifdef __cplusplus
}
#endif

#endif // LLMC_DATALOADER_H
