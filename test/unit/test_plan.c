/*
 Tests of zero3/plan.h, the ZeRO partition plan.

 The invariants are checked for every world size 1..1024 on a mix of unit sizes (1,
 primes, sizes that divide the padding quantum and sizes that do not, a GPT-2 d12-like
 unit list, and 1e11-element units to catch overflow), for every elem_bytes: among them
 that every unit's full_offset and shard_offset, and every rank's shard inside the full
 buffer, start on 256 bytes (what keeps a tensor equally aligned for cuBLASLt at every
 stage, zero3/plan.h). The version-1 plan of old checkpoints (64-byte shards) keeps its
 own invariants and numbers. A few plans are compared against numbers computed by hand,
 and every error path is checked for -1 and a message naming the bad value.

 Millions of conditions are checked, so they go through CHECK, which only calls into
 Criterion when one fails: a passing cr_assert costs far more than the test itself.

 build: make build/test_plan (links the library, build/lib/opt/lib.a)
*/
#include <stdio.h>                // snprintf: the expected messages
#include <stdint.h>               // SIZE_MAX, uint64_t
#include <string.h>               // strstr, memset
#include <criterion/criterion.h>  // Test, cr_assert*, cr_assert_fail
#include "zero3/plan.h"           // the code under test
#include "zero3/util.h"     // zero_error, zero_errmsg, zero_now_ms

#define CHECK(cond, ...) do { if (!(cond)) { cr_assert_fail(__VA_ARGS__); } } while (0)

// ----------------------------------------------------------------------------
// unit sizes

// small sizes: 1, primes, multiples of the 16/32/64/128/256-element alignment quanta and their neighbours
static const size_t small_units[] = {
    1, 2, 3, 7, 13, 15, 16, 17, 31, 32, 48, 63, 64, 65, 97, 127, 128, 1000, 1021, 1024, 4096,
    4099, 65521, 65536, 65537, 999983, 1048576, 255, 256, 257, 383, 384, 385,
};

// GPT-2 d48 (C = 1600, Vp 50304): a block is 61481600 bytes in bf16, an odd multiple of 128,
// so with 64-byte shards every other block starts 128 bytes past a 256-byte boundary
static const size_t gpt2_d48_units[] = {
    50304 * 1600 + 1024 * 1600,
    30740800, 30740800, 30740800, 30740800, 30740800, 30740800,
    3200,
};

// GPT-2 d12 with the vocabulary padded to 50304: embedding (wte + wpe), 12 blocks, final layernorm
static const size_t gpt2_units[] = {
    38633472 + 786432,
    7087872, 7087872, 7087872, 7087872, 7087872, 7087872,
    7087872, 7087872, 7087872, 7087872, 7087872, 7087872,
    1536,
};

// huge units: the padded sizes are far beyond 32 bits but well inside size_t
static const size_t huge_units[] = {
    (size_t)100000000000ULL, 1, (size_t)100000000007ULL, (size_t)100000000000ULL * 3,
};

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const size_t all_elem_bytes[] = {1, 2, 4, 8};

// ----------------------------------------------------------------------------
// invariant checks

// a small deterministic generator for tensor boundaries, so failures reproduce
static uint64_t lcg_next(uint64_t* s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 17;
}

// Walks the ranks in order over the tensor range [begin, end) of unit u and checks that the
// pieces, mapped back to unit coordinates, are in bounds, in order and contiguous, and cover
// [begin, end) exactly once (also checked by summing lengths).
static void check_cover(const ZeroPlan* p, int u, size_t begin, size_t end) {
    const ZeroUnit* unit = &p->units[u];
    size_t next = begin, total = 0;
    for (int r = 0; r < p->world; r++) {
        size_t lo = 12345, hi = 54321;
        int rc = zero_plan_shard_range(p, u, r, begin, end, &lo, &hi);
        CHECK(rc == 0 || rc == 1, "world %d unit %d rank %d [%zu,%zu): rc %d", p->world, u, r, begin, end, rc);
        if (rc == 0) {
            CHECK(lo == 0 && hi == 0, "world %d unit %d rank %d: empty range left lo %zu hi %zu", p->world, u, r, lo, hi);
            continue;
        }
        CHECK(lo < hi && hi <= unit->shard, "world %d unit %d rank %d [%zu,%zu): lo %zu hi %zu shard %zu",
              p->world, u, r, begin, end, lo, hi, unit->shard);
        size_t a = (size_t)r * unit->shard + lo;
        CHECK(a == next, "world %d unit %d rank %d [%zu,%zu): piece starts at %zu, expected %zu",
              p->world, u, r, begin, end, a, next);
        next = (size_t)r * unit->shard + hi;
        total += hi - lo;
    }
    CHECK(next == end, "world %d unit %d [%zu,%zu): pieces end at %zu", p->world, u, begin, end, next);
    CHECK(total == end - begin, "world %d unit %d [%zu,%zu): pieces sum to %zu", p->world, u, begin, end, total);
}

// Cuts unit u into ntensors back-to-back tensors (as a block's weights are laid out) and
// checks that, on every rank, the tensors' pieces tile the shard's real elements
// [0, shard_numel) in order: what the optimizer relies on to apply weight decay per tensor.
static void check_tensor_tiling(const ZeroPlan* p, int u, int ntensors, uint64_t seed) {
    const ZeroUnit* unit = &p->units[u];
    size_t cuts[17];
    cuts[0] = 0;
    cuts[ntensors] = unit->numel;
    for (int i = 1; i < ntensors; i++) {
        size_t c = (size_t)(lcg_next(&seed) % (unit->numel + 1));
        cuts[i] = c < cuts[i - 1] ? cuts[i - 1] : c;  // keep them sorted; empty tensors are allowed
    }
    cuts[ntensors] = unit->numel;
    for (int r = 0; r < p->world; r++) {
        size_t next = 0;
        for (int t = 0; t < ntensors; t++) {
            size_t lo, hi;
            if (zero_plan_shard_range(p, u, r, cuts[t], cuts[t + 1], &lo, &hi) == 1) {
                CHECK(lo == next, "world %d unit %d rank %d tensor %d: starts at %zu, expected %zu",
                      p->world, u, r, t, lo, next);
                next = hi;
            }
        }
        size_t real = zero_plan_shard_numel(p, u, r);
        CHECK(next == real, "world %d unit %d rank %d: tensors cover %zu of %zu real elements",
              p->world, u, r, next, real);
    }
}

// Every invariant of a plan built from numel[0..n) for world and elem_bytes, with shards
// of a multiple of align_bytes. with_ranges: also walk tensor ranges over all ranks (the
// costly part).
static void check_plan_aligned(const size_t* numel, int n, int world, size_t elem_bytes, int with_ranges, size_t align_bytes) {
    ZeroPlan p;
    int rank = world - 1 - (world / 3);  // some rank other than 0 most of the time
    int rc = zero_plan_init_aligned(&p, numel, n, world, rank, elem_bytes, align_bytes);
    CHECK(rc == 0, "world %d elem_bytes %zu: init failed: %s", world, elem_bytes, zero_errmsg());
    CHECK(p.num_units == n && p.world == world && p.rank == rank && p.elem_bytes == elem_bytes,
          "world %d: header fields wrong", world);
    CHECK(p.align_elems == align_bytes / elem_bytes, "world %d: align_elems %zu", world, p.align_elems);

    size_t quantum = (size_t)world * p.align_elems;
    size_t numel_sum = 0, padded_sum = 0, shard_sum = 0;
    for (int u = 0; u < n; u++) {
        const ZeroUnit* unit = &p.units[u];
        CHECK(unit->numel == numel[u], "world %d unit %d: numel %zu", world, u, unit->numel);
        // padded: a multiple of world * align_elems, >= numel, and the smallest such
        CHECK(unit->padded % quantum == 0, "world %d unit %d: padded %zu not a multiple of %zu",
              world, u, unit->padded, quantum);
        CHECK(unit->padded >= unit->numel, "world %d unit %d: padded %zu < numel %zu", world, u, unit->padded, unit->numel);
        CHECK(unit->padded - unit->numel < quantum, "world %d unit %d: padded %zu not minimal for numel %zu",
              world, u, unit->padded, unit->numel);
        // equal shards, each a multiple of align_bytes
        CHECK(unit->shard * (size_t)world == unit->padded, "world %d unit %d: shard %zu * world != padded %zu",
              world, u, unit->shard, unit->padded);
        CHECK((unit->shard * elem_bytes) % align_bytes == 0, "world %d unit %d: shard %zu elements of %zu bytes not a "
              "%zu-byte multiple", world, u, unit->shard, elem_bytes, align_bytes);
        // offsets are prefix sums, so aligned too
        CHECK(unit->full_offset == padded_sum, "world %d unit %d: full_offset %zu, expected %zu",
              world, u, unit->full_offset, padded_sum);
        CHECK(unit->shard_offset == shard_sum, "world %d unit %d: shard_offset %zu, expected %zu",
              world, u, unit->shard_offset, shard_sum);
        CHECK((unit->full_offset * elem_bytes) % align_bytes == 0 && (unit->shard_offset * elem_bytes) % align_bytes == 0,
              "world %d unit %d: offsets %zu, %zu of %zu-byte elements not %zu-byte aligned", world, u, unit->full_offset,
              unit->shard_offset, elem_bytes, align_bytes);
        numel_sum += unit->numel;
        padded_sum += unit->padded;
        shard_sum += unit->shard;

        // real elements per rank: full shards, then at most one partial one, then empty ones, summing to numel
        size_t real_sum = 0;
        for (int r = 0; r < world; r++) {
            size_t real = zero_plan_shard_numel(&p, u, r);
            CHECK(real <= unit->shard, "world %d unit %d rank %d: shard_numel %zu > shard %zu", world, u, r, real, unit->shard);
            size_t expect_full = (size_t)r * unit->shard + unit->shard <= unit->numel;
            if (expect_full) { CHECK(real == unit->shard, "world %d unit %d rank %d: shard should be all real", world, u, r); }
            real_sum += real;
        }
        CHECK(real_sum == unit->numel, "world %d unit %d: shard_numel sums to %zu, numel %zu", world, u, real_sum, unit->numel);

        if (with_ranges) {
            size_t m = unit->numel;
            check_cover(&p, u, 0, m);              // the whole unit
            check_cover(&p, u, 0, 1);              // first element
            check_cover(&p, u, m - 1, m);          // last element
            check_cover(&p, u, m / 3, m - m / 3);  // a middle slice
            check_cover(&p, u, m / 2, m / 2);      // empty: no rank gets anything
            if (unit->shard < m) {                 // exactly one shard, and a range straddling a boundary
                check_cover(&p, u, unit->shard, m < 2 * unit->shard ? m : 2 * unit->shard);
                check_cover(&p, u, unit->shard - 1, unit->shard + 1);
            }
            uint64_t seed = (uint64_t)world * 1000003u + (uint64_t)u;
            for (int k = 0; k < 3; k++) {          // random ranges
                size_t a = (size_t)(lcg_next(&seed) % (m + 1)), b = (size_t)(lcg_next(&seed) % (m + 1));
                check_cover(&p, u, a < b ? a : b, a < b ? b : a);
            }
            check_tensor_tiling(&p, u, 1 + (int)(lcg_next(&seed) % 16), seed);
        }
    }
    CHECK(p.numel_total == numel_sum, "world %d: numel_total %zu, expected %zu", world, p.numel_total, numel_sum);
    CHECK(p.padded_total == padded_sum, "world %d: padded_total %zu, expected %zu", world, p.padded_total, padded_sum);
    CHECK(p.shard_total == shard_sum, "world %d: shard_total %zu, expected %zu", world, p.shard_total, shard_sum);
    CHECK(p.shard_total * (size_t)world == p.padded_total, "world %d: shard_total * world != padded_total", world);
    zero_plan_free(&p);
}

// the plan of this version: 256-byte shards
static void check_plan(const size_t* numel, int n, int world, size_t elem_bytes, int with_ranges) {
    check_plan_aligned(numel, n, world, elem_bytes, with_ranges, ZERO_PLAN_ALIGN_BYTES);
}

// ----------------------------------------------------------------------------
// sweeps over every world 1..1024

Test(plan, small_units_every_world) {
    for (int e = 0; e < COUNT(all_elem_bytes); e++) {
        for (int world = 1; world <= 1024; world++) {
            check_plan(small_units, COUNT(small_units), world, all_elem_bytes[e], 1);
        }
    }
}

Test(plan, gpt2_d12_every_world) {
    for (int e = 0; e < COUNT(all_elem_bytes); e++) {
        for (int world = 1; world <= 1024; world++) {
            check_plan(gpt2_units, COUNT(gpt2_units), world, all_elem_bytes[e], 1);
        }
    }
}

Test(plan, huge_units_every_world) {
    for (int e = 0; e < COUNT(all_elem_bytes); e++) {
        for (int world = 1; world <= 1024; world++) {
            check_plan(huge_units, COUNT(huge_units), world, all_elem_bytes[e], 1);
        }
    }
}

// each unit alone, so that its offsets start at 0 and its padding is judged by itself
Test(plan, single_units_every_world) {
    for (int i = 0; i < COUNT(small_units); i++) {
        for (int world = 1; world <= 1024; world++) {
            check_plan(&small_units[i], 1, world, 4, 1);
            check_plan(&small_units[i], 1, world, 2, 1);
        }
    }
}

// the version-1 plan (64-byte shards, the checkpoints of before): the same invariants at 64
Test(plan, version1_plan_every_world) {
    for (int e = 0; e < COUNT(all_elem_bytes); e++) {
        for (int world = 1; world <= 1024; world++) {
            check_plan_aligned(small_units, COUNT(small_units), world, all_elem_bytes[e], 1, 64);
            check_plan_aligned(gpt2_units, COUNT(gpt2_units), world, all_elem_bytes[e], 0, 64);
        }
    }
}

// What cuBLASLt is handed (llmc/matmul.cuh): a unit's tensors from a flat buffer of every
// unit at stages 0-2 (full_offset; a rank's shard at full_offset + r * shard, stages 1-2's
// in-place gathers) or of the unit alone at stage 3 (offset 0), the shards from the shard
// buffer (shard_offset). Every one of these on 256 bytes, for GPT-2 d12 and d48 and odd
// units, 1-byte to 8-byte elements and worlds from 1 to 1000: then a tensor's alignment is
// its offset's inside its unit at every stage. The version-1 plan of d48 in bf16 has a
// block 128 bytes past a boundary, the case this rules out.
Test(plan, every_offset_on_256_bytes) {
    const int worlds[] = {1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 64, 100, 1000};
    const struct { const size_t* numel; int n; } models[] = {
        {gpt2_units, COUNT(gpt2_units)}, {gpt2_d48_units, COUNT(gpt2_d48_units)}, {small_units, COUNT(small_units)},
    };
    for (int m = 0; m < COUNT(models); m++) {
        for (int e = 0; e < COUNT(all_elem_bytes); e++) {
            for (int w = 0; w < COUNT(worlds); w++) {
                size_t eb = all_elem_bytes[e];
                ZeroPlan p;
                CHECK(zero_plan_init(&p, models[m].numel, models[m].n, worlds[w], 0, eb) == 0, "%s", zero_errmsg());
                for (int u = 0; u < p.num_units; u++) {
                    const ZeroUnit* unit = &p.units[u];
                    CHECK(unit->full_offset * eb % 256 == 0 && unit->shard_offset * eb % 256 == 0 && unit->shard * eb % 256 == 0,
                          "model %d, %zu-byte elements, world %d, unit %d: full_offset %zu, shard_offset %zu, shard %zu",
                          m, eb, worlds[w], u, unit->full_offset, unit->shard_offset, unit->shard);
                    for (int r = 0; r < worlds[w]; r++) {
                        size_t at = (unit->full_offset + (size_t)r * unit->shard) * eb;
                        CHECK(at % 256 == 0, "model %d, world %d, unit %d: rank %d's shard at byte %zu", m, worlds[w], u, r, at);
                    }
                }
                zero_plan_free(&p);
            }
        }
    }
    ZeroPlan p;
    cr_assert_eq(zero_plan_init_aligned(&p, gpt2_d48_units, COUNT(gpt2_d48_units), 1, 0, 2, 64), 0, "%s", zero_errmsg());
    cr_assert_eq(p.units[2].full_offset * 2 % 256, 128, "d48, 64-byte plan: block 1 at byte %zu", p.units[2].full_offset * 2);
    zero_plan_free(&p);
}

// the largest world accepted, checked without the per-rank range walk's 1M-rank loops per range
Test(plan, max_world) {
    ZeroPlan p;
    size_t n[] = {1, (size_t)100000000000ULL};
    cr_assert_eq(zero_plan_init(&p, n, 2, ZERO_PLAN_MAX_WORLD, ZERO_PLAN_MAX_WORLD - 1, 4), 0, "%s", zero_errmsg());
    // 1: quantum 2^20 * 64 = 2^26, so padded 2^26 and shard 64
    cr_assert_eq(p.units[0].padded, (size_t)1 << 26);
    cr_assert_eq(p.units[0].shard, 64);
    // 1e11 / 2^26 = 1490.12... -> 1491 blocks: 1491 * 67108864 = 100059316224
    cr_assert_eq(p.units[1].padded, (size_t)100059316224ULL);
    cr_assert_eq(p.units[1].shard, (size_t)100059316224ULL / ZERO_PLAN_MAX_WORLD);
    cr_assert_eq(zero_plan_shard_numel(&p, 0, 0), 1);
    cr_assert_eq(zero_plan_shard_numel(&p, 0, 1), 0);
    zero_plan_free(&p);
}

// ----------------------------------------------------------------------------
// values computed by hand

// units {1000, 1, 1536} on 3 ranks in fp32, seen from rank 1, against numbers computed by hand
typedef struct {
    size_t align_bytes;      // the plan's shard alignment
    size_t unit[3][4];       // per unit: padded, shard, full_offset, shard_offset
    size_t padded_total, shard_total;
    size_t real[3];          // real elements of unit 0's shard on ranks 0, 1, 2
    size_t tensor_end;       // the tensor [300, tensor_end) of unit 0 ...
    size_t part[3][2];       // ... is [lo, hi) of rank r's shard
} HandPlan;

static void check_hand_plan(const HandPlan* h) {
    ZeroPlan p;
    size_t n[] = {1000, 1, 1536};
    cr_assert_eq(zero_plan_init_aligned(&p, n, 3, 3, 1, 4, h->align_bytes), 0, "%s", zero_errmsg());
    cr_assert_eq(p.align_elems, h->align_bytes / 4);
    for (int u = 0; u < 3; u++) {
        cr_assert_eq(p.units[u].padded, h->unit[u][0], "unit %d padded %zu", u, p.units[u].padded);
        cr_assert_eq(p.units[u].shard, h->unit[u][1], "unit %d shard %zu", u, p.units[u].shard);
        cr_assert_eq(p.units[u].full_offset, h->unit[u][2], "unit %d full_offset", u);
        cr_assert_eq(p.units[u].shard_offset, h->unit[u][3], "unit %d shard_offset", u);
    }
    cr_assert_eq(p.numel_total, 2537);
    cr_assert_eq(p.padded_total, h->padded_total);
    cr_assert_eq(p.shard_total, h->shard_total);
    for (int r = 0; r < 3; r++) { cr_assert_eq(zero_plan_shard_numel(&p, 0, r), h->real[r], "rank %d", r); }
    cr_assert_eq(zero_plan_shard_numel(&p, 1, 0), 1);
    cr_assert_eq(zero_plan_shard_numel(&p, 1, 1), 0);
    size_t lo, hi, s0 = h->unit[0][1];
    for (int r = 0; r < 3; r++) {
        cr_assert_eq(zero_plan_shard_range(&p, 0, r, 300, h->tensor_end, &lo, &hi), 1);
        cr_assert(lo == h->part[r][0] && hi == h->part[r][1], "rank %d: [%zu, %zu)", r, lo, hi);
    }
    // a tensor entirely inside rank 0's shard is empty on the others
    cr_assert_eq(zero_plan_shard_range(&p, 0, 1, 0, s0, &lo, &hi), 0);
    cr_assert_eq(zero_plan_shard_range(&p, 0, 0, 0, s0, &lo, &hi), 1);
    cr_assert(lo == 0 && hi == s0);
    zero_plan_free(&p);
}

Test(plan, hand_computed_fp32_world3) {
    /*
     units {1000, 1, 1536}, world 3, fp32: align_elems = 256/4 = 64, quantum = 3*64 = 192
       1000: ceil(1000/192) = 6 -> padded 1152, shard 384, full_offset 0,    shard_offset 0
          1: ceil(1/192)    = 1 -> padded  192, shard  64, full_offset 1152, shard_offset 384
       1536: 1536/192       = 8 -> padded 1536, shard 512, full_offset 1344, shard_offset 448
     totals: numel 2537, padded 2880, shard 960 (= 2880 / 3)
     real elements of unit 0: rank 0: 384, rank 1: 384, rank 2: 1000 - 768 = 232
     tensor [300, 800) of unit 0: rank 0 [300, 384), rank 1 [0, 384) (unit 384..768), rank 2 [0, 32) (unit 768..800)
     The version-1 plan (64-byte shards): align_elems = 64/4 = 16, quantum = 3*16 = 48
       1000 -> padded 1008, shard 336, offsets 0, 0; 1 -> 48, 16, 1008, 336; 1536 -> 1536, 512, 1056, 352
     totals padded 2592, shard 864; real elements of unit 0: 336, 336, 328;
     tensor [300, 700): rank 0 [300, 336), rank 1 [0, 336), rank 2 [0, 28)
    */
    HandPlan h = {256, {{1152, 384, 0, 0}, {192, 64, 1152, 384}, {1536, 512, 1344, 448}}, 2880, 960, {384, 384, 232},
                  800, {{300, 384}, {0, 384}, {0, 32}}};
    check_hand_plan(&h);
    HandPlan v1 = {64, {{1008, 336, 0, 0}, {48, 16, 1008, 336}, {1536, 512, 1056, 352}}, 2592, 864, {336, 336, 328},
                   700, {{300, 336}, {0, 336}, {0, 28}}};
    check_hand_plan(&v1);
}

Test(plan, hand_computed_bf16_vs_fp32) {
    /*
     numel 1000, world 3:
       fp32: align 64, quantum 192: ceil(1000/192) = 6 -> padded 1152, shard 384 (384*4 = 1536 = 6*256 bytes)
       bf16: align 128, quantum 384: ceil(1000/384) = 3 -> padded 1152, shard 384 (384*2 = 768 = 3*256 bytes)
       fp8-like (1 byte): align 256, quantum 768: ceil(1000/768) = 2 -> padded 1536, shard 512
       fp64: align 32, quantum 96: ceil(1000/96) = 11 -> padded 1056, shard 352 (352*8 = 2816 = 11*256 bytes)
     numel 1536, world 5 (final layernorm of d12):
       fp32: quantum 320: ceil(1536/320) = 5 -> padded 1600, shard 320; rank 4 holds 1536 - 1280 = 256 real
    */
    ZeroPlan p;
    size_t n = 1000;
    size_t eb[4] = {4, 2, 1, 8}, align[4] = {64, 128, 256, 32}, padded[4] = {1152, 1152, 1536, 1056}, shard[4] = {384, 384, 512, 352};
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(zero_plan_init(&p, &n, 1, 3, 0, eb[i]), 0, "%s", zero_errmsg());
        cr_assert_eq(p.align_elems, align[i], "elem_bytes %zu: align %zu", eb[i], p.align_elems);
        cr_assert_eq(p.units[0].padded, padded[i], "elem_bytes %zu: padded %zu", eb[i], p.units[0].padded);
        cr_assert_eq(p.units[0].shard, shard[i], "elem_bytes %zu: shard %zu", eb[i], p.units[0].shard);
        zero_plan_free(&p);
    }
    size_t ln = 1536;
    cr_assert_eq(zero_plan_init(&p, &ln, 1, 5, 2, 4), 0, "%s", zero_errmsg());
    cr_assert_eq(p.units[0].padded, 1600);
    cr_assert_eq(p.units[0].shard, 320);
    cr_assert_eq(zero_plan_shard_numel(&p, 0, 3), 320);
    cr_assert_eq(zero_plan_shard_numel(&p, 0, 4), 256);
    zero_plan_free(&p);
}

Test(plan, gpt2_d12_world8_fp32) {
    /*
     quantum 8*64 = 512 (256-byte shards):
       embedding 39419904 = 512 * 76992              -> no padding, shard 4927488
       block      7087872 = 512 * 13843.5 -> 7088128 -> 256 elements of padding, shard 886016
       lnf           1536 = 512 * 3                  -> shard 192
     padded_total = 39419904 + 12*7088128 + 1536 = 124478976 (3072 elements, 12 KiB, over
     numel), shard_total = 15559872. The version-1 plan (quantum 8*16 = 128) pads nothing:
     block shard 885984, padded_total 124475904, shard_total 15559488.
    */
    ZeroPlan p;
    cr_assert_eq(zero_plan_init(&p, gpt2_units, COUNT(gpt2_units), 8, 0, 4), 0, "%s", zero_errmsg());
    cr_assert_eq(p.units[0].shard, 4927488);
    cr_assert_eq(p.units[1].padded, 7088128);
    cr_assert_eq(p.units[1].shard, 886016);
    cr_assert_eq(p.units[13].shard, 192);
    cr_assert_eq(p.numel_total, 124475904);
    cr_assert_eq(p.padded_total, 124478976);
    cr_assert_eq(p.shard_total, 15559872);
    cr_assert_eq(p.units[13].shard_offset, 4927488 + 12 * 886016);
    zero_plan_free(&p);
    cr_assert_eq(zero_plan_init_aligned(&p, gpt2_units, COUNT(gpt2_units), 8, 0, 4, 64), 0, "%s", zero_errmsg());
    cr_assert_eq(p.units[1].shard, 885984);
    cr_assert_eq(p.padded_total, 124475904);
    cr_assert_eq(p.shard_total, 15559488);
    cr_assert_eq(p.units[13].shard_offset, 4927488 + 12 * 885984);
    zero_plan_free(&p);
}

// ----------------------------------------------------------------------------
// errors: -1, a message naming the bad value, and a plan zero_plan_free accepts

// init must fail, leave the plan zeroed, and name every string in want
static void expect_init_error(const size_t* numel, int n, int world, int rank, size_t eb, const char* want1,
                              const char* want2) {
    ZeroPlan p;
    memset(&p, 0xAB, sizeof(p));  // garbage in, so we see that a failure zeroes it
    zero_error("(no message)");
    int rc = zero_plan_init(&p, numel, n, world, rank, eb);
    cr_assert_eq(rc, -1, "world %d rank %d n %d eb %zu: expected -1, got %d", world, rank, n, eb, rc);
    const char* msg = zero_errmsg();
    cr_assert(strstr(msg, want1) != NULL, "message '%s' does not name '%s'", msg, want1);
    if (want2 != NULL) { cr_assert(strstr(msg, want2) != NULL, "message '%s' does not name '%s'", msg, want2); }
    cr_assert_null(p.units);
    cr_assert_eq(p.num_units, 0);
    zero_plan_free(&p);
    zero_plan_free(&p);
}

Test(plan, errors_world) {
    size_t n[] = {1000};
    expect_init_error(n, 1, 0, 0, 4, "world 0", NULL);
    expect_init_error(n, 1, -1, 0, 4, "world -1", NULL);
    expect_init_error(n, 1, 1048577, 0, 4, "world 1048577", NULL);
}

Test(plan, errors_rank) {
    size_t n[] = {1000};
    expect_init_error(n, 1, 4, 4, 4, "rank 4", NULL);
    expect_init_error(n, 1, 4, -1, 4, "rank -1", NULL);
    expect_init_error(n, 1, 1, 1, 4, "rank 1", NULL);
}

Test(plan, errors_num_units) {
    size_t n[] = {1000};
    expect_init_error(n, 0, 2, 0, 4, "num_units 0", NULL);
    expect_init_error(n, -3, 2, 0, 4, "num_units -3", NULL);
    expect_init_error(NULL, 1, 2, 0, 4, "unit_numel", "NULL");
}

Test(plan, errors_zero_numel) {
    size_t n[] = {1000, 5, 0, 7};
    expect_init_error(n, 4, 2, 0, 4, "unit 2", "numel 0");
    size_t first[] = {0};
    expect_init_error(first, 1, 1, 0, 2, "unit 0", "numel 0");
}

Test(plan, errors_elem_bytes) {
    size_t n[] = {1000};
    expect_init_error(n, 1, 2, 0, 0, "elem_bytes 0", NULL);
    expect_init_error(n, 1, 2, 0, 3, "elem_bytes 3", NULL);
    expect_init_error(n, 1, 2, 0, 16, "elem_bytes 16", NULL);
}

Test(plan, errors_align_bytes) {
    size_t n[] = {1000};
    size_t bad[] = {0, 32, 100, 512};
    for (int i = 0; i < 4; i++) {
        ZeroPlan p;
        memset(&p, 0xAB, sizeof(p));
        cr_assert_eq(zero_plan_init_aligned(&p, n, 1, 2, 0, 4, bad[i]), -1);
        char want[64];
        snprintf(want, sizeof(want), "alignment %zu bytes must be 64, 128 or 256", bad[i]);
        cr_assert_not_null(strstr(zero_errmsg(), want), "%s", zero_errmsg());
        cr_assert_null(p.units);
        zero_plan_free(&p);
    }
}

Test(plan, errors_overflow) {
    char want[64];
    // one unit whose padding overflows: SIZE_MAX is odd, so it needs rounding up past SIZE_MAX
    size_t big[] = {SIZE_MAX};
    snprintf(want, sizeof(want), "numel %zu", (size_t)SIZE_MAX);
    expect_init_error(big, 1, 1, 0, 1, want, "overflow");
    size_t big2[] = {SIZE_MAX - 10};
    snprintf(want, sizeof(want), "numel %zu", (size_t)SIZE_MAX - 10);
    expect_init_error(big2, 1, 7, 3, 4, want, "overflow");
    // each unit fits but the total does not: 2 * 2^63 elements
    size_t half[] = {1, SIZE_MAX / 2, SIZE_MAX / 2};
    snprintf(want, sizeof(want), "numel %zu", (size_t)SIZE_MAX / 2);
    expect_init_error(half, 3, 1, 0, 1, "unit 2", want);
    // the elements fit but not their bytes: 2^62 elements of 8 bytes
    size_t wide[] = {(size_t)1 << 62};
    snprintf(want, sizeof(want), "numel %zu", (size_t)1 << 62);
    expect_init_error(wide, 1, 1, 0, 8, "unit 0", want);
    // the same count of 2-byte elements is fine: 2^63 bytes
    ZeroPlan p;
    cr_assert_eq(zero_plan_init(&p, wide, 1, 1, 0, 2), 0, "%s", zero_errmsg());
    cr_assert_eq(p.padded_total, (size_t)1 << 62);
    zero_plan_free(&p);
}

Test(plan, errors_shard_range) {
    ZeroPlan p;
    size_t n[] = {1000, 50};
    cr_assert_eq(zero_plan_init(&p, n, 2, 3, 0, 4), 0, "%s", zero_errmsg());
    size_t lo = 7, hi = 7;
    cr_assert_eq(zero_plan_shard_range(&p, 2, 0, 0, 1, &lo, &hi), -1);
    cr_assert(strstr(zero_errmsg(), "unit 2") != NULL, "%s", zero_errmsg());
    cr_assert(lo == 0 && hi == 0);
    cr_assert_eq(zero_plan_shard_range(&p, -1, 0, 0, 1, &lo, &hi), -1);
    cr_assert(strstr(zero_errmsg(), "unit -1") != NULL, "%s", zero_errmsg());
    cr_assert_eq(zero_plan_shard_range(&p, 0, 3, 0, 1, &lo, &hi), -1);
    cr_assert(strstr(zero_errmsg(), "rank 3") != NULL, "%s", zero_errmsg());
    cr_assert_eq(zero_plan_shard_range(&p, 1, 0, 0, 51, &lo, &hi), -1);
    cr_assert(strstr(zero_errmsg(), "[0, 51)") != NULL, "%s", zero_errmsg());
    cr_assert_eq(zero_plan_shard_range(&p, 0, 0, 10, 5, &lo, &hi), -1);
    cr_assert(strstr(zero_errmsg(), "[10, 5)") != NULL, "%s", zero_errmsg());
    // the padding is not part of any tensor: a range ending in it is invalid
    cr_assert_eq(zero_plan_shard_range(&p, 1, 0, 0, p.units[1].padded, &lo, &hi), -1);
    // out-of-range shard_numel gives 0 and a message
    cr_assert_eq(zero_plan_shard_numel(&p, 5, 0), 0);
    cr_assert(strstr(zero_errmsg(), "unit 5") != NULL, "%s", zero_errmsg());
    cr_assert_eq(zero_plan_shard_numel(&p, 0, 3), 0);
    cr_assert(strstr(zero_errmsg(), "rank 3") != NULL, "%s", zero_errmsg());
    zero_plan_free(&p);
}

// zero_plan_tensor_part: over the ranks, the parts of a tensor cover it exactly once, in
// rank order; each sits where the full buffer has those elements (unit start + position
// in the unit) and at the same place inside the rank's shard block of the shard buffer.
// Worlds 1..8, units of odd sizes, tensors cut at random (empty ones too).
Test(plan, tensor_parts_in_both_buffers) {
    uint64_t seed = 12345;
    size_t numel[5] = {7, 1000, 4099, 64, 50257};
    for (int world = 1; world <= 8; world++) {
        for (size_t eb = 2; eb <= 4; eb += 2) {
            ZeroPlan plans[8];
            for (int r = 0; r < world; r++) {
                CHECK(zero_plan_init(&plans[r], numel, 5, world, r, eb) == 0, "init: %s", zero_errmsg());
            }
            for (int u = 0; u < 5; u++) {
                const ZeroUnit* unit = &plans[0].units[u];
                size_t cuts[6] = {0, 0, 0, 0, 0, unit->numel};
                for (int i = 1; i < 5; i++) {
                    size_t c = (size_t)(lcg_next(&seed) % (unit->numel + 1));
                    cuts[i] = c < cuts[i - 1] ? cuts[i - 1] : c;
                }
                for (int t = 0; t < 5; t++) {
                    size_t next = cuts[t];  // the tensor's next element (unit-relative) a part must start at
                    for (int r = 0; r < world; r++) {
                        size_t full, sh, n;
                        int in = zero_plan_tensor_part(&plans[r], u, r, cuts[t], cuts[t + 1], &full, &sh, &n);
                        CHECK(in == 0 || in == 1, "world %d unit %d rank %d: rc %d", world, u, r, in);
                        if (in == 0) { CHECK(full == 0 && sh == 0 && n == 0, "empty part not zeroed"); continue; }
                        size_t pos = full - unit->full_offset;  // unit-relative
                        CHECK(n > 0 && pos == next, "world %d unit %d tensor %d rank %d: part at %zu, expected %zu",
                              world, u, t, r, pos, next);
                        CHECK(pos >= (size_t)r * unit->shard && pos + n <= (size_t)(r + 1) * unit->shard,
                              "world %d unit %d rank %d: part [%zu,%zu) outside the rank's block", world, u, r, pos, pos + n);
                        CHECK(sh - unit->shard_offset == pos - (size_t)r * unit->shard,
                              "world %d unit %d rank %d: shard offset %zu for unit position %zu", world, u, r, sh, pos);
                        CHECK(sh + n <= plans[r].shard_total, "world %d: part past the shard buffer", world);
                        next = pos + n;
                    }
                    CHECK(next == cuts[t + 1], "world %d unit %d tensor %d: parts end at %zu of %zu",
                          world, u, t, next, cuts[t + 1]);
                }
            }
            for (int r = 0; r < world; r++) { zero_plan_free(&plans[r]); }
        }
    }
}

Test(plan, free_is_safe) {
    ZeroPlan p;
    memset(&p, 0, sizeof(p));
    zero_plan_free(&p);  // zeroed
    zero_plan_free(NULL);
    size_t n[] = {10};
    cr_assert_eq(zero_plan_init(&p, n, 1, 2, 1, 4), 0, "%s", zero_errmsg());
    zero_plan_free(&p);
    cr_assert_null(p.units);
    zero_plan_free(&p);  // twice
    // a plan that was valid, then failed a re-init, must still free cleanly (the caller freed it first)
    cr_assert_eq(zero_plan_init(&p, n, 1, 0, 0, 4), -1);
    zero_plan_free(&p);
    zero_plan_free(&p);
}
