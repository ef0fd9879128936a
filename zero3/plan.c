// zero3/plan.c: the implementation (the interface and its notes: zero3/plan.h)
#include "zero3/plan.h"  // this module's types and prototypes
#include <stdint.h>       // SIZE_MAX: overflow checks
#include <stdlib.h>       // calloc, free
#include <string.h>       // memset
#include "zero3/util.h"    // zero_error: the 0 / -1 error convention

void zero_plan_free(ZeroPlan* p) {
    if (p == NULL) { return; }
    free(p->units);
    memset(p, 0, sizeof(*p));
}

int zero_plan_init_aligned(ZeroPlan* p, const size_t* unit_numel, int num_units, int world, int rank,
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

int zero_plan_init(ZeroPlan* p, const size_t* unit_numel, int num_units, int world, int rank,
                                 size_t elem_bytes) {
    return zero_plan_init_aligned(p, unit_numel, num_units, world, rank, elem_bytes, ZERO_PLAN_ALIGN_BYTES);
}

int zero_plan_shard_range(const ZeroPlan* p, int u, int r, size_t begin, size_t end,
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

int zero_plan_tensor_part(const ZeroPlan* p, int u, int r, size_t begin, size_t end,
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

size_t zero_plan_shard_numel(const ZeroPlan* p, int u, int r) {
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
