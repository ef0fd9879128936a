/*
 Tests of zero3/reshard.h: an engine's checkpoint section rebuilt for another world size
 and stage.

 Every old rank's section is written here from the definition of the layouts (each array
 element i of unit u holds a value made of the array, the unit and i; padding holds 0),
 then the section of every rank of every other layout is rebuilt with zero_reshard_write
 and checked element by element, header included, against the same definition. Units of
 odd sizes (1, primes, around the padding quanta), worlds 1..5 on both sides, stages 0-3,
 the host layout (fp32) and the device layout (its compute copy in fp32 and in bf16), and
 sections of version 1 (shards padded to 64 bytes, zero3/checkpoint.h) rebuilt in the
 current padding. Then the refusals: files of another run, a truncated file, another
 engine or precision, a version unknown or mixed, a section whose header's version does
 not match its layout.

 build: make build/test_reshard
*/
#include <stdint.h>               // uint16_t, uint32_t
#include <string.h>               // strstr, memcmp
#include <unistd.h>               // ftruncate: a truncated state file
#include <criterion/criterion.h>  // Test, cr_assert*, cr_assert_fail
#include "zero3/reshard.h"        // the code under test
#include "zero3/util.h"     // zero_error, zero_errmsg, zero_now_ms

#define CHECK(cond, ...) do { if (!(cond)) { cr_assert_fail(__VA_ARGS__); } } while (0)

static const size_t units[] = {1, 17, 100, 31, 1021, 64, 257, 5000, 3};
#define NUM_UNITS ((int)(sizeof(units) / sizeof(units[0])))

// the value of element i of unit u of array a (0 for padding), as elem_bytes bytes
static void value(int a, int u, size_t i, size_t elem_bytes, void* out) {
    uint32_t v = i >= units[u] ? 0u : 0x3f800000u + (uint32_t)(a * 1000003 + u * 7919 + (int)i) * 64u;
    if (elem_bytes == 4) { memcpy(out, &v, 4); } else { uint16_t h = (uint16_t)(i >= units[u] ? 0 : 1 + (a * 31 + u * 7 + i) % 65000); memcpy(out, &h, 2); }
}

// writes rank `rank`'s section of the layout of `version` from the definition
static FILE* write_section_version(const char* engine, int stage, int world, int rank, int elem_bytes, int version) {
    ZeroStateLayout l;
    CHECK(zero_state_layout_init_version(&l, units, NUM_UNITS, engine, stage, world, rank, elem_bytes, version) == 0, "%s",
          zero_errmsg());
    FILE* fp = tmpfile();
    cr_assert_not_null(fp);
    ZeroStateHeader h = zero_state_layout_header(&l);
    cr_assert_eq(zero_state_write_header(fp, &h), 0);
    for (int a = 0; a < l.num_arrays; a++) {
        for (int u = 0; u < NUM_UNITS; u++) {
            const ZeroUnit* pu = &l.plan.units[u];
            size_t lo = l.arrays[a].sharded ? (size_t)rank * pu->shard : 0, hi = lo + (l.arrays[a].sharded ? pu->shard : pu->padded);
            for (size_t i = lo; i < hi; i++) {
                char b[4];
                value(a, u, i, l.arrays[a].elem_bytes, b);
                fwrite(b, l.arrays[a].elem_bytes, 1, fp);
            }
        }
    }
    zero_state_layout_free(&l);
    rewind(fp);
    return fp;
}

static FILE* write_section(const char* engine, int stage, int world, int rank, int elem_bytes) {
    return write_section_version(engine, stage, world, rank, elem_bytes, ZERO_STATE_VERSION);
}

// checks a rebuilt section against the definition for rank `rank` of the layout
static void check_section(FILE* fp, const char* engine, int stage, int world, int rank, int elem_bytes, const char* what) {
    ZeroStateLayout l;
    CHECK(zero_state_layout_init(&l, units, NUM_UNITS, engine, stage, world, rank, elem_bytes) == 0, "%s", zero_errmsg());
    rewind(fp);
    ZeroStateHeader want = zero_state_layout_header(&l), got;
    CHECK(fread(&got, sizeof(got), 1, fp) == 1 && memcmp(&want, &got, sizeof(got)) == 0, "%s: header", what);
    for (int a = 0; a < l.num_arrays; a++) {
        for (int u = 0; u < NUM_UNITS; u++) {
            const ZeroUnit* pu = &l.plan.units[u];
            size_t lo = l.arrays[a].sharded ? (size_t)rank * pu->shard : 0, hi = lo + (l.arrays[a].sharded ? pu->shard : pu->padded);
            for (size_t i = lo; i < hi; i++) {
                char b[4], e[4];
                value(a, u, i, l.arrays[a].elem_bytes, e);
                CHECK(fread(b, l.arrays[a].elem_bytes, 1, fp) == 1 && memcmp(b, e, l.arrays[a].elem_bytes) == 0,
                      "%s: array %d unit %d element %zu", what, a, u, i);
            }
        }
    }
    CHECK(fgetc(fp) == EOF, "%s: bytes after the payload", what);
    zero_state_layout_free(&l);
}

// every (world, stage) of `version` -> every (world, stage) of this version, of one engine
// and precision
static void all_layouts(const char* engine, int elem_bytes, int version) {
    for (int w0 = 1; w0 <= 5; w0++) {
        for (int s0 = 0; s0 <= 3; s0++) {
            FILE* fp[5];
            const char* names[5] = {"r0", "r1", "r2", "r3", "r4"};
            for (int q = 0; q < w0; q++) { fp[q] = write_section_version(engine, s0, w0, q, elem_bytes, version); }
            ZeroStateSource src;
            CHECK(zero_state_source_init(&src, fp, names, w0, units, NUM_UNITS) == 0, "%s", zero_errmsg());
            for (int w1 = 1; w1 <= 5; w1++) {
                for (int s1 = 0; s1 <= 3; s1++) {
                    for (int r = 0; r < w1; r++) {
                        ZeroStateLayout to;
                        CHECK(zero_state_layout_init(&to, units, NUM_UNITS, engine, s1, w1, r, elem_bytes) == 0, "%s", zero_errmsg());
                        FILE* out = tmpfile();
                        CHECK(zero_reshard_write(&src, &to, out, "out") == 0, "%s", zero_errmsg());
                        char what[128];
                        snprintf(what, sizeof(what), "%s %dB: version %d, %d ranks stage %d -> rank %d of %d stage %d", engine,
                                 elem_bytes, version, w0, s0, r, w1, s1);
                        check_section(out, engine, s1, w1, r, elem_bytes, what);
                        fclose(out);
                        zero_state_layout_free(&to);
                    }
                }
            }
            zero_state_source_free(&src);
            for (int q = 0; q < w0; q++) { fclose(fp[q]); }
        }
    }
}

Test(reshard, host_every_layout) { all_layouts("host", 4, ZERO_STATE_VERSION); }
Test(reshard, device_fp32_every_layout) { all_layouts("device", 4, ZERO_STATE_VERSION); }
Test(reshard, device_bf16_every_layout) { all_layouts("device", 2, ZERO_STATE_VERSION); }
// a checkpoint of 64-byte shards, from before the 256-byte plan, into every current layout
Test(reshard, version1_host_every_layout) { all_layouts("host", 4, 1); }
Test(reshard, version1_device_bf16_every_layout) { all_layouts("device", 2, 1); }

Test(reshard, version1_plan) {
    // the two plans differ for these units (so the version matters): 100 fp32 elements pad
    // to 144 in 64-byte shards at 3 ranks (a quantum of 3 x 16), to 192 in 256-byte ones (3 x 64)
    ZeroStateLayout v1, v2;
    cr_assert_eq(zero_state_layout_init_version(&v1, units, NUM_UNITS, "host", 1, 3, 0, 4, 1), 0);
    cr_assert_eq(zero_state_layout_init(&v2, units, NUM_UNITS, "host", 1, 3, 0, 4), 0);
    cr_assert_eq(v1.plan.units[2].padded, 144);
    cr_assert_eq(v2.plan.units[2].padded, 192);
    cr_assert_eq(zero_state_layout_header(&v1).version, 1);
    cr_assert_eq(zero_state_layout_header(&v2).version, ZERO_STATE_VERSION);
    cr_assert_neq(v1.plan.padded_total, v2.plan.padded_total);
    zero_state_layout_free(&v1);
    zero_state_layout_free(&v2);
    cr_assert_eq(zero_state_layout_init_version(&v1, units, NUM_UNITS, "host", 1, 3, 0, 4, 3), -1);
    cr_assert_not_null(strstr(zero_errmsg(), "version 3 is not one this build reads"), "%s", zero_errmsg());
}

Test(reshard, layout_sizes) {
    // the host's payload is params, m, v: the padded model at stage 0, the shard after
    ZeroStateLayout l;
    cr_assert_eq(zero_state_layout_init(&l, units, NUM_UNITS, "host", 0, 3, 1, 4), 0);
    cr_assert_eq(zero_state_payload_bytes(&l), 3 * l.plan.padded_total * 4);
    zero_state_layout_free(&l);
    cr_assert_eq(zero_state_layout_init(&l, units, NUM_UNITS, "device", 3, 3, 1, 2), 0);
    cr_assert_eq(zero_state_payload_bytes(&l), 3 * l.plan.shard_total * 4 + l.plan.shard_total * 2);
    zero_state_layout_free(&l);
    cr_assert_eq(zero_state_layout_init(&l, units, NUM_UNITS, "device", 2, 3, 1, 2), 0);
    cr_assert_eq(zero_state_payload_bytes(&l), 3 * l.plan.shard_total * 4 + l.plan.padded_total * 2);
    zero_state_layout_free(&l);
    cr_assert_eq(zero_state_layout_init(&l, units, NUM_UNITS, "cuda", 0, 1, 0, 4), -1);
    cr_assert_not_null(strstr(zero_errmsg(), "unknown engine layout 'cuda'"));
    cr_assert_eq(zero_state_layout_init(&l, units, NUM_UNITS, "host", 4, 1, 0, 4), -1);
    cr_assert_not_null(strstr(zero_errmsg(), "stage 4"));
    cr_assert_eq(zero_state_layout_init(&l, units, NUM_UNITS, "host", 0, 1, 0, 2), -1);
    cr_assert_not_null(strstr(zero_errmsg(), "host engine's state is fp32"));
}

Test(reshard, refusals) {
    const char* names[3] = {"a.bin", "b.bin", "c.bin"};
    ZeroStateSource src;
    // rank 1's file in rank 0's place
    FILE* fp[3] = {write_section("host", 1, 2, 1, 4), write_section("host", 1, 2, 1, 4), NULL};
    cr_assert_eq(zero_state_source_init(&src, fp, names, 2, units, NUM_UNITS), -1);
    cr_assert_not_null(strstr(zero_errmsg(), "a.bin: its engine section (version 2, host engine, stage 1, rank 1 of 2"), "%s", zero_errmsg());
    fclose(fp[0]);
    fclose(fp[1]);
    // files of two runs: another stage at rank 1
    fp[0] = write_section("host", 1, 2, 0, 4);
    fp[1] = write_section("host", 2, 2, 1, 4);
    cr_assert_eq(zero_state_source_init(&src, fp, names, 2, units, NUM_UNITS), -1);
    cr_assert_not_null(strstr(zero_errmsg(), "b.bin: its engine section (version 2, host engine, stage 2, rank 1 of 2"), "%s", zero_errmsg());
    fclose(fp[0]);
    fclose(fp[1]);
    // three files where the section says two ranks
    for (int q = 0; q < 3; q++) { fp[q] = write_section("host", 1, 2, q < 2 ? q : 1, 4); }
    cr_assert_eq(zero_state_source_init(&src, fp, names, 3, units, NUM_UNITS), -1);
    cr_assert_not_null(strstr(zero_errmsg(), "a.bin: the engine's section says 2 ranks; the checkpoint has 3 state files"), "%s", zero_errmsg());
    for (int q = 0; q < 3; q++) { fclose(fp[q]); }
    // not a section
    fp[0] = tmpfile();
    fputs("not a section", fp[0]);
    rewind(fp[0]);
    cr_assert_eq(zero_state_source_init(&src, fp, names, 1, units, NUM_UNITS), -1);
    cr_assert_not_null(strstr(zero_errmsg(), "a.bin: zero: the engine's state is missing or truncated"), "%s", zero_errmsg());
    fclose(fp[0]);
    // a truncated payload fails the copy, naming the offset
    fp[0] = write_section("host", 0, 1, 0, 4);
    cr_assert_eq(ftruncate(fileno(fp[0]), 1000), 0);
    cr_assert_eq(zero_state_source_init(&src, fp, names, 1, units, NUM_UNITS), 0);
    ZeroStateLayout to;
    cr_assert_eq(zero_state_layout_init(&to, units, NUM_UNITS, "host", 1, 2, 1, 4), 0);
    FILE* out = tmpfile();
    cr_assert_eq(zero_reshard_write(&src, &to, out, "out"), -1);
    cr_assert_not_null(strstr(zero_errmsg(), "the state file is truncated"), "%s", zero_errmsg());
    zero_state_layout_free(&to);
    // another engine, another precision
    cr_assert_eq(zero_state_layout_init(&to, units, NUM_UNITS, "device", 1, 2, 1, 4), 0);
    cr_assert_eq(zero_reshard_write(&src, &to, out, "out"), -1);
    cr_assert_not_null(strstr(zero_errmsg(), "cannot reshard a host engine's fp32 state"), "%s", zero_errmsg());
    zero_state_layout_free(&to);
    zero_state_source_free(&src);
    fclose(fp[0]);
    fp[0] = write_section("device", 3, 1, 0, 4);
    cr_assert_eq(zero_state_source_init(&src, fp, names, 1, units, NUM_UNITS), 0);
    cr_assert_eq(zero_state_layout_init(&to, units, NUM_UNITS, "device", 3, 2, 0, 2), 0);
    cr_assert_eq(zero_reshard_write(&src, &to, out, "out"), -1);
    cr_assert_not_null(strstr(zero_errmsg(), "device engine's bf16 state"), "%s", zero_errmsg());
    zero_state_layout_free(&to);
    zero_state_source_free(&src);
    fclose(fp[0]);
    fclose(out);
}

// a disk that fills while the rebuilt section is written (/dev/full: every write fails
// with ENOSPC) is named with the file and the reason; it was "writing the resharded state
// failed", and a failure stdio held back until the flush was not the reshard's at all
Test(reshard, full_disk_names_the_file) {
    const char* names[1] = {"a.bin"};
    ZeroStateSource src;
    FILE* fp[1] = {write_section("host", 0, 1, 0, 4)};
    cr_assert_eq(zero_state_source_init(&src, fp, names, 1, units, NUM_UNITS), 0, "%s", zero_errmsg());
    ZeroStateLayout to;
    cr_assert_eq(zero_state_layout_init(&to, units, NUM_UNITS, "host", 1, 2, 1, 4), 0);
    FILE* out = fopen("/dev/full", "wb");
    cr_assert_not_null(out);
    cr_assert_eq(zero_reshard_write(&src, &to, out, "ck/.reshard_00001_x"), -1);
    cr_assert_not_null(strstr(zero_errmsg(), "writing the resharded state to ck/.reshard_00001_x failed near byte "), "%s", zero_errmsg());
    cr_assert_not_null(strstr(zero_errmsg(), ": No space left on device"), "%s", zero_errmsg());
    fclose(out);
    zero_state_layout_free(&to);
    zero_state_source_free(&src);
    fclose(fp[0]);
}

// a section's version is the plan its payload was laid out by: a version unknown, ranks of
// two versions, or a version-1 payload under a version-2 header are refused, never misread
Test(reshard, version_refusals) {
    const char* names[2] = {"a.bin", "b.bin"};
    ZeroStateSource src;
    FILE* fp[2] = {write_section("host", 1, 2, 0, 4), write_section_version("host", 1, 2, 1, 4, 1)};
    cr_assert_eq(zero_state_source_init(&src, fp, names, 2, units, NUM_UNITS), -1);
    cr_assert_not_null(strstr(zero_errmsg(), "b.bin: its engine section (version 1, host engine, stage 1, rank 1 of 2"), "%s",
                       zero_errmsg());
    for (int q = 0; q < 2; q++) { fclose(fp[q]); }
    // the header's version rewritten: 3 (unknown), then 2 over a version-1 payload
    for (int v = 3; v >= 2; v--) {
        fp[0] = write_section_version("host", 1, 1, 0, 4, 1);
        ZeroStateHeader h;
        cr_assert_eq(fread(&h, sizeof(h), 1, fp[0]), 1);
        h.version = v;
        rewind(fp[0]);
        cr_assert_eq(fwrite(&h, sizeof(h), 1, fp[0]), 1);
        rewind(fp[0]);
        cr_assert_eq(zero_state_source_init(&src, fp, names, 1, units, NUM_UNITS), -1);
        const char* want = v == 3 ? "a.bin: zero: not an engine state of a known version (magic 20241125, version 3"
                                  : "a.bin: its engine section (version 2, host engine, stage 1, rank 0 of 1, fp32, 6494 parameters, ";
        cr_assert_not_null(strstr(zero_errmsg(), want), "%s", zero_errmsg());
        // and the engine's own load refuses it too (zero_state_read_header)
        rewind(fp[0]);
        ZeroStateLayout l;
        cr_assert_eq(zero_state_layout_init(&l, units, NUM_UNITS, "host", 1, 1, 0, 4), 0);
        ZeroStateHeader cur = zero_state_layout_header(&l);
        cr_assert_eq(zero_state_read_header(fp[0], &cur), -1);
        zero_state_layout_free(&l);
        fclose(fp[0]);
    }
    // a version-1 section read by an engine's own load: refused by its version
    fp[0] = write_section_version("host", 0, 1, 0, 4, 1);
    ZeroStateLayout l;
    cr_assert_eq(zero_state_layout_init(&l, units, NUM_UNITS, "host", 0, 1, 0, 4), 0);
    ZeroStateHeader cur = zero_state_layout_header(&l);
    cr_assert_eq(zero_state_read_header(fp[0], &cur), -1);
    cr_assert_not_null(strstr(zero_errmsg(), "the state is of version 1 (shards padded to 64 bytes)"), "%s", zero_errmsg());
    zero_state_layout_free(&l);
    fclose(fp[0]);
}
