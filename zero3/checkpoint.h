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
#include <string.h>         // memset, strncpy, strcmp
#include <errno.h>          // errno
#include "zero3/util.h"     // zero_error
#include "zero3/plan.h"     // ZeroPlan: the totals

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
static ZeroStateHeader zero_state_header(const char* engine, int stage, const ZeroPlan* p, int elem_bytes, size_t payload_bytes) {
    ZeroStateHeader h;
    memset(&h, 0, sizeof(h));
    h.magic = ZERO_STATE_MAGIC;
    h.version = ZERO_STATE_VERSION;
    strncpy(h.engine, engine, sizeof(h.engine) - 1);
    h.stage = stage;
    h.world = p->world;
    h.rank = p->rank;
    h.elem_bytes = elem_bytes;
    h.numel_total = p->numel_total;
    h.padded_total = p->padded_total;
    h.shard_total = p->shard_total;
    h.payload_bytes = payload_bytes;
    return h;
}

static int zero_state_write_header(FILE* fp, const ZeroStateHeader* h) {
    if (fwrite(h, sizeof(*h), 1, fp) != 1) { return zero_error("zero: writing the state header failed: %s", strerror(errno)); }
    return 0;
}

static const char* zero_state_precision(int elem_bytes) { return elem_bytes == 2 ? "bf16" : elem_bytes == 4 ? "fp32" : "?"; }

// the shard alignment (zero3/plan.h) of a section of `version`: 256 bytes (2), 64 (1), 0 unknown
static size_t zero_state_align_bytes(int version) {
    return version == ZERO_STATE_VERSION ? ZERO_PLAN_ALIGN_BYTES : version == 1 ? 64 : 0;
}

// reads a section's header into *h, checking only that it is one (magic, a version whose
// plan is known: this one or 1); the engine's name comes back NUL-terminated
static int zero_state_read_raw(FILE* fp, ZeroStateHeader* h) {
    if (fread(h, sizeof(*h), 1, fp) != 1) { return zero_error("zero: the engine's state is missing or truncated"); }
    if (h->magic != ZERO_STATE_MAGIC || zero_state_align_bytes(h->version) == 0) {
        return zero_error("zero: not an engine state of a known version (magic %d, version %d; expected %d, version 1 or %d)",
                          h->magic, h->version, ZERO_STATE_MAGIC, ZERO_STATE_VERSION);
    }
    h->engine[sizeof(h->engine) - 1] = '\0';
    return 0;
}

// reads the section's header and checks it against `want`, the header this engine would write
static int zero_state_read_header(FILE* fp, const ZeroStateHeader* want) {
    ZeroStateHeader h;
    if (zero_state_read_raw(fp, &h) != 0) { return -1; }
    if (h.version != want->version) {
        return zero_error("zero: the state is of version %d (shards padded to %zu bytes); this engine reads version %d (%zu "
                          "bytes) directly, an older one only through resharding (zero3/reshard.h)", h.version,
                          zero_state_align_bytes(h.version), want->version, zero_state_align_bytes(want->version));
    }
    if (strcmp(h.engine, want->engine) != 0 || h.stage != want->stage || h.world != want->world || h.rank != want->rank ||
        h.elem_bytes != want->elem_bytes) {
        return zero_error("zero: the state was saved by the %s engine at ZeRO stage %d, rank %d of %d, %s compute copy; "
                          "this run is the %s engine at stage %d, rank %d of %d, %s (resuming needs the same backend, "
                          "stage, ranks and precision; the checkpoint's model file loads anywhere with -e)",
                          h.engine, h.stage, h.rank, h.world, zero_state_precision(h.elem_bytes), want->engine, want->stage,
                          want->rank, want->world, zero_state_precision(want->elem_bytes));
    }
    if (h.numel_total != want->numel_total || h.padded_total != want->padded_total || h.shard_total != want->shard_total ||
        h.payload_bytes != want->payload_bytes) {
        return zero_error("zero: the state holds a model of %llu parameters (%llu bytes of state); this run's has %llu (%llu bytes)",
                          (unsigned long long)h.numel_total, (unsigned long long)h.payload_bytes,
                          (unsigned long long)want->numel_total, (unsigned long long)want->payload_bytes);
    }
    return 0;
}

#endif // ZERO3_CHECKPOINT_H
