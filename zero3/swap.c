// zero3/swap.c: the implementation, less the parameter region (zero3/swap_param.c); the
// interface and its notes: zero3/swap.h
#include "zero3/swap.h"     // first: _GNU_SOURCE; this module's types and prototypes
#include "zero3/swap_internal.h"  // the helpers swap.c and swap_param.c share, the requests' tags
#include <stdlib.h>         // calloc, malloc, free
#include <string.h>         // memset, memcpy, strerror
#include <errno.h>          // errno: a failed fwrite's reason
#include "zero3/util.h"     // zero_error, zero_now_ms
#include "zero3/adamw.h"    // grad_norm_squared: the gradient's squared norm
#include "zero3/cpu_adam.h" // cpu_adam_grad_add: a shard added into its accumulator, threaded

static void zero_swap_run_free(ZeroSwap* s);
static int zero_swap_groups(const ZeroSwap* s);

size_t zero_swap_align(size_t bytes) { return (bytes + NVME_ALIGN - 1) / NVME_ALIGN * NVME_ALIGN; }

size_t zero_swap_placement(const ZeroPlan* p, const int* persistent, double max_in_cpu, size_t elem_bytes,
                           int* on_host, size_t* file_bytes) {
    size_t host_elems = 0;
    for (int pass = 0; pass < 2; pass++) {  // persistent units first, then in order
        for (int u = 0; u < p->num_units; u++) {
            int pers = persistent != NULL && persistent[u];
            if (pers != (pass == 0) || on_host[u]) { continue; }
            if (pers || (double)(host_elems + p->units[u].shard) <= max_in_cpu) {
                on_host[u] = 1;
                host_elems += p->units[u].shard;
            }
        }
    }
    *file_bytes = 0;
    for (int u = 0; u < p->num_units; u++) {
        if (!on_host[u]) { *file_bytes += zero_swap_align(p->units[u].shard * elem_bytes); }
    }
    return host_elems;
}

size_t zero_swap_group_size(long long sub_group_size, size_t shard_total) {
    size_t g = ((size_t)sub_group_size + 1023) / 1024 * 1024;
    size_t whole = (shard_total + 1023) / 1024 * 1024, most = ((size_t)1 << 30) / sizeof(float);
    g = g < whole ? g : whole;
    return g < most ? g : most;
}

static size_t zero_swap_max_shard(const ZeroPlan* p) {
    size_t m = 0;
    for (int u = 0; u < p->num_units; u++) { m = p->units[u].shard > m ? p->units[u].shard : m; }
    return m;
}

// the most bytes a read of a shard of n elements covers: whole 4 KiB blocks, and in the
// master, where a shard starts inside a block, one more
static size_t zero_swap_param_span(const ZeroSwapOpen* o, size_t n) {
    return zero_swap_align(n * o->param_elem_bytes) + (o->param_in_master ? NVME_ALIGN : 0);
}

// the parts of zero_swap_size: the regions' bytes, the parameter region's, each staging
typedef struct { size_t region, group, bufs, grad_stage, param_file, param_stage; int nbufs; } ZeroSwapSizes;

static ZeroSwapSizes zero_swap_sizes(const ZeroSwapOpen* o) {
    ZeroSwapSizes z;
    memset(&z, 0, sizeof(z));
    const ZeroPlan* p = o->plan;
    size_t max_shard = zero_swap_max_shard(p);
    if (o->optimizer) {
        z.region = (p->shard_total + 1023) / 1024 * 1024 * sizeof(float);
        z.group = zero_swap_group_size(o->sub_group_size, p->shard_total);
        z.nbufs = o->buffer_count >= 2 ? o->buffer_count : 2;  // one read ahead while one updates
        z.bufs = (size_t)z.nbufs * ZERO_SWAP_REGIONS * z.group * sizeof(float);
        // a shard's span in G: its bytes widened to 4 KiB blocks at both ends
        z.grad_stage = zero_swap_align(max_shard * sizeof(float)) + NVME_ALIGN;
    }
    for (int u = 0; o->on_host != NULL && !o->param_in_master && u < p->num_units; u++) {
        if (!o->on_host[u]) { z.param_file += zero_swap_align(p->units[u].shard * o->param_elem_bytes); }
    }
    if (zero_swap_param_span_max(o) > 0) { z.param_stage = zero_swap_param_span(o, max_shard); }
    return z;
}

size_t zero_swap_param_span_max(const ZeroSwapOpen* o) {
    size_t m = 0;
    for (int u = 0; o->on_host != NULL && u < o->plan->num_units; u++) {
        size_t b = zero_swap_param_span(o, o->plan->units[u].shard);
        if (!o->on_host[u] && b > m) { m = b; }
    }
    return m;
}

void zero_swap_size(const ZeroSwapOpen* o, size_t* host_bytes, size_t* file_bytes) {
    ZeroSwapSizes z = zero_swap_sizes(o);
    *file_bytes = ZERO_SWAP_REGIONS * z.region + z.param_file;
    *host_bytes = z.bufs + z.grad_stage + 2 * z.param_stage + (*file_bytes > 0 ? nvme_sums_bytes(*file_bytes) : 0);
}

// the parameter region's tables: each NVMe unit's offset after the optimizer's regions
static int zero_swap_param_init(ZeroSwap* s, const ZeroSwapOpen* o, const ZeroSwapSizes* z) {
    int nu = s->plan->num_units;
    s->param_off = (size_t*)malloc((size_t)nu * sizeof(size_t));
    s->reading = (unsigned char*)calloc((size_t)nu, 1);
    s->staged_once = (unsigned char*)calloc((size_t)nu, 1);
    if (s->param_off == NULL || s->reading == NULL || s->staged_once == NULL) { return zero_error("zero swap: out of memory for the parameter tables"); }
    size_t off = ZERO_SWAP_REGIONS * z->region;
    for (int u = 0; u < nu; u++) {
        s->param_off[u] = (size_t)-1;
        if (o->on_host == NULL || o->on_host[u]) { continue; }
        if (s->in_master) {  // (the master: its place in P)
            s->param_off[u] = zero_swap_offset(s, ZERO_SWAP_P, s->plan->units[u].shard_offset);
            continue;
        }
        s->param_off[u] = off;
        off += zero_swap_align(s->plan->units[u].shard * s->param_elem);
    }
    if (z->param_stage == 0) { return 0; }
    s->param_stage_bytes = z->param_stage;
    for (int i = 0; i < 2; i++) {
        s->param_stage[i] = (char*)nvme_alloc(s->param_stage_bytes);  // huge pages: few segments per O_DIRECT request
        if (s->param_stage[i] == NULL) { return zero_error("zero swap: out of memory for the parameter staging buffers"); }
    }
    return 0;
}

int zero_swap_open(ZeroSwap* s, const ZeroSwapOpen* o) {
    memset(s, 0, sizeof(*s));
    s->plan = o->plan;
    s->segs = o->segs;
    s->nsegs = o->nsegs;
    s->optimizer = o->optimizer;
    s->param_elem = o->param_elem_bytes;
    s->staged_unit = s->stage_holds[0] = s->stage_holds[1] = -1;
    s->grad_last = (size_t)-1;
    if (o->param_in_master && (!o->optimizer || o->param_elem_bytes != sizeof(float))) {
        return zero_error("zero swap: parameters in the master need the optimizer's regions and fp32 elements");
    }
    s->in_master = o->param_in_master && o->on_host != NULL;
    ZeroSwapSizes z = zero_swap_sizes(o);
    zero_swap_size(o, &s->host_bytes, &s->file_bytes);
    if (s->file_bytes == 0) { return zero_error("zero swap: nothing to keep on NVMe"); }
    if (nvme_open(&s->nvme, o->dir, o->rank, s->file_bytes, NVME_QUEUE_DEPTH) != 0) { return -1; }
    s->is_open = 1;
    if (o->optimizer) {
        s->region = z.region;
        s->group = z.group;
        s->nbufs = z.nbufs;
        s->pipeline_read = o->pipeline_read;
        s->pipeline_write = o->pipeline_write;
        if (nvme_buffers_alloc(&s->nvme, s->nbufs * ZERO_SWAP_REGIONS, s->group * sizeof(float), &s->bufs) != 0) { goto fail; }
        s->grad_stage_bytes = z.grad_stage;
        s->grad_stage = (char*)nvme_alloc(s->grad_stage_bytes);
        s->grad_in_file = (unsigned char*)calloc((size_t)s->plan->num_units, 1);
        if (s->grad_stage == NULL || s->grad_in_file == NULL) {
            zero_error("zero swap: out of memory for the gradient staging buffer");
            goto fail;
        }
    }
    if (zero_swap_param_init(s, o, &z) != 0) { goto fail; }
    return 0;
fail:
    zero_swap_close(s);
    return -1;
}

void zero_swap_close(ZeroSwap* s) {
    if (s->is_open) { nvme_close(&s->nvme, 1); }  // waits for the kernel's requests; frees the step buffers
    free(s->grad_stage);  // after the close, which waits for a write still reading it
    free(s->param_stage[0]); free(s->param_stage[1]);
    free(s->grad_in_file); free(s->param_off); free(s->reading); free(s->staged_once);
    zero_swap_run_free(s);
    memset(s, 0, sizeof(*s));
    s->staged_unit = s->stage_holds[0] = s->stage_holds[1] = -1;
}

ZeroSwapCounters zero_swap_counters(const ZeroSwap* s) {
    ZeroSwapCounters c = s->c;
    c.wait_ms = s->is_open ? s->nvme.wait_ms : 0.0;
    return c;
}

// Records one completion for its owner. block: waits for one; else takes one only if
// there is one (returns 0 when none, 1 when one was recorded).
int zero_swap_reap(ZeroSwap* s, int block) {
    uint64_t tag = 0;  // no request of this module has tag 0
    int rc = block ? nvme_wait(&s->nvme, &tag) : nvme_poll(&s->nvme, &tag);
    if ((rc < 0 && tag == 0) || (!block && rc == 0)) { return rc; }  // (a failed request still names its owner)
    uint64_t kind = tag & SWAP_TAG_KIND, low = tag & ~SWAP_TAG_KIND;
    if (kind == SWAP_TAG_GRAD) {
        s->grad_pending = 0;
    } else if (kind == SWAP_TAG_READ) {
        s->reading[low] = 2;
    } else if (kind == SWAP_TAG_PUT && low < 2) {
        s->stage_writing[low] = 0;
    } else if (kind == SWAP_TAG_STEP && s->left != NULL) {
        s->left[2 * (low / 8) + ((low >> 2) & 1)]--;
        s->step_left--;
    } else {
        return zero_error("zero swap: a completion of unknown tag %llu", (unsigned long long)tag);
    }
    return rc < 0 ? -1 : 1;
}

size_t zero_swap_offset(const ZeroSwap* s, int region, size_t elem) {
    return (size_t)region * s->region + elem * sizeof(float);
}

// elements of group g, and the bytes to move for it (whole 4 KiB blocks: the regions are
// padded, so reading past the last real element stays inside the file)
static size_t zero_swap_group_elems(const ZeroSwap* s, int g) {
    size_t begin = (size_t)g * s->group, total = s->plan->shard_total;
    size_t end = begin + s->group < total ? begin + s->group : total;
    return end - begin;
}

static size_t zero_swap_group_bytes(const ZeroSwap* s, int g) { return zero_swap_align(zero_swap_group_elems(s, g) * sizeof(float)); }

static int zero_swap_groups(const ZeroSwap* s) { return (int)((s->plan->shard_total + s->group - 1) / s->group); }

// the first (last 0) or last (last 1) group holding some of unit u's shard (not empty)
static int zero_swap_unit_group(const ZeroSwap* s, int u, int last) {
    const ZeroUnit* pu = &s->plan->units[u];
    return (int)((pu->shard_offset + (last ? pu->shard - 1 : 0)) / s->group);
}

// buffer b's array for one region of a group: `group` floats
static float* zero_swap_buf(const ZeroSwap* s, int b, int region) { return (float*)s->bufs[(size_t)b * ZERO_SWAP_REGIONS + region]; }

// a synchronous read or write, counted
int zero_swap_io(ZeroSwap* s, int is_write, void* buf, size_t off, size_t bytes) {
    int rc = is_write ? nvme_write(&s->nvme, buf, off, bytes) : nvme_read(&s->nvme, buf, off, bytes);
    if (rc != 0) { return -1; }
    if (is_write) { s->c.write_bytes += (double)bytes; } else { s->c.read_bytes += (double)bytes; }
    return 0;
}

// ----------------------------------------------------------------------------
// the master

int zero_swap_master_begin(ZeroSwap* s) {
    if (!s->optimizer) { return zero_error("zero swap: no optimizer regions"); }
    if (zero_swap_master_write_begin(s, -1) != 0) { return -1; }
    s->master_group = 0;
    s->master_next = 0;
    memset(zero_swap_buf(s, 0, ZERO_SWAP_P), 0, s->group * sizeof(float));
    return 0;
}

// writes the master's group g from buffer 0 and clears the buffer for the next
static int zero_swap_master_put_group(ZeroSwap* s, int g) {
    float* buf = zero_swap_buf(s, 0, ZERO_SWAP_P);
    if (zero_swap_io(s, 1, buf, zero_swap_offset(s, ZERO_SWAP_P, (size_t)g * s->group), zero_swap_group_bytes(s, g)) != 0) { return -1; }
    memset(buf, 0, s->group * sizeof(float));
    return 0;
}

int zero_swap_master_unit(ZeroSwap* s, int u, const float* shard) {
    if (u < s->master_next || u >= s->plan->num_units) { return zero_error("zero swap: master unit %d out of order", u); }
    s->master_next = u + 1;
    const ZeroUnit* pu = &s->plan->units[u];
    float* buf = zero_swap_buf(s, 0, ZERO_SWAP_P);
    for (size_t i = 0; i < pu->shard;) {
        size_t pos = pu->shard_offset + i;
        for (; (size_t)(s->master_group + 1) * s->group <= pos; s->master_group++) {  // groups before pos are complete
            if (zero_swap_master_put_group(s, s->master_group) != 0) { return -1; }
        }
        size_t g0 = (size_t)s->master_group * s->group, n = g0 + s->group - pos;
        n = n < pu->shard - i ? n : pu->shard - i;
        memcpy(buf + (pos - g0), shard + i, n * sizeof(float));
        i += n;
    }
    return 0;
}

int zero_swap_master_end(ZeroSwap* s) {
    for (; s->master_group < zero_swap_groups(s); s->master_group++) {
        if (zero_swap_master_put_group(s, s->master_group) != 0) { return -1; }
    }
    return 0;
}

// The blocks [a, a + bytes) into the staging, for a read of k elements `skew` bytes into
// them, or before a write of them: a write of P, M or V reads only the blocks it shares
// with other elements, its first and last (one of G reads them all: the step's norm takes
// out the values it replaces). Filling P at start-up then reads two blocks a unit, not
// its whole span.
static int zero_swap_range_fetch(ZeroSwap* s, int region, int writing, size_t skew, size_t k, size_t a, size_t bytes) {
    if (!writing || region == ZERO_SWAP_G) { return zero_swap_io(s, 0, s->grad_stage, a, bytes); }
    size_t end = skew + k * sizeof(float);  // (from a)
    if (skew % NVME_ALIGN != 0 && zero_swap_io(s, 0, s->grad_stage, a, NVME_ALIGN) != 0) { return -1; }
    if (end % NVME_ALIGN != 0 && (bytes > NVME_ALIGN || skew == 0)) {  // (a one-block write read it above)
        return zero_swap_io(s, 0, s->grad_stage + bytes - NVME_ALIGN, a + bytes - NVME_ALIGN, NVME_ALIGN);
    }
    return 0;
}

// [begin, begin + n) of unit u's shard of a region, read into or written from buf, through
// the staging (grad_stage) in pieces it holds from the 4 KiB block the piece starts in to
// the one it ends in (a shard at once); a write reads the blocks it shares with other
// elements first
static int zero_swap_range_io(ZeroSwap* s, int region, int u, size_t begin, size_t n, float* buf, int writing) {
    if (region < ZERO_SWAP_P || region > ZERO_SWAP_G) { return zero_error("zero swap: no region %d", region); }
    if (begin + n > s->plan->units[u].shard) { return zero_error("zero swap: state range past unit %d's shard", u); }
    s->grad_last = (size_t)-1;  // the staging is reused here
    if (zero_swap_grad_settle(s) != 0) { return -1; }
    if (writing && region == ZERO_SWAP_P && zero_swap_master_write_begin(s, u) != 0) { return -1; }
    for (size_t done = 0; done < n;) {
        size_t lo = zero_swap_offset(s, region, s->plan->units[u].shard_offset + begin + done);
        size_t a = lo / NVME_ALIGN * NVME_ALIGN;
        size_t room = (s->grad_stage_bytes - (lo - a)) / sizeof(float);  // (the staging: 4 KiB-aligned, a block past a shard)
        size_t k = n - done < room ? n - done : room;
        size_t bytes = zero_swap_align(lo + k * sizeof(float)) - a;
        if (zero_swap_range_fetch(s, region, writing, lo - a, k, a, bytes) != 0) { return -1; }
        if (!writing) { memcpy(buf + done, s->grad_stage + (lo - a), k * sizeof(float)); }
        else {
            float* at = (float*)(s->grad_stage + (lo - a));
            if (region == ZERO_SWAP_G) { s->grad_sumsq += grad_norm_squared(buf + done, k) - grad_norm_squared(at, k); }  // (the step's norm)
            memcpy(at, buf + done, k * sizeof(float));
            if (zero_swap_io(s, 1, s->grad_stage, a, bytes) != 0) { return -1; }
        }
        done += k;
    }
    return 0;
}

int zero_swap_state_read(ZeroSwap* s, int region, int u, size_t begin, size_t n, float* out) {
    if (n > 0 && region == ZERO_SWAP_G && (s->grad_in_file == NULL || !s->grad_in_file[u])) {  // none added this step: stale bytes
        memset(out, 0, n * sizeof(float));
        return 0;
    }
    return n == 0 ? 0 : zero_swap_range_io(s, region, u, begin, n, out, 0);
}

int zero_swap_state_write(ZeroSwap* s, int region, int u, size_t begin, size_t n, const float* in) {
    if (n > 0 && region == ZERO_SWAP_G && (s->grad_in_file == NULL || !s->grad_in_file[u])) {
        return zero_error("zero swap: unit %d has no gradient this step to change", u);
    }
    return n == 0 ? 0 : zero_swap_range_io(s, region, u, begin, n, (float*)in, 1);
}

// ----------------------------------------------------------------------------
// the gradient

int zero_swap_grad_settle(ZeroSwap* s) {
    while (s->grad_pending) {
        if (zero_swap_reap(s, 1) < 0) { return -1; }
    }
    return 0;
}

double zero_swap_grad_sumsq(const ZeroSwap* s) { return s->grad_sumsq; }

void zero_swap_grad_clear(ZeroSwap* s) {
    if (s->grad_in_file != NULL) { memset(s->grad_in_file, 0, (size_t)s->plan->num_units); }  // the next add overwrites
    s->grad_sumsq = 0.0;
}

// whether a unit other than u with bytes in G's [x, y) was added this step
static int zero_swap_grad_others(const ZeroSwap* s, int u, size_t x, size_t y) {
    const ZeroPlan* p = s->plan;
    for (int w = u - 1; w >= 0 && zero_swap_offset(s, ZERO_SWAP_G, p->units[w].shard_offset + p->units[w].shard) > x; w--) {
        if (s->grad_in_file[w]) { return 1; }
    }
    for (int w = u + 1; w < p->num_units && zero_swap_offset(s, ZERO_SWAP_G, p->units[w].shard_offset) < y; w++) {
        if (s->grad_in_file[w]) { return 1; }
    }
    return 0;
}

// A first add's span [a, b) holds other units' bytes in [a, lo) and [hi, b). They are
// kept as the file has them only where a unit already added this step owns some: the
// others are last step's, which their own first add overwrites, so zeros do. A sync read
// waits behind whatever is queued (a parameter read ahead), so the last block, in the
// backward order often the block the previous add began with, is copied from the
// staging's start, where that add left it, rather than read.
static int zero_swap_grad_edges(ZeroSwap* s, int u, size_t a, size_t lo, size_t hi, size_t b) {
    char* stage = s->grad_stage;
    size_t last = b - NVME_ALIGN;
    int head = lo != a && zero_swap_grad_others(s, u, a, lo), tail = hi != b && zero_swap_grad_others(s, u, hi, b);
    if (last == a) {  // one block holds both edges: as the previous add left it, read once, or zeros
        if ((head || tail) && s->grad_last != a) { return zero_swap_io(s, 0, stage, a, NVME_ALIGN); }
        if (!head && !tail) { memset(stage, 0, NVME_ALIGN); }
        return 0;
    }
    if (tail && s->grad_last == last) {
        memmove(stage + (last - a), stage, NVME_ALIGN);
    } else if (tail && zero_swap_io(s, 0, stage + (last - a), last, NVME_ALIGN) != 0) {
        return -1;
    }
    if (head && zero_swap_io(s, 0, stage, a, NVME_ALIGN) != 0) { return -1; }  // (after the copy from there)
    if (!head) { memset(stage, 0, lo - a); }
    if (!tail) { memset(stage + (hi - a), 0, b - hi); }
    return 0;
}

// The shard's bytes [lo, hi) rarely fall on 4 KiB blocks, and O_DIRECT moves whole blocks,
// so the span written is [lo, hi) widened to blocks, its neighbours' parts as
// zero_swap_grad_edges finds them. One write is left in flight, overlapping the backward
// of the next units; the next add waits for it first, since two spans may share a block.
int zero_swap_grad_add(ZeroSwap* s, int u, const void* got, int got_bf16, int last_micro) {
    const ZeroUnit* pu = &s->plan->units[u];
    size_t lo = zero_swap_offset(s, ZERO_SWAP_G, pu->shard_offset), hi = lo + pu->shard * sizeof(float);
    size_t a = lo / NVME_ALIGN * NVME_ALIGN, b = zero_swap_align(hi);
    char* stage = s->grad_stage;
    float* acc = (float*)(stage + (lo - a));
    if (zero_swap_grad_settle(s) != 0) { return -1; }
    if (s->grad_in_file[u]) {
        if (zero_swap_io(s, 0, stage, a, b - a) != 0) { return -1; }
    } else if (zero_swap_grad_edges(s, u, a, lo, hi, b) != 0) {
        return -1;
    }
    cpu_adam_grad_add(acc, got, got_bf16, pu->shard, !s->grad_in_file[u]);
    if (last_micro) { s->grad_sumsq += grad_norm_squared(acc, pu->shard); }
    if (nvme_write_async(&s->nvme, stage, a, b - a, SWAP_TAG_GRAD) != 0) { return -1; }
    s->grad_pending = 1;
    s->grad_last = a;  // the staging's first block is the file's block a now
    s->c.write_bytes += (double)(b - a);
    s->grad_in_file[u] = 1;
    return 0;
}

// ----------------------------------------------------------------------------
// the step

// reads all four regions of group g, or writes back three (the gradient is consumed),
// with the buffer set the step gave it
static int zero_swap_submit(ZeroSwap* s, int g, int is_write) {
    int b = s->slot[g];
    size_t bytes = zero_swap_group_bytes(s, g);
    for (int r = ZERO_SWAP_P; r <= (is_write ? ZERO_SWAP_V : ZERO_SWAP_G); r++) {
        size_t off = zero_swap_offset(s, r, (size_t)g * s->group);
        uint64_t tag = SWAP_TAG_STEP | ((uint64_t)g * 8 + ((uint64_t)is_write << 2) + (uint64_t)r);
        int rc = is_write ? nvme_write_async(&s->nvme, zero_swap_buf(s, b, r), off, bytes, tag)
                          : nvme_read_async(&s->nvme, zero_swap_buf(s, b, r), off, bytes, tag);
        if (rc != 0) { return -1; }
        s->step_left++;
        if (is_write) { s->c.write_bytes += (double)bytes; } else { s->c.read_bytes += (double)bytes; }
    }
    return 0;
}

// waits until the requests of (group g, is_write) are done
int zero_swap_wait_group(ZeroSwap* s, int g, int is_write) {
    while (s->left[2 * g + is_write] > 0) {
        if (zero_swap_reap(s, 1) < 0) { return -1; }
    }
    return 0;
}

// the first segment that ends after element x (the segments are in shard-buffer order)
static int zero_swap_first_seg(const ZeroSwap* s, size_t x) {
    int lo = 0, hi = s->nsegs;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (s->segs[mid].end <= x) { lo = mid + 1; } else { hi = mid; }
    }
    return lo;
}

// AdamW over the segments' parts in group g, held in its buffer set
static int zero_swap_update_group(ZeroSwap* s, int g) {
    ZeroSwapRun* r = &s->run;
    int b = s->slot[g];
    size_t g0 = (size_t)g * s->group, g1 = g0 + zero_swap_group_elems(s, g);
    size_t elem = r->out_dtype == CPU_ADAM_BF16 ? 2 : 4;
    float* p = zero_swap_buf(s, b, ZERO_SWAP_P);
    float* m = zero_swap_buf(s, b, ZERO_SWAP_M);
    float* v = zero_swap_buf(s, b, ZERO_SWAP_V);
    const float* grad = zero_swap_buf(s, b, ZERO_SWAP_G);
    for (int i = zero_swap_first_seg(s, g0); i < s->nsegs && s->segs[i].begin < g1; i++) {
        ZeroSegment sg = s->segs[i];
        size_t lo = sg.begin > g0 ? sg.begin : g0, hi = sg.end < g1 ? sg.end : g1;
        r->hp.weight_decay = sg.decay ? r->weight_decay : 0.0f;
        char* dst = (char*)r->out(r->ctx, sg.unit);
        if (dst == NULL) { return -1; }
        dst += (sg.unit_lo + (lo - sg.begin)) * elem;
        if (cpu_adam_step(p + (lo - g0), grad + (lo - g0), CPU_ADAM_FP32, m + (lo - g0), v + (lo - g0), hi - lo, &r->hp, dst,
                          r->out_dtype) != 0) { return -1; }
        s->c.out_bytes += (double)((hi - lo) * elem);
    }
    return 0;
}

// Starts the reads the buffers allow: the group at position `pos` of the order (waiting
// for the writes of its set's last group if need be), and with pipeline_read the next
// ones whose sets are already free (never waiting for them: the caller computes meanwhile).
static int zero_swap_fill(ZeroSwap* s) {
    ZeroSwapRun* r = &s->run;
    for (int rc = 1; rc == 1;) {  // completions that came in meanwhile free buffer sets
        if ((rc = zero_swap_reap(s, 0)) < 0) { return -1; }
    }
    int last = s->pipeline_read ? r->pos + s->nbufs - 1 : r->pos;  // the furthest position read now
    for (; r->rd <= last && r->rd < r->ngroups; r->rd++) {
        int g = r->order[r->rd];
        if (r->rd >= s->nbufs) {  // the set's last group must be written back first
            int owner = r->order[r->rd - s->nbufs];
            if (r->rd > r->pos && s->left[2 * owner + 1] > 0) { break; }
            if (zero_swap_wait_group(s, owner, 1) != 0) { return -1; }
        }
        s->slot[g] = r->rd % s->nbufs;
        if (zero_swap_submit(s, g, 0) != 0) { return -1; }
    }
    return 0;
}

// updates the group at position pos of the order and starts its writes
static int zero_swap_step_one(ZeroSwap* s) {
    ZeroSwapRun* r = &s->run;
    int g = r->order[r->pos];
    if (zero_swap_fill(s) != 0 || zero_swap_wait_group(s, g, 0) != 0 || zero_swap_update_group(s, g) != 0) { return -1; }
    if (zero_swap_submit(s, g, 1) != 0) { return -1; }
    if (!s->pipeline_write && zero_swap_wait_group(s, g, 1) != 0) { return -1; }
    r->done[g] = 1;
    r->pos++;
    return zero_swap_fill(s);  // the next reads go out before the caller computes
}

static void zero_swap_run_free(ZeroSwap* s) {
    free(s->left); free(s->slot); free(s->run.order); free(s->run.done);
    s->left = s->slot = s->run.order = NULL;
    s->run.done = NULL;
    s->run.on = 0;
}

int zero_swap_step_begin(ZeroSwap* s, const CpuAdamParams* hp, float weight_decay, ZeroSwapOut out, CpuAdamDtype out_dtype,
                         ZeroSwapFlush flush, void* ctx, const int* first) {
    if (!s->optimizer) { return zero_error("zero swap: no optimizer regions"); }
    if (s->run.on) { return zero_error("zero swap: a step is already in progress"); }
    if (zero_swap_grad_settle(s) != 0 || zero_swap_master_write_begin(s, -1) != 0) { return -1; }
    double t0 = zero_now_ms(), wait0 = s->nvme.wait_ms;
    ZeroSwapRun* r = &s->run;
    int ng = zero_swap_groups(s);
    memset(r, 0, sizeof(*r));
    s->left = (int*)calloc(2 * (size_t)ng, sizeof(int));
    s->slot = (int*)calloc((size_t)ng, sizeof(int));
    r->order = (int*)calloc((size_t)ng, sizeof(int));
    r->done = (unsigned char*)calloc((size_t)ng, 1);
    if (s->left == NULL || s->slot == NULL || r->order == NULL || r->done == NULL) {
        zero_swap_run_free(s);
        return zero_error("zero swap: out of memory for the step");
    }
    r->on = 1;
    r->ngroups = ng;
    r->hp = *hp;
    r->weight_decay = weight_decay;
    r->out = out; r->out_dtype = out_dtype; r->flush = flush; r->ctx = ctx;
    s->step_left = 0;
    for (int g = 0; g < ng; g++) { s->left[2 * g] = ZERO_SWAP_REGIONS; s->left[2 * g + 1] = ZERO_SWAP_REGIONS - 1; }
    // the order: the groups holding a unit of `first` (in increasing order), then the rest
    const ZeroPlan* p = s->plan;
    for (int u = 0; first != NULL && u < p->num_units; u++) {
        if (!first[u] || p->units[u].shard == 0) { continue; }
        for (int g = zero_swap_unit_group(s, u, 0); g <= zero_swap_unit_group(s, u, 1); g++) { r->done[g] = 2; }
    }
    int n = 0;
    for (int pass = 2; pass >= 0; pass -= 2) {
        for (int g = 0; g < ng; g++) {
            if (r->done[g] == pass) { r->order[n++] = g; }
        }
    }
    memset(r->done, 0, (size_t)ng);
    if (s->staged_once != NULL) { memset(s->staged_once, 0, (size_t)p->num_units); }
    int rc = zero_swap_fill(s);
    s->c.step_ms += zero_now_ms() - t0;
    s->c.step_wait_ms += s->nvme.wait_ms - wait0;
    if (rc != 0) { zero_swap_run_free(s); }
    return rc;
}

int zero_swap_step_pending(const ZeroSwap* s) { return s->run.on; }

int zero_swap_step_through(ZeroSwap* s, int u) {
    if (!s->run.on) { return 0; }
    ZeroSwapRun* r = &s->run;
    double t0 = zero_now_ms(), wait0 = s->nvme.wait_ms;
    int rc = -1;
    if (u >= 0 && s->plan->units[u].shard > 0) {
        int g1 = zero_swap_unit_group(s, u, 1);
        for (int g = zero_swap_unit_group(s, u, 0); g <= g1; g++) {
            while (!r->done[g]) {
                if (zero_swap_step_one(s) != 0) { goto fail; }
            }
        }
        // u's shard is whole: a staged one starts its write, which readers wait for
        if (s->staged_unit == u && zero_swap_param_put_start(s) != 0) { goto fail; }
    } else if (u < 0) {
        while (r->pos < r->ngroups) {
            if (zero_swap_step_one(s) != 0) { goto fail; }
        }
        while (s->step_left > 0) {
            if (zero_swap_reap(s, 1) < 0) { goto fail; }
        }
        if (r->flush != NULL && r->flush(r->ctx) != 0) { goto fail; }
        zero_swap_run_free(s);
    }
    rc = 0;
fail:
    s->c.step_ms += zero_now_ms() - t0;
    s->c.step_wait_ms += s->nvme.wait_ms - wait0;
    if (rc != 0) { zero_swap_run_free(s); }  // (requests in flight are waited for by the close)
    return rc;
}

int zero_swap_step(ZeroSwap* s, CpuAdamParams* hp, float weight_decay, ZeroSwapOut out, CpuAdamDtype out_dtype,
                   ZeroSwapFlush flush, void* ctx) {
    if (zero_swap_step_begin(s, hp, weight_decay, out, out_dtype, flush, ctx, NULL) != 0) { return -1; }
    return zero_swap_step_through(s, -1);
}

// ----------------------------------------------------------------------------
// checkpoints

// a region to fp (to_swap 0) or from it (to_swap 1; fp NULL: zeros), group by group
// through buffer 0: checkpoints and init hold one group, never the region
static int zero_swap_stream(ZeroSwap* s, int region, FILE* fp, int to_swap) {
    if (!s->optimizer || region < ZERO_SWAP_P || region > ZERO_SWAP_V) { return zero_error("zero swap: no region %d to stream", region); }
    float* buf = zero_swap_buf(s, 0, ZERO_SWAP_P);
    if (to_swap && region == ZERO_SWAP_P && zero_swap_master_write_begin(s, -1) != 0) { return -1; }
    for (int g = 0; g < zero_swap_groups(s); g++) {
        size_t n = zero_swap_group_elems(s, g), bytes = zero_swap_group_bytes(s, g);
        size_t off = zero_swap_offset(s, region, (size_t)g * s->group);
        if (to_swap) {
            memset(buf, 0, bytes);
            if (fp != NULL && fread(buf, sizeof(float), n, fp) != n) { return zero_error("zero: the optimizer state is truncated"); }
            if (zero_swap_io(s, 1, buf, off, bytes) != 0) { return -1; }
        } else {
            if (zero_swap_io(s, 0, buf, off, bytes) != 0) { return -1; }
            if (fwrite(buf, sizeof(float), n, fp) != n) { return zero_error("zero: writing the optimizer state failed: %s", strerror(errno)); }
        }
    }
    return 0;
}

int zero_swap_region_save(ZeroSwap* s, int r, FILE* fp) { return zero_swap_stream(s, r, fp, 0); }

int zero_swap_region_load(ZeroSwap* s, int r, FILE* fp) { return zero_swap_stream(s, r, fp, 1); }
