/*
 ZeRO partition plan: which elements of which parameter unit each rank owns.

 The model's parameters are grouped into units (for GPT-2: the embedding, each
 transformer block, the final layernorm). A unit is the granularity of ZeRO-3
 communication: it is all-gathered whole before its forward/backward and its gradient
 is reduce-scattered whole afterwards, so each unit is one flat buffer.

 Layout of one unit of numel elements on world ranks:
   padded = numel rounded up to a multiple of world * align_elems, align_elems = 256 / elem_bytes
   shard  = padded / world            (a multiple of align_elems: 256 bytes)
   rank r owns unit elements [r*shard, (r+1)*shard); elements >= numel are padding (zeros)
 Every shard has the same size because collectives (all-gather, reduce-scatter) want
 equal counts, and a multiple of 256 bytes (ZERO_PLAN_ALIGN_BYTES) so that, in buffers
 that start 256-byte aligned (cudaMalloc's), every unit and every shard starts on 256
 bytes, whichever buffer holds it:
   - cuBLASLt picks its algorithm from the alignment of each pointer, up to 256 bytes
     (llmc/matmul.cuh tells it), and algorithms differ in their summation order. The GPU
     engines hand a unit's tensors out of a flat buffer of every unit at stages 0-2 and
     out of a buffer of the unit alone at stage 3 (its gradient from stage 2): with
     every unit on 256 bytes in both, a tensor is as aligned at every stage, on every
     backend and world size (its offset inside the unit decides), so the products, and
     the runs, are bit for bit the same. At 64 bytes a unit could sit 64 bytes past a
     boundary at stage 0 and on one at stage 3.
   - shards start on a cache line / vector boundary, and ranks never share a cache line.
 Padding is minimal for that: padded - numel < world * align_elems, under world * 256
 bytes a unit (at most world * 192 bytes a unit more than with 64-byte shards).

 Two flat buffers are described by the offsets:
   full buffer  (every unit, padded, back to back): unit u starts at units[u].full_offset
   shard buffer (a rank's shard of every unit):     unit u's shard at units[u].shard_offset
 Both offsets are in elements; multiplied by elem_bytes they are multiples of 256 too.
 (Checkpoint sections record the alignment through their version, zero3/checkpoint.h:
 those of 64-byte plans are read through zero_plan_init_aligned.)

 Only the arithmetic lives here: no memory for parameters, no communication.
*/
#ifndef ZERO3_PLAN_H
#define ZERO3_PLAN_H

#include <stddef.h>       // size_t

#ifdef __cplusplus
extern "C" {
#endif

// the most ranks a plan accepts: far beyond any real run, and it keeps
// world * align_elems (<= 2^20 * 256) from overflowing
#define ZERO_PLAN_MAX_WORLD 1048576
// every shard a multiple of this many bytes, so every unit and shard offset too (see above)
#define ZERO_PLAN_ALIGN_BYTES 256

typedef struct {
    size_t numel;         // real elements of the unit
    size_t padded;        // numel rounded up to a multiple of world * align_elems
    size_t shard;         // padded / world: elements of each rank's shard
    size_t full_offset;   // element offset of the unit in a padded full buffer (sum of the earlier units' padded)
    size_t shard_offset;  // element offset of the unit's shard in a rank's shard buffer (sum of the earlier shards)
} ZeroUnit;

typedef struct {
    int num_units, world, rank;
    size_t elem_bytes;    // 4 for fp32, 2 for bf16
    size_t align_elems;   // ZERO_PLAN_ALIGN_BYTES / elem_bytes (the plans of old checkpoints: 64 / elem_bytes)
    ZeroUnit* units;      // (num_units)
    size_t numel_total;   // sum of numel
    size_t padded_total;  // sum of padded
    size_t shard_total;   // sum of shard == padded_total / world
} ZeroPlan;

// Frees the unit table and zeroes the plan, so that calling it on a zeroed plan, a plan
// whose init failed, or twice, is harmless.
void zero_plan_free(ZeroPlan* p);

// Builds the plan for num_units units of unit_numel[u] elements of elem_bytes bytes each,
// split over world ranks, seen from rank, with shards of a multiple of align_bytes (64, 128
// or 256; ZERO_PLAN_ALIGN_BYTES but for an old checkpoint's plan). p is overwritten (a previous plan in it must be freed first).
// Returns 0, or -1 with p zeroed and one zero_error line.
int zero_plan_init_aligned(ZeroPlan* p, const size_t* unit_numel, int num_units, int world, int rank,
                                         size_t elem_bytes, size_t align_bytes);

// The plan of this version: shards of a multiple of ZERO_PLAN_ALIGN_BYTES (see above).
int zero_plan_init(ZeroPlan* p, const size_t* unit_numel, int num_units, int world, int rank,
                                 size_t elem_bytes);

// The part of the element range [begin, end) of unit u (unpadded unit-local offsets,
// end <= numel) that lies in rank r's shard, as offsets local to that shard.
// Returns 1 and sets *lo < *hi when non-empty, 0 when empty. Invalid arguments (u or r out
// of range, begin > end, end > numel) return -1 with an zero_error line. *lo and *hi are
// set to 0 whenever the result is not 1, so a caller that tests the return for truth
// still walks an empty range; compare with 1 to tell empty from invalid.
// Used by the optimizer to apply per-tensor settings (weight decay) inside a shard: a
// tensor is a range of its unit, and the shard covers [r*shard, (r+1)*shard) of the unit.
int zero_plan_shard_range(const ZeroPlan* p, int u, int r, size_t begin, size_t end,
                                        size_t* lo, size_t* hi);

// Rank r's part of the tensor [begin, end) of unit u (elements of the unit), located in
// both flat buffers: *full, its element offset in a full padded buffer; *shard, in rank r's
// shard buffer; *n, its length. What a sharded optimizer walks: the master, moments and
// reduced gradient at *shard, the compute copy at *full (stages 1-2) or *shard (stage 3).
// Returns 1 with a part, 0 when no element of the tensor is in the shard (all three 0),
// -1 for bad arguments (as zero_plan_shard_range).
int zero_plan_tensor_part(const ZeroPlan* p, int u, int r, size_t begin, size_t end,
                                        size_t* full, size_t* shard, size_t* n);

// Elements of rank r's shard of unit u that are real (not padding): 0..shard. The real
// elements always come first in a shard, since padding sits at the end of the unit.
// Returns 0 (and records an zero_error line) for an out-of-range u or r.
size_t zero_plan_shard_numel(const ZeroPlan* p, int u, int r);

#ifdef __cplusplus
}
#endif

#endif // ZERO3_PLAN_H
