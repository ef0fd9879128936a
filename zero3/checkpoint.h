/*
 The engine's part of a checkpoint. Each rank's state file (the trainer writes its own
 header first: llmc/checkpoint.h) holds one engine section:

   ZeroStateHeader   magic 20241125, version 2, which engine layout follows ("host":
                     the host engine's, also the GPU trainer's host-staged backend;
                     "device": the device engine's), the stage, world size and rank, the
                     bytes of one element of the compute copy, the partition plan's
                     totals, and the payload's size in bytes
   payload           the engine's arrays, in the order its save function documents

 An engine reads back only a section of its own layout, stage, world size, rank,
 precision and model: the shards of one partition mean nothing in another. Every
 mismatch is refused with a message that names both sides. A section for another world
 size or stage is rebuilt from the saved ones first (zero3/reshard.h).

 The version names the partition plan's padding, which places every array's elements:
 version 2, shards of a multiple of 256 bytes (zero3/plan.h); version 1, of 64 bytes (before
 the GPU engines needed every unit on 256 bytes). A version-1 section is read through its
 own plan, as a section of another layout (zero_state_align_bytes, zero3/reshard.h): an
 engine's own load accepts only the current version, so an old section is never read
 with the new offsets.
*/
#ifndef ZERO3_CHECKPOINT_H
#define ZERO3_CHECKPOINT_H

#include <stdio.h>          // FILE, fread, fwrite
#include <stdint.h>         // int32_t, uint64_t
#include "zero3/plan.h"     // ZeroPlan: the totals
#include <stddef.h>         // size_t

#ifdef __cplusplus
extern "C" {
#endif

#define ZERO_STATE_MAGIC 20241125
#define ZERO_STATE_VERSION 2

typedef struct {
    int32_t magic, version;
    char engine[16];                  // "host" or "device", NUL-terminated
    int32_t stage, world, rank, elem_bytes;
    uint64_t numel_total, padded_total, shard_total;
    uint64_t payload_bytes;
} ZeroStateHeader;

// the header this engine writes, and expects to read back
ZeroStateHeader zero_state_header(const char* engine, int stage, const ZeroPlan* p, int elem_bytes, size_t payload_bytes);

int zero_state_write_header(FILE* fp, const ZeroStateHeader* h);

const char* zero_state_precision(int elem_bytes);

// the shard alignment (zero3/plan.h) of a section of `version`: 256 bytes (2), 64 (1), 0 unknown
size_t zero_state_align_bytes(int version);

// reads a section's header into *h, checking only that it is one (magic, a version whose
// plan is known: this one or 1); the engine's name comes back NUL-terminated
int zero_state_read_raw(FILE* fp, ZeroStateHeader* h);

// reads the section's header and checks it against `want`, the header this engine would write
int zero_state_read_header(FILE* fp, const ZeroStateHeader* want);

#ifdef __cplusplus
}
#endif

#endif // ZERO3_CHECKPOINT_H
