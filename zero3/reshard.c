// zero3/reshard.c: the implementation (the interface and its notes: zero3/reshard.h)
#include "zero3/reshard.h"  // this module's types and prototypes
#include <stdlib.h>             // malloc, calloc, free
#include <string.h>             // memset, strcmp, strerror
#include <errno.h>              // errno: why a write of the resharded section failed
#include "zero3/util.h"         // zero_error

void zero_state_layout_free(ZeroStateLayout* l) { zero_plan_free(&l->plan); }

int zero_state_layout_init_version(ZeroStateLayout* l, const size_t* unit_numel, int num_units, const char* engine,
                                          int stage, int world, int rank, int elem_bytes, int version) {
    memset(l, 0, sizeof(*l));
    size_t align_bytes = zero_state_align_bytes(version);
    if (align_bytes == 0) { return zero_error("zero: engine state version %d is not one this build reads", version); }
    int host = strcmp(engine, "host") == 0, device = strcmp(engine, "device") == 0;
    if (!host && !device) { return zero_error("zero: unknown engine layout '%s' (expected host or device)", engine); }
    if (stage < 0 || stage > 3) { return zero_error("zero: ZeRO stage %d is not 0-3", stage); }
    if (elem_bytes != 2 && elem_bytes != 4) { return zero_error("zero: a compute copy of %d bytes per element is neither fp32 nor bf16", elem_bytes); }
    if (host && elem_bytes != 4) { return zero_error("zero: the host engine's state is fp32, not %d bytes per element", elem_bytes); }
    l->engine = host ? "host" : "device";
    l->version = version;
    l->stage = stage;
    for (int i = 0; i < 3; i++) { l->arrays[i] = (ZeroStateArray){stage > 0, sizeof(float)}; }
    l->num_arrays = 3;
    if (device) { l->arrays[l->num_arrays++] = (ZeroStateArray){stage == 3, (size_t)elem_bytes}; }
    return zero_plan_init_aligned(&l->plan, unit_numel, num_units, world, rank, (size_t)elem_bytes, align_bytes);
}

int zero_state_layout_init(ZeroStateLayout* l, const size_t* unit_numel, int num_units, const char* engine,
                                  int stage, int world, int rank, int elem_bytes) {
    return zero_state_layout_init_version(l, unit_numel, num_units, engine, stage, world, rank, elem_bytes, ZERO_STATE_VERSION);
}

static size_t zero_state_array_elems(const ZeroStateLayout* l, int i) {
    return l->arrays[i].sharded ? l->plan.shard_total : l->plan.padded_total;
}

// byte offset of array i in the payload
static size_t zero_state_array_offset(const ZeroStateLayout* l, int i) {
    size_t off = 0;
    for (int j = 0; j < i; j++) { off += zero_state_array_elems(l, j) * l->arrays[j].elem_bytes; }
    return off;
}

size_t zero_state_payload_bytes(const ZeroStateLayout* l) { return zero_state_array_offset(l, l->num_arrays); }

ZeroStateHeader zero_state_layout_header(const ZeroStateLayout* l) {
    ZeroStateHeader h = zero_state_header(l->engine, l->stage, &l->plan, (int)l->plan.elem_bytes, zero_state_payload_bytes(l));
    h.version = l->version;
    return h;
}

void zero_state_source_free(ZeroStateSource* s) {
    free(s->payload);
    zero_state_layout_free(&s->layout);
    memset(s, 0, sizeof(*s));
}

int zero_state_source_init(ZeroStateSource* s, FILE** fp, const char* const* names, int world,
                                  const size_t* unit_numel, int num_units) {
    memset(s, 0, sizeof(*s));
    s->world = world;
    s->fp = fp;
    s->payload = (off_t*)calloc((size_t)world, sizeof(off_t));
    if (s->payload == NULL) { return zero_error("zero: out of memory for %d state files", world); }
    for (int q = 0; q < world; q++) {
        ZeroStateHeader h;
        if (zero_state_read_raw(fp[q], &h) != 0) {
            char why[ZERO_ERRMSG_BYTES];
            snprintf(why, sizeof(why), "%s", zero_errmsg());
            zero_state_source_free(s);
            return zero_error("%s: %s", names[q], why);
        }
        s->payload[q] = ftello(fp[q]);
        if (q == 0) {
            s->head = h;
            if (zero_state_layout_init_version(&s->layout, unit_numel, num_units, h.engine, h.stage, h.world, 0, h.elem_bytes,
                                               h.version) != 0) {
                char why[ZERO_ERRMSG_BYTES];
                snprintf(why, sizeof(why), "%s", zero_errmsg());
                zero_state_source_free(s);
                return zero_error("%s: %s", names[q], why);
            }
            if (h.world != world) {
                zero_state_source_free(s);
                return zero_error("%s: the engine's section says %d ranks; the checkpoint has %d state files", names[q], h.world, world);
            }
        }
        ZeroStateHeader want = zero_state_layout_header(&s->layout);
        want.rank = q;
        if (h.version != want.version || strcmp(h.engine, want.engine) != 0 || h.stage != want.stage ||
            h.world != want.world || h.rank != q || h.elem_bytes != want.elem_bytes || h.numel_total != want.numel_total || h.padded_total != want.padded_total ||
            h.shard_total != want.shard_total || h.payload_bytes != want.payload_bytes) {
            zero_state_source_free(s);
            return zero_error("%s: its engine section (version %d, %s engine, stage %d, rank %d of %d, %s, %llu parameters, "
                              "%llu bytes) does not belong with rank 0's (version %d, %s engine, stage %d, %d ranks, %s, %llu "
                              "parameters, %llu bytes) for this model", names[q], h.version, h.engine, h.stage, h.rank, h.world,
                              zero_state_precision(h.elem_bytes), (unsigned long long)h.numel_total,
                              (unsigned long long)h.payload_bytes, want.version, want.engine, want.stage, want.world,
                              zero_state_precision(want.elem_bytes), (unsigned long long)want.numel_total,
                              (unsigned long long)want.payload_bytes);
        }
    }
    return 0;
}

// reads n bytes at offset `at` of fp
static int zero_reshard_pread(FILE* fp, off_t at, void* dst, size_t n, const char* what) {
    if (fseeko(fp, at, SEEK_SET) != 0 || fread(dst, 1, n, fp) != n) {
        return zero_error("zero: cannot read %zu bytes of %s at byte %lld: the state file is truncated", n, what, (long long)at);
    }
    return 0;
}

// writes n bytes at offset `at` of fp (a copy of a source file: the same offsets)
static int zero_reshard_pwrite(FILE* fp, off_t at, const void* src, size_t n, const char* what) {
    if (fseeko(fp, at, SEEK_SET) != 0 || fwrite(src, 1, n, fp) != n) {
        return zero_error("zero: cannot write %zu bytes of %s at byte %lld: %s", n, what, (long long)at, strerror(errno));
    }
    return 0;
}

// The elements [begin, end) of unit u of array i, in the files `fp` (the source's, or
// copies of them), read into or written from buf: rank 0's file for a full array, else
// the shards of the ranks that own them.
static int zero_state_range_io(const ZeroStateSource* s, FILE** fp, int writing, int i, int u, size_t begin, size_t end, char* buf) {
    const ZeroStateLayout* l = &s->layout;
    if (i < 0 || i >= l->num_arrays || u < 0 || u >= l->plan.num_units || begin > end || end > l->plan.units[u].numel) {
        return zero_error("zero_state_%s_range: array %d, unit %d, range [%zu, %zu) out of range", writing ? "write" : "read", i, u, begin, end);
    }
    const ZeroUnit* pu = &l->plan.units[u];
    size_t eb = l->arrays[i].elem_bytes;
    off_t arr = (off_t)zero_state_array_offset(l, i);
    while (begin < end) {
        size_t q = 0, at = pu->full_offset + begin, n = end - begin;  // a full array: all of it in rank 0's file
        if (l->arrays[i].sharded) {
            size_t in = begin % pu->shard;
            q = begin / pu->shard;
            at = pu->shard_offset + in;
            n = pu->shard - in < n ? pu->shard - in : n;
        }
        off_t where = s->payload[q] + arr + (off_t)(at * eb);
        const char* what = l->arrays[i].sharded ? "a shard" : "a full array";
        if ((writing ? zero_reshard_pwrite(fp[q], where, buf, n * eb, what) : zero_reshard_pread(fp[q], where, buf, n * eb, what)) != 0) {
            return -1;
        }
        buf += n * eb;
        begin += n;
    }
    return 0;
}

int zero_state_read_range(const ZeroStateSource* s, int i, int u, size_t begin, size_t end, void* dst) {
    return zero_state_range_io(s, s->fp, 0, i, u, begin, end, (char*)dst);
}

int zero_state_write_range(const ZeroStateSource* s, FILE** copies, int i, int u, size_t begin, size_t end, const void* src) {
    return zero_state_range_io(s, copies, 1, i, u, begin, end, (char*)src);
}

// the message of a failed write of the resharded section, errno's reason included: `at`
// bytes of its `total` had been handed to stdio (which may have written fewer)
static int zero_reshard_write_error(const char* out_name, size_t at, size_t total) {
    return zero_error("zero: writing the resharded state to %s failed near byte %zu of %zu: %s", out_name, at, total,
                      strerror(errno));
}

int zero_reshard_write(const ZeroStateSource* s, const ZeroStateLayout* to, FILE* out, const char* out_name) {
    const ZeroStateLayout* from = &s->layout;
    if (strcmp(from->engine, to->engine) != 0 || from->plan.elem_bytes != to->plan.elem_bytes ||
        from->plan.num_units != to->plan.num_units || from->plan.numel_total != to->plan.numel_total) {
        return zero_error("zero: cannot reshard a %s engine's %s state of %zu parameters into a %s engine's %s state of %zu "
                          "(resharding keeps the backend and the precision)", from->engine,
                          zero_state_precision((int)from->plan.elem_bytes), from->plan.numel_total, to->engine,
                          zero_state_precision((int)to->plan.elem_bytes), to->plan.numel_total);
    }
    ZeroStateHeader h = zero_state_layout_header(to);
    size_t total = sizeof(h) + zero_state_payload_bytes(to), done = sizeof(h);
    if (zero_state_write_header(out, &h) != 0) { return zero_error("%s: %s", out_name, zero_errmsg()); }
    char* buf = (char*)malloc(ZERO_RESHARD_CHUNK_BYTES);
    if (buf == NULL) { return zero_error("zero: out of memory for the reshard buffer"); }
    int rc = 0;
    for (int i = 0; i < to->num_arrays && rc == 0; i++) {
        size_t eb = to->arrays[i].elem_bytes, chunk = ZERO_RESHARD_CHUNK_BYTES / eb;
        for (int u = 0; u < to->plan.num_units && rc == 0; u++) {
            const ZeroUnit* pu = &to->plan.units[u];
            // the unit's elements this array holds: all of it, or this rank's shard
            size_t lo = to->arrays[i].sharded ? (size_t)to->plan.rank * pu->shard : 0;
            size_t hi = lo + (to->arrays[i].sharded ? pu->shard : pu->padded);
            for (size_t a = lo; a < hi && rc == 0; a += chunk) {
                size_t b = a + chunk < hi ? a + chunk : hi;
                size_t real = a >= pu->numel ? 0 : (b < pu->numel ? b : pu->numel) - a;
                memset(buf + real * eb, 0, (b - a - real) * eb);  // padding
                if (real > 0) { rc = zero_state_read_range(s, i, u, a, a + real, buf); }
                if (rc == 0 && fwrite(buf, eb, b - a, out) != b - a) { rc = zero_reshard_write_error(out_name, done, total); }
                done += (b - a) * eb;
            }
        }
    }
    free(buf);
    // what stdio still holds reaches the file here: a full disk may show up only now
    if (rc == 0 && fflush(out) != 0) { rc = zero_reshard_write_error(out_name, total, total); }
    return rc;
}
