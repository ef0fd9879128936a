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
#include <stdint.h>       // SIZE_MAX: overflow checks
#include <stdlib.h>       // calloc, free
#include <string.h>       // memset
#include "zero3/util.h"    // zero_error: the 0 / -1 error convention

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
static inline void zero_plan_free(ZeroPlan* p) {
    if (p == NULL) { return; }
    free(p->units);
    memset(p, 0, sizeof(*p));
}

// Builds the plan for num_units units of unit_numel[u] elements of elem_bytes bytes each,
// split over world ranks, seen from rank, with shards of a multiple of align_bytes (64, 128
// or 256; ZERO_PLAN_ALIGN_BYTES but for an old checkpoint's plan). p is overwritten (a previous plan in it must be freed first).
// Returns 0, or -1 with p zeroed and one zero_error line.
static inline int zero_plan_init_aligned(ZeroPlan* p, const size_t* unit_numel, int num_units, int world, int rank,
                                         size_t elem_bytes, size_t align_bytes) {
    if (p == NULL) { return zero_error("zero_plan_init: plan pointer is NULL"); }
    memset(p, 0, sizeof(*p));  // so that every failure below leaves a plan zero_plan_free accepts
    if (world < 1 || world > ZERO_PLAN_MAX_WORLD) {
        return zero_error("zero_plan_init: world %d must be in [1, %d]", world, ZERO_PLAN_MAX_WORLD);
    }
    if (rank < 0 || rank >= world) {
        return zero_error("zero_plan_init: rank %d must be in [0, world %d)", rank, world);
    }
    if (num_units < 1) {
        return zero_error("zero_plan_init: num_units %d must be >= 1", num_units);
    }
    if (unit_numel == NULL) { return zero_error("zero_plan_init: unit_numel is NULL"); }
    if (elem_bytes != 1 && elem_bytes != 2 && elem_bytes != 4 && elem_bytes != 8) {
        return zero_error("zero_plan_init: elem_bytes %zu must be 1, 2, 4 or 8", elem_bytes);
    }
    if (align_bytes != 64 && align_bytes != 128 && align_bytes != 256) {
        return zero_error("zero_plan_init: alignment %zu bytes must be 64, 128 or 256", align_bytes);
    }
    size_t align_elems = align_bytes / elem_bytes;
    // every padded size is a multiple of this quantum; <= 2^20 * 256, no overflow
    size_t quantum = (size_t)world * align_elems;

    ZeroUnit* units = (ZeroUnit*)calloc((size_t)num_units, sizeof(ZeroUnit));
    if (units == NULL) {
        return zero_error("zero_plan_init: out of memory for %d units", num_units);
    }
    size_t numel_total = 0, padded_total = 0, shard_total = 0;
    for (int u = 0; u < num_units; u++) {
        size_t n = unit_numel[u];
        if (n == 0) {
            free(units);
            return zero_error("zero_plan_init: unit %d has numel 0 (every unit needs >= 1 element)", u);
        }
        // ceil(n / quantum) * quantum without forming n + quantum - 1, which could overflow
        size_t blocks = n / quantum + (n % quantum != 0);
        if (blocks > SIZE_MAX / quantum) {
            free(units);
            return zero_error("zero_plan_init: unit %d numel %zu overflows size_t when padded to a multiple of %zu",
                              u, n, quantum);
        }
        size_t padded = blocks * quantum;
        // the running totals must fit too, and so must the full buffer's size in bytes,
        // since someone will allocate padded_total * elem_bytes bytes
        if (padded > SIZE_MAX - padded_total || padded_total + padded > SIZE_MAX / elem_bytes) {
            free(units);
            return zero_error("zero_plan_init: unit %d numel %zu makes the padded total overflow size_t "
                              "(%zu elements of %zu bytes before it)", u, n, padded_total, elem_bytes);
        }
        units[u].numel = n;
        units[u].padded = padded;
        units[u].shard = padded / (size_t)world;
        units[u].full_offset = padded_total;
        units[u].shard_offset = shard_total;
        numel_total += n;  // <= padded_total, cannot overflow
        padded_total += padded;
        shard_total += units[u].shard;
    }
    p->num_units = num_units;
    p->world = world;
    p->rank = rank;
    p->elem_bytes = elem_bytes;
    p->align_elems = align_elems;
    p->units = units;
    p->numel_total = numel_total;
    p->padded_total = padded_total;
    p->shard_total = shard_total;
    return 0;
}

// The plan of this version: shards of a multiple of ZERO_PLAN_ALIGN_BYTES (see above).
static inline int zero_plan_init(ZeroPlan* p, const size_t* unit_numel, int num_units, int world, int rank,
                                 size_t elem_bytes) {
    return zero_plan_init_aligned(p, unit_numel, num_units, world, rank, elem_bytes, ZERO_PLAN_ALIGN_BYTES);
}

// The part of the element range [begin, end) of unit u (unpadded unit-local offsets,
// end <= numel) that lies in rank r's shard, as offsets local to that shard.
// Returns 1 and sets *lo < *hi when non-empty, 0 when empty. Invalid arguments (u or r out
// of range, begin > end, end > numel) return -1 with an zero_error line. *lo and *hi are
// set to 0 whenever the result is not 1, so a caller that tests the return for truth
// still walks an empty range; compare with 1 to tell empty from invalid.
// Used by the optimizer to apply per-tensor settings (weight decay) inside a shard: a
// tensor is a range of its unit, and the shard covers [r*shard, (r+1)*shard) of the unit.
static inline int zero_plan_shard_range(const ZeroPlan* p, int u, int r, size_t begin, size_t end,
                                        size_t* lo, size_t* hi) {
    *lo = 0;
    *hi = 0;
    if (p == NULL || p->units == NULL) { return zero_error("zero_plan_shard_range: plan is not initialized"); }
    if (u < 0 || u >= p->num_units) {
        return zero_error("zero_plan_shard_range: unit %d must be in [0, %d)", u, p->num_units);
    }
    if (r < 0 || r >= p->world) {
        return zero_error("zero_plan_shard_range: rank %d must be in [0, world %d)", r, p->world);
    }
    const ZeroUnit* unit = &p->units[u];
    if (begin > end || end > unit->numel) {
        return zero_error("zero_plan_shard_range: range [%zu, %zu) is not inside unit %d of numel %zu",
                          begin, end, u, unit->numel);
    }
    size_t shard_begin = (size_t)r * unit->shard;  // <= padded: no overflow
    size_t shard_end = shard_begin + unit->shard;
    size_t a = begin > shard_begin ? begin : shard_begin;
    size_t b = end < shard_end ? end : shard_end;
    if (a >= b) { return 0; }
    *lo = a - shard_begin;
    *hi = b - shard_begin;
    return 1;
}

// Rank r's part of the tensor [begin, end) of unit u (elements of the unit), located in
// both flat buffers: *full, its element offset in a full padded buffer; *shard, in rank r's
// shard buffer; *n, its length. What a sharded optimizer walks: the master, moments and
// reduced gradient at *shard, the compute copy at *full (stages 1-2) or *shard (stage 3).
// Returns 1 with a part, 0 when no element of the tensor is in the shard (all three 0),
// -1 for bad arguments (as zero_plan_shard_range).
static inline int zero_plan_tensor_part(const ZeroPlan* p, int u, int r, size_t begin, size_t end,
                                        size_t* full, size_t* shard, size_t* n) {
    size_t lo, hi;
    *full = *shard = *n = 0;
    int in = zero_plan_shard_range(p, u, r, begin, end, &lo, &hi);
    if (in != 1) { return in; }
    const ZeroUnit* unit = &p->units[u];
    *full = unit->full_offset + (size_t)r * unit->shard + lo;
    *shard = unit->shard_offset + lo;
    *n = hi - lo;
    return 1;
}

// Elements of rank r's shard of unit u that are real (not padding): 0..shard. The real
// elements always come first in a shard, since padding sits at the end of the unit.
// Returns 0 (and records an zero_error line) for an out-of-range u or r.
static inline size_t zero_plan_shard_numel(const ZeroPlan* p, int u, int r) {
    if (p == NULL || p->units == NULL || u < 0 || u >= p->num_units || r < 0 || r >= p->world) {
        zero_error("zero_plan_shard_numel: unit %d / rank %d out of range for the plan", u, r);
        return 0;
    }
    const ZeroUnit* unit = &p->units[u];
    size_t shard_begin = (size_t)r * unit->shard;
    if (shard_begin >= unit->numel) { return 0; }
    size_t rest = unit->numel - shard_begin;
    return rest < unit->shard ? rest : unit->shard;
}

#endif // ZERO3_PLAN_H
