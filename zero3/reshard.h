/*
 Resharding an engine's checkpoint section: a rank of a run at another world size or
 ZeRO stage rebuilds the section its own engine would have saved, from the sections of
 the ranks that did save, and hands it to the engine's own load. The engines need no
 change, because a section's payload is a list of arrays whose layout follows from the
 partition plan (zero3/plan.h) and the stage alone:

   host     params, m, v                         fp32
   device   master, m, v                         fp32
            compute copy                         elem_bytes (fp32 or bf16)

 each either "full" (the padded model, every unit back to back: units[u].full_offset)
 or "sharded" (the rank's shard of every unit: units[u].shard_offset):

   host     stage 0: full; stages 1-3: sharded
   device   master, m, v as the host's; the compute copy full at stages 0-2, sharded at 3

 (zero_host_save and zero_dev_save write exactly these; offload moves where an engine
 keeps its arrays, never what it saves.) The plan is the one of the section's version
 (zero3/checkpoint.h): a version-1 section, of 64-byte shards, is read through its own
 plan and rewritten in the current one, even at the same world size and stage.
 Element i < numel of unit u of an array is the same value whatever the layout: in a
 full array at full_offset + i, in a sharded one in rank i / shard's file at
 shard_offset + i % shard. Padding is zero everywhere (AdamW leaves zero parameters with
 zero gradients at zero), so the new padding is written as zeros.

 The copy goes range by range through one bounded buffer, reading only the byte ranges
 it needs from the old files (fseeko): the memory is that buffer, whatever the model.
 The output is the new section itself (header and payload), written to a FILE the caller
 gives (a temporary file) and read back by zero_load.
*/
#ifndef ZERO3_RESHARD_H
#define ZERO3_RESHARD_H

#include <stdio.h>              // FILE, fread, fwrite, fseeko, ftello
#include <sys/types.h>          // off_t
#include "zero3/plan.h"         // ZeroPlan: the offsets of both layouts
#include "zero3/checkpoint.h"   // ZeroStateHeader, zero_state_header, zero_state_read_raw

#ifdef __cplusplus
extern "C" {
#endif

#define ZERO_STATE_MAX_ARRAYS 4
#define ZERO_RESHARD_CHUNK_BYTES (4u << 20)  // the copy buffer: large enough for few syscalls

typedef struct { int sharded; size_t elem_bytes; } ZeroStateArray;

// One rank's section layout: the plan (seen from its rank), the arrays in payload order.
typedef struct {
    const char* engine;     // "host" or "device": a literal
    int version;            // the section's format (zero3/checkpoint.h): its plan's alignment
    int stage, num_arrays;
    ZeroStateArray arrays[ZERO_STATE_MAX_ARRAYS];
    ZeroPlan plan;
} ZeroStateLayout;

void zero_state_layout_free(ZeroStateLayout* l);

// The layout of the section of `version` that `engine` writes at `stage` for rank `rank`
// of `world`, with a compute copy of elem_bytes (the plan's element size: its padding
// depends on it). Returns 0, or -1 with an unknown engine, stage or version, or a bad plan.
int zero_state_layout_init_version(ZeroStateLayout* l, const size_t* unit_numel, int num_units, const char* engine,
                                          int stage, int world, int rank, int elem_bytes, int version);

// the layout of the section this build's engines write
int zero_state_layout_init(ZeroStateLayout* l, const size_t* unit_numel, int num_units, const char* engine,
                                  int stage, int world, int rank, int elem_bytes);

size_t zero_state_payload_bytes(const ZeroStateLayout* l);

// the header of the section this layout describes
ZeroStateHeader zero_state_layout_header(const ZeroStateLayout* l);

// The sections every rank of one run saved: their files, positioned past the headers.
typedef struct {
    int world;
    FILE** fp;              // (world) rank q's file, owned by the caller
    off_t* payload;         // (world) where rank q's payload starts in its file
    ZeroStateHeader head;   // rank 0's header
    ZeroStateLayout layout; // the run's layout, seen from rank 0 (the offsets are the same for every rank)
} ZeroStateSource;

void zero_state_source_free(ZeroStateSource* s);

// Reads the section header of each of the `world` files (each positioned at its section)
// and checks that together they are one run's sections of this model: rank q's file says
// rank q, and every file the same engine, stage, world, precision and sizes. `names` name
// the files in messages. Returns 0, or -1 naming the file and the field.
int zero_state_source_init(ZeroStateSource* s, FILE** fp, const char* const* names, int world,
                                  const size_t* unit_numel, int num_units);

// Copies the real elements [begin, end) of unit u (unit-local, end <= numel) of array i
// from the source into dst (the array's element size each): from rank 0's file when
// the array is full, else from the shards of the ranks that own them.
int zero_state_read_range(const ZeroStateSource* s, int i, int u, size_t begin, size_t end, void* dst);

// The same elements written from src into `copies` (world files, opened for update: byte
// copies of the source's, so the same offsets), where a read would have found them.
// Returns 0, or -1 naming the byte and the reason.
int zero_state_write_range(const ZeroStateSource* s, FILE** copies, int i, int u, size_t begin, size_t end, const void* src);

// Writes to `out` (named out_name in messages) the section `to` describes (its header, then
// every array for its rank), each element read from the source, padding as zeros, and
// flushes it. The two layouts must be of the same engine and compute precision. Returns 0,
// or -1; a write that fails (a full disk) names the file, the byte and the reason.
int zero_reshard_write(const ZeroStateSource* s, const ZeroStateLayout* to, FILE* out, const char* out_name);

#ifdef __cplusplus
}
#endif

#endif // ZERO3_RESHARD_H
