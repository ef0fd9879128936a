/*
 Tests of zero3/swap.h, the NVMe tier both engines use, for what the host engine's
 offload suite (test/e2e/test_offload.sh: the same losses and bytes as without offload)
 does not reach: a parameter region of 2-byte elements (the device engine's bf16 compute
 copy), reads ahead of a unit's shard waited for later and among other requests in
 flight, reads served by a staging buffer that holds the unit, a step writing bf16
 through the engine's callback (with pipeline_read and pipeline_write on and off, and
 begun and carried through unit by unit in an order that splits a unit, as the host
 engine's deferred update does), the parameters in the master (the host engine's fp32
 shards read from P, no copy of their own), the master by ranges, and the refusals (units
 out of order, waits without a read, a second step begun, a read before its update).

 The plan is rank 1 of 2 over three units, so that shards start at odd places of the
 regions; the file goes to a fresh directory under /tmp (buffered I/O if the filesystem
 refuses O_DIRECT: the swapper falls back by itself).
*/
#include "zero3/swap.h"           // first: _GNU_SOURCE; the module under test
#include <criterion/criterion.h>  // Test, cr_assert*
#include <stdint.h>               // uint16_t
#include <stdlib.h>               // mkdtemp, aligned_alloc
#include <string.h>               // memset, memcmp
#include <unistd.h>               // rmdir
#include "zero3/util.h"           // zero_errmsg
#include "zero3/cpu_adam.h"       // cpu_adam_step: the step's reference

static char g_dir[256];
static ZeroPlan g_plan;
static const size_t g_numel[3] = {1000, 3000, 5000};

static void setup(void) {
    snprintf(g_dir, sizeof(g_dir), "/tmp/test_swap.XXXXXX");
    cr_assert_not_null(mkdtemp(g_dir));
    cr_assert_eq(zero_plan_init(&g_plan, g_numel, 3, 2, 1, sizeof(float)), 0, "%s", zero_errmsg());
}

static void teardown(void) {
    zero_plan_free(&g_plan);
    rmdir(g_dir);  // the swap file went at zero_swap_close
}

TestSuite(swap, .init = setup, .fini = teardown);

// units 1 and 2 in the parameter region, unit 0 on the host
static const int g_on_host[3] = {1, 0, 0};

static ZeroSwapOpen params_only(size_t elem_bytes) {
    ZeroSwapOpen o;
    memset(&o, 0, sizeof(o));
    o.plan = &g_plan;
    o.dir = g_dir;
    o.rank = 1;
    o.on_host = g_on_host;
    o.param_elem_bytes = elem_bytes;
    return o;
}

static void* abuf(size_t bytes) {
    void* p = aligned_alloc(NVME_ALIGN, bytes);
    cr_assert_not_null(p);
    memset(p, 0xAB, bytes);
    return p;
}

// a pattern of 2-byte elements that differs by unit and by seed
static void fill16(uint16_t* x, size_t n, int unit, int seed) {
    for (size_t i = 0; i < n; i++) { x[i] = (uint16_t)(i * 7 + (size_t)unit * 1000 + (size_t)seed * 31); }
}

Test(swap, parameter_region_in_two_byte_elements) {
    ZeroSwap s2, s4;
    ZeroSwapOpen o2 = params_only(2), o4 = params_only(4);
    cr_assert_eq(zero_swap_open(&s4, &o4), 0, "%s", zero_errmsg());
    size_t bytes4 = s4.file_bytes;
    zero_swap_close(&s4);
    cr_assert_eq(zero_swap_open(&s2, &o2), 0, "%s", zero_errmsg());
    // the region holds units 1 and 2 only, each 4 KiB-aligned in 2-byte elements
    size_t want = zero_swap_align(g_plan.units[1].shard * 2) + zero_swap_align(g_plan.units[2].shard * 2);
    cr_assert_eq(s2.file_bytes, want);
    cr_assert_eq(zero_swap_param_bytes(&s2, 2), zero_swap_align(g_plan.units[2].shard * 2));
    cr_assert(!zero_swap_param_on_nvme(&s2, 0) && zero_swap_param_on_nvme(&s2, 1) && zero_swap_param_on_nvme(&s2, 2));
    size_t host = 0, file = 0;
    zero_swap_size(&o2, &host, &file);
    cr_assert_eq(file, s2.file_bytes);
    cr_assert_eq(host, s2.host_bytes);
    cr_assert_gt(bytes4, s2.file_bytes, "4-byte elements take more of the file");
    // a unit on the host is refused
    uint16_t* a = (uint16_t*)calloc(g_plan.units[2].shard, 2);
    uint16_t* b = (uint16_t*)calloc(g_plan.units[2].shard, 2);
    cr_assert_eq(zero_swap_param_read(&s2, 0, b, 1), -1);
    zero_swap_close(&s2);
    // Each unit's shard comes back from the file as written, its neighbours untouched:
    // all three units in the region, written in the order 2, 1, 0, so that the two
    // staging buffers hold 1 and 0 and the reads of 2 and 1 go to the disk (0's does not)
    const int none_on_host[3] = {0, 0, 0};
    o2.on_host = none_on_host;
    cr_assert_eq(zero_swap_open(&s2, &o2), 0, "%s", zero_errmsg());
    for (int u = 2; u >= 0; u--) {
        fill16(a, g_plan.units[u].shard, u, 1);
        cr_assert_eq(zero_swap_param_write(&s2, u, a), 0, "%s", zero_errmsg());
    }
    for (int u = 2; u >= 0; u--) {
        size_t n = g_plan.units[u].shard;
        cr_assert_eq(zero_swap_param_read(&s2, u, b, n), 0, "%s", zero_errmsg());
        fill16(a, n, u, 1);
        cr_assert_eq(memcmp(a, b, n * 2), 0, "unit %d changed by its neighbours' writes", u);
    }
    ZeroSwapCounters c = zero_swap_counters(&s2);
    size_t bytes[3];
    for (int u = 0; u < 3; u++) { bytes[u] = zero_swap_align(g_plan.units[u].shard * 2); }
    cr_assert_eq(c.write_bytes, (double)(bytes[0] + bytes[1] + bytes[2]));
    cr_assert_eq(c.read_bytes, (double)(bytes[1] + bytes[2]), "units 2 and 1 from the disk");
    cr_assert_eq(c.stage_hit_bytes, (double)bytes[0], "unit 0 from its staging buffer");
    free(a);
    free(b);
    zero_swap_close(&s2);
}

Test(swap, reads_ahead_complete_in_any_order) {
    ZeroSwap s;
    ZeroSwapOpen o = params_only(2);
    cr_assert_eq(zero_swap_open(&s, &o), 0, "%s", zero_errmsg());
    size_t n1 = g_plan.units[1].shard, n2 = g_plan.units[2].shard;
    uint16_t* want = (uint16_t*)calloc(n2, 2);
    for (int u = 1; u <= 2; u++) {
        fill16(want, g_plan.units[u].shard, u, 5);
        cr_assert_eq(zero_swap_param_write(&s, u, want), 0, "%s", zero_errmsg());
    }
    uint16_t* b1 = (uint16_t*)abuf(zero_swap_param_bytes(&s, 1));
    uint16_t* b2 = (uint16_t*)abuf(zero_swap_param_bytes(&s, 2));
    cr_assert_eq(zero_swap_param_wait(&s, 1), -1, "a wait without a read ahead");
    cr_assert_eq(zero_swap_param_read_start(&s, 1, b1), 0, "%s", zero_errmsg());
    cr_assert_eq(zero_swap_param_read_start(&s, 1, b1), -1, "a second read ahead of the same unit");
    cr_assert_eq(zero_swap_param_read_start(&s, 0, b1), -1, "a unit on the host");
    cr_assert_eq(zero_swap_param_read_start(&s, 2, b2), 0, "%s", zero_errmsg());
    // the later one waited for first: the earlier one's completion is kept for it
    cr_assert_eq(zero_swap_param_wait(&s, 2), 0, "%s", zero_errmsg());
    fill16(want, n2, 2, 5);
    cr_assert_eq(memcmp(b2, want, n2 * 2), 0);
    int done = 0;
    for (int i = 0; i < 100000 && done == 0; i++) { done = zero_swap_param_read_test(&s, 1); }
    cr_assert_eq(done, 1, "unit 1's read never completed (%s)", zero_errmsg());
    cr_assert_eq(zero_swap_param_wait(&s, 1), 0, "%s", zero_errmsg());
    fill16(want, n1, 1, 5);
    cr_assert_eq(memcmp(b1, want, n1 * 2), 0);
    cr_assert_eq(zero_swap_param_wait(&s, 1), -1, "waited for twice");
    // a synchronous read of a unit being read ahead waits for the read first
    cr_assert_eq(zero_swap_param_read_start(&s, 1, b1), 0, "%s", zero_errmsg());
    cr_assert_eq(zero_swap_param_read(&s, 1, want, n1), 0, "%s", zero_errmsg());
    cr_assert_eq(zero_swap_param_read_start(&s, 1, b1), 0, "the read ahead was settled: %s", zero_errmsg());
    cr_assert_eq(zero_swap_param_wait(&s, 1), 0, "%s", zero_errmsg());
    free(want);
    free(b1);
    free(b2);
    zero_swap_close(&s);
}

// the optimizer's regions and a parameter region on one file
static ZeroSwapOpen with_optimizer(const ZeroSegment* segs, int nsegs) {
    ZeroSwapOpen o = params_only(2);
    o.optimizer = 1;
    o.segs = segs;
    o.nsegs = nsegs;
    o.sub_group_size = 1024;  // several groups: the pipeline turns
    o.buffer_count = 2;
    o.pipeline_read = o.pipeline_write = 1;
    return o;
}

// segments: each unit's shard whole, decaying but for unit 1
static int segments(ZeroSegment* segs) {
    for (int u = 0; u < 3; u++) {
        size_t b = g_plan.units[u].shard_offset;
        segs[u] = (ZeroSegment){b, b + g_plan.units[u].shard, u, 0, u != 1};
    }
    return 3;
}

// opens the optimizer's regions and the parameter region over segments(segs)
static void open_pipelined(ZeroSwap* s, ZeroSegment* segs, int pipeline_read, int pipeline_write) {
    ZeroSwapOpen o = with_optimizer(segs, segments(segs));
    o.pipeline_read = pipeline_read;
    o.pipeline_write = pipeline_write;
    cr_assert_eq(zero_swap_open(s, &o), 0, "%s", zero_errmsg());
}

static void open_with_optimizer(ZeroSwap* s, ZeroSegment* segs) { open_pipelined(s, segs, 1, 1); }

typedef struct { ZeroSwap* s; void* host0; int flushed; } OutCtx;  // host0: unit 0's copy, bf16 or fp32

static void* out_unit(void* ctx, int u) {
    OutCtx* c = (OutCtx*)ctx;
    return u == 0 ? c->host0 : zero_swap_param_out(c->s, u);
}

static int out_flush(void* ctx) {
    OutCtx* c = (OutCtx*)ctx;
    c->flushed++;
    return zero_swap_param_flush(c->s);
}

// The step, with the reads ahead and writes behind each on or off, whole or begun and
// carried through unit by unit in another order, against cpu_adam_step over the same
// arrays: neither the pipeline nor the order changes a byte.
static void step_writes_bf16(int pipeline_read, int pipeline_write, int deferred) {
    ZeroSegment segs[3];
    ZeroSwap s;
    open_pipelined(&s, segs, pipeline_read, pipeline_write);
    size_t total = g_plan.shard_total;
    float* master = (float*)calloc(total, sizeof(float));
    float* grad = (float*)calloc(total, sizeof(float));
    for (size_t i = 0; i < total; i++) { master[i] = 0.001f * (float)(i % 977) - 0.4f; grad[i] = 0.01f * (float)(i % 13) - 0.06f; }
    cr_assert_eq(zero_swap_master_begin(&s), 0, "%s", zero_errmsg());
    cr_assert_eq(zero_swap_master_unit(&s, 1, master + g_plan.units[1].shard_offset), 0, "%s", zero_errmsg());
    cr_assert_eq(zero_swap_master_unit(&s, 0, master), -1, "a unit out of order");
    cr_assert_eq(zero_swap_master_unit(&s, 2, master + g_plan.units[2].shard_offset), 0, "%s", zero_errmsg());
    cr_assert_eq(zero_swap_master_end(&s), 0, "%s", zero_errmsg());
    memset(master, 0, g_plan.units[0].shard * sizeof(float));  // unit 0 was left out: zeros
    // the gradient in two micro-steps: the sum, its squares from the last one only
    float* half = (float*)calloc(total, sizeof(float));
    for (size_t i = 0; i < total; i++) { half[i] = grad[i] * 0.5f; }
    for (int micro = 0; micro < 2; micro++) {
        for (int u = 2; u >= 0; u--) {
            cr_assert_eq(zero_swap_grad_add(&s, u, half + g_plan.units[u].shard_offset, 0, micro == 1), 0, "%s", zero_errmsg());
        }
        if (micro == 0) {  // a backward's order: each span's shared blocks are as the previous add left them
            cr_assert_eq(zero_swap_counters(&s).read_bytes, 0.0, "first adds in decreasing order read nothing");
        }
    }
    double sumsq = 0.0;
    for (size_t i = 0; i < total; i++) { sumsq += (double)(half[i] + half[i]) * (half[i] + half[i]); }
    cr_assert_float_eq(zero_swap_grad_sumsq(&s), sumsq, 1e-9 * sumsq);
    // the reference: cpu_adam_step over the same arrays
    CpuAdamParams hp = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f, 1};
    float* m = (float*)calloc(total, sizeof(float));
    float* v = (float*)calloc(total, sizeof(float));
    uint16_t* want = (uint16_t*)calloc(total, 2);
    for (size_t i = 0; i < total; i++) { grad[i] = half[i] + half[i]; }
    for (int u = 0; u < 3; u++) {
        size_t b = g_plan.units[u].shard_offset, n = g_plan.units[u].shard;
        hp.weight_decay = u != 1 ? 0.1f : 0.0f;
        cr_assert_eq(cpu_adam_step(master + b, grad + b, CPU_ADAM_FP32, m + b, v + b, n, &hp, want + b, CPU_ADAM_BF16), 0);
    }
    hp.weight_decay = 0.0f;
    uint16_t* host0 = (uint16_t*)calloc(g_plan.units[0].shard, 2);
    uint16_t* got = (uint16_t*)calloc(g_plan.units[2].shard, 2);
    OutCtx ctx = {&s, host0, 0};
    if (!deferred) {
        cr_assert_eq(zero_swap_step(&s, &hp, 0.1f, out_unit, CPU_ADAM_BF16, out_flush, &ctx), 0, "%s", zero_errmsg());
    } else {
        // the groups of units 0 and 2 first (1024 elements: the first also holds the start
        // of unit 1, which the last group finishes from what the first wrote); each unit
        // read back whole as soon as it is carried through, the step still in progress
        const int first[3] = {1, 0, 1};
        cr_assert_eq(zero_swap_step_begin(&s, &hp, 0.1f, out_unit, CPU_ADAM_BF16, out_flush, &ctx, first), 0, "%s", zero_errmsg());
        cr_assert_eq(zero_swap_step_begin(&s, &hp, 0.1f, out_unit, CPU_ADAM_BF16, out_flush, &ctx, first), -1, "a second step");
        for (int u = 2; u >= 1; u--) {
            cr_assert_eq(zero_swap_step_through(&s, u), 0, "%s", zero_errmsg());
            cr_assert(zero_swap_step_pending(&s));
            ZeroSwapCounters c0 = zero_swap_counters(&s);
            cr_assert_eq(zero_swap_param_read(&s, u, got, g_plan.units[u].shard), 0, "%s", zero_errmsg());
            ZeroSwapCounters c1 = zero_swap_counters(&s);
            cr_assert(c1.read_bytes == c0.read_bytes && c1.stage_hit_bytes > c0.stage_hit_bytes,
                      "unit %d, just written back from its staging, is read from there", u);
            cr_assert_eq(memcmp(got, want + g_plan.units[u].shard_offset, g_plan.units[u].shard * 2), 0,
                         "unit %d's bf16 shard, read while the step goes on", u);
        }
        cr_assert_eq(ctx.flushed, 0, "the flush is the step's end");
        cr_assert_eq(zero_swap_step_through(&s, -1), 0, "%s", zero_errmsg());
        cr_assert(!zero_swap_step_pending(&s));
        cr_assert_eq(zero_swap_step_through(&s, -1), 0, "nothing pending: nothing to do");
    }
    cr_assert_eq(ctx.flushed, 1);
    // the swap's ring holds what the step keeps in flight (up to 2 buffer sets of 4 regions,
    // a staging's write, the gradient's): no "asynchronous" submission waited for room
    cr_assert_eq(s.nvme.submit_waits, 0, "%llu submissions waited for a free slot", (unsigned long long)s.nvme.submit_waits);
    cr_assert_eq(memcmp(host0, want, g_plan.units[0].shard * 2), 0, "unit 0's bf16 copy on the host");
    for (int u = 1; u <= 2; u++) {
        cr_assert_eq(zero_swap_param_read(&s, u, got, g_plan.units[u].shard), 0, "%s", zero_errmsg());
        cr_assert_eq(memcmp(got, want + g_plan.units[u].shard_offset, g_plan.units[u].shard * 2), 0, "unit %d's bf16 shard on NVMe", u);
    }
    // the master, updated, by ranges
    float part[100];
    cr_assert_eq(zero_swap_state_read(&s, ZERO_SWAP_P, 2, 17, 100, part), 0, "%s", zero_errmsg());
    cr_assert_eq(memcmp(part, master + g_plan.units[2].shard_offset + 17, sizeof(part)), 0);
    cr_assert_eq(zero_swap_state_read(&s, ZERO_SWAP_P, 0, g_plan.units[0].shard, 1, part), -1, "past the shard");
    free(master); free(grad); free(half); free(host0); free(m); free(v); free(want); free(got);
    zero_swap_close(&s);
}

Test(swap, step_writes_bf16_through_the_callback) { step_writes_bf16(1, 1, 0); }
Test(swap, step_without_pipelined_reads_or_writes) { step_writes_bf16(0, 0, 0); }
Test(swap, step_with_reads_ahead_only) { step_writes_bf16(1, 0, 0); }
Test(swap, step_with_writes_behind_only) { step_writes_bf16(0, 1, 0); }
Test(swap, step_carried_through_unit_by_unit) { step_writes_bf16(1, 1, 1); }
Test(swap, step_carried_through_without_pipelining) { step_writes_bf16(0, 0, 1); }

Test(swap, read_ahead_beside_the_gradient_write) {
    ZeroSegment segs[3];
    ZeroSwap s;
    open_with_optimizer(&s, segs);
    size_t n2 = g_plan.units[2].shard;
    uint16_t* want = (uint16_t*)calloc(n2, 2);
    fill16(want, n2, 2, 9);
    cr_assert_eq(zero_swap_param_write(&s, 2, want), 0, "%s", zero_errmsg());
    float* g = (float*)calloc(n2, sizeof(float));
    for (size_t i = 0; i < n2; i++) { g[i] = (float)i; }
    uint16_t* b = (uint16_t*)abuf(zero_swap_param_bytes(&s, 2));
    // the gradient's write and the read ahead in flight together; each wait finds its own
    cr_assert_eq(zero_swap_grad_add(&s, 2, g, 0, 1), 0, "%s", zero_errmsg());
    cr_assert_eq(zero_swap_param_read_start(&s, 2, b), 0, "%s", zero_errmsg());
    cr_assert_eq(zero_swap_param_wait(&s, 2), 0, "%s", zero_errmsg());
    cr_assert_eq(memcmp(b, want, n2 * 2), 0);
    cr_assert_eq(zero_swap_grad_settle(&s), 0, "%s", zero_errmsg());
    cr_assert_eq(s.grad_pending, 0);
    // the second add reads the first back: twice the shard
    cr_assert_eq(zero_swap_grad_add(&s, 2, g, 0, 1), 0, "%s", zero_errmsg());
    cr_assert_float_eq(zero_swap_grad_sumsq(&s), 5.0 * (double)(n2 - 1) * (double)n2 * (double)(2 * n2 - 1) / 6.0,
                       1e-6 * (double)n2 * n2 * n2);
    zero_swap_grad_clear(&s);
    cr_assert_eq(zero_swap_grad_sumsq(&s), 0.0);
    free(want); free(g); free(b);
    zero_swap_close(&s);
}

// Units 0 and 1 share their G span's first block: in increasing order, unit 1's first add
// must keep unit 0's bytes there (read back), which unit 0's second add then finds.
Test(swap, first_adds_in_increasing_order_keep_the_neighbours) {
    ZeroSegment segs[3];
    ZeroSwap s;
    open_with_optimizer(&s, segs);
    size_t n2 = g_plan.units[2].shard;
    float* g = (float*)calloc(n2, sizeof(float));
    float* zero = (float*)calloc(n2, sizeof(float));
    double want = 0.0;
    for (int u = 0; u < 3; u++) {
        for (size_t i = 0; i < g_plan.units[u].shard; i++) { g[i] = (float)(u + 1) + 0.001f * (float)i; want += (double)g[i] * g[i]; }
        cr_assert_eq(zero_swap_grad_add(&s, u, g, 0, 0), 0, "%s", zero_errmsg());
    }
    cr_assert_gt(zero_swap_counters(&s).read_bytes, 0.0, "unit 1's first block holds unit 0's sum: read");
    for (int u = 0; u < 3; u++) { cr_assert_eq(zero_swap_grad_add(&s, u, zero, 0, 1), 0, "%s", zero_errmsg()); }
    cr_assert_float_eq(zero_swap_grad_sumsq(&s), want, 1e-9 * want);
    free(g); free(zero);
    zero_swap_close(&s);
}

// zero_swap_state_write / read (zero_tensor_set): whole shards and a range at an offset in
// no block's boundary, read back exactly with their neighbours kept; G written
// only where this step's sum is in the file, its squared norm mended by the change
Test(swap, state_ranges_written_and_read_back) {
    ZeroSegment segs[3];
    ZeroSwap s;
    open_with_optimizer(&s, segs);
    size_t n2 = g_plan.units[2].shard;
    float* x = (float*)calloc(n2, sizeof(float));
    float* got = (float*)calloc(n2, sizeof(float));
    for (int u = 0; u < 3; u++) {  // M whole, unit by unit
        for (size_t i = 0; i < g_plan.units[u].shard; i++) { x[i] = (float)u + 0.5f * (float)i; }
        double read0 = zero_swap_counters(&s).read_bytes;
        cr_assert_eq(zero_swap_state_write(&s, ZERO_SWAP_M, u, 0, g_plan.units[u].shard, x), 0, "%s", zero_errmsg());
        if (u == 2) {  // (its 3 blocks start on a boundary: only the last, shared with what follows, is read)
            cr_assert_eq(zero_swap_counters(&s).read_bytes - read0, (double)NVME_ALIGN, "a write reads only the blocks it shares");
        }
    }
    // (a read of unit 1 leaves other blocks in the staging the ranges go through, so that
    // the range below keeps its neighbours only if it reads the two blocks it shares)
    cr_assert_eq(zero_swap_state_read(&s, ZERO_SWAP_M, 1, 0, g_plan.units[1].shard, got), 0, "%s", zero_errmsg());
    for (size_t i = 0; i < 777; i++) { x[i] = -1.0f - (float)i; }  // then 777 elements of unit 2 from 1001 (no block boundary)
    cr_assert_eq(zero_swap_state_write(&s, ZERO_SWAP_M, 2, 1001, 777, x), 0, "%s", zero_errmsg());
    for (int u = 0; u < 3; u++) {
        cr_assert_eq(zero_swap_state_read(&s, ZERO_SWAP_M, u, 0, g_plan.units[u].shard, got), 0, "%s", zero_errmsg());
        for (size_t i = 0; i < g_plan.units[u].shard; i++) {
            float want = u == 2 && i >= 1001 && i < 1778 ? -1.0f - (float)(i - 1001) : (float)u + 0.5f * (float)i;
            cr_assert_eq(got[i], want, "unit %d element %zu: %g, not %g", u, i, got[i], want);
        }
    }
    cr_assert_neq(zero_swap_state_write(&s, ZERO_SWAP_G, 1, 0, 10, x), 0, "G before any add this step is refused");
    cr_assert_neq(zero_swap_state_write(&s, ZERO_SWAP_M, 0, g_plan.units[0].shard - 5, 10, x), 0, "a range past the shard is refused");
    // G: the step's sums, then 100 elements of unit 1 changed: the squared norm follows
    double sumsq = 0.0;
    for (int u = 0; u < 3; u++) {
        for (size_t i = 0; i < g_plan.units[u].shard; i++) { x[i] = 0.01f * (float)(i % 13); sumsq += (double)x[i] * x[i]; }
        cr_assert_eq(zero_swap_grad_add(&s, u, x, 0, 1), 0, "%s", zero_errmsg());
    }
    float y[100];
    for (int i = 0; i < 100; i++) { y[i] = 2.0f; sumsq += 4.0 - (double)(0.01f * (float)((i + 50) % 13)) * (0.01f * (float)((i + 50) % 13)); }
    cr_assert_eq(zero_swap_state_write(&s, ZERO_SWAP_G, 1, 50, 100, y), 0, "%s", zero_errmsg());
    cr_assert_float_eq(zero_swap_grad_sumsq(&s), sumsq, 1e-9 * sumsq);
    cr_assert_eq(zero_swap_state_read(&s, ZERO_SWAP_G, 1, 49, 102, got), 0, "%s", zero_errmsg());
    cr_assert_eq(got[0], 0.01f * (float)(49 % 13));
    for (int i = 1; i <= 100; i++) { cr_assert_eq(got[i], 2.0f); }
    cr_assert_eq(got[101], 0.01f * (float)(150 % 13));
    free(x); free(got);
    zero_swap_close(&s);
}

// unit u's shard read ahead into a fresh buffer, from where its skew says
static void read_ahead_check(ZeroSwap* s, int u, const float* want, const char* what) {
    char* b = (char*)abuf(zero_swap_param_bytes(s, u));
    cr_assert_eq(zero_swap_param_read_start(s, u, b), 0, "%s", zero_errmsg());
    cr_assert_eq(zero_swap_param_wait(s, u), 0, "%s", zero_errmsg());
    cr_assert_eq(memcmp(b + zero_swap_param_skew(s, u), want, g_plan.units[u].shard * sizeof(float)), 0, "unit %d %s", u, what);
    free(b);
}

// The parameters in the master (zero3/swap_param.c's note): fp32 shards read from P where the
// shard buffer puts them (on a plan whose units 1 and 2 start inside a 4 KiB block, at
// 2048 and 7424 bytes: shards of 512, 1344 and 2560 elements), no file of their own
// and no second copy written by the step; during a step begun in an order that splits
// unit 1, a read refused before its unit is carried through, then the update, from the
// staging for a unit staged whole (2) and from the disk for the split one (1).
Test(swap, parameters_in_the_master) {
    const size_t numel[3] = {1000, 2600, 5000};
    zero_plan_free(&g_plan);
    cr_assert_eq(zero_plan_init(&g_plan, numel, 3, 2, 1, sizeof(float)), 0, "%s", zero_errmsg());
    ZeroSegment segs[3];
    ZeroSwap s;
    ZeroSwapOpen o = with_optimizer(segs, segments(segs));
    o.param_in_master = 1;
    cr_assert_eq(zero_swap_open(&s, &o), -1, "2-byte elements are not the master");
    o.param_elem_bytes = 4;
    cr_assert_eq(zero_swap_open(&s, &o), 0, "%s", zero_errmsg());
    ZeroSwapOpen opt = o;
    opt.on_host = NULL;
    size_t host = 0, file = 0, opt_host = 0, opt_file = 0;
    zero_swap_size(&o, &host, &file);
    zero_swap_size(&opt, &opt_host, &opt_file);
    cr_assert(file == s.file_bytes && host == s.host_bytes && file == opt_file, "no parameter region: %zu, %zu", file, opt_file);
    cr_assert(zero_swap_param_skew(&s, 1) != 0 && zero_swap_param_skew(&s, 2) != 0, "shards inside a block");
    size_t total = g_plan.shard_total, n1 = g_plan.units[1].shard, n2 = g_plan.units[2].shard;
    float* master = (float*)calloc(total, sizeof(float));
    float* grad = (float*)calloc(total, sizeof(float));
    for (size_t i = 0; i < total; i++) { master[i] = 0.002f * (float)(i % 601) - 0.5f; grad[i] = 0.01f * (float)(i % 11) - 0.05f; }
    cr_assert_eq(zero_swap_master_begin(&s), 0, "%s", zero_errmsg());
    for (int u = 0; u < 3; u++) { cr_assert_eq(zero_swap_master_unit(&s, u, master + g_plan.units[u].shard_offset), 0, "%s", zero_errmsg()); }
    cr_assert_eq(zero_swap_master_end(&s), 0, "%s", zero_errmsg());
    float* got = (float*)calloc(n2, sizeof(float));
    for (int u = 1; u <= 2; u++) { read_ahead_check(&s, u, master + g_plan.units[u].shard_offset, "read ahead from the master"); }
    // unit 2's shard written: a range of the master, unit 1's part of their shared block kept
    for (size_t i = 0; i < n2; i++) { master[g_plan.units[2].shard_offset + i] = 0.25f - 0.0001f * (float)i; }
    cr_assert_eq(zero_swap_param_write(&s, 2, master + g_plan.units[2].shard_offset), 0, "%s", zero_errmsg());
    for (int u = 1; u <= 2; u++) {
        cr_assert_eq(zero_swap_param_read(&s, u, got, g_plan.units[u].shard), 0, "%s", zero_errmsg());
        cr_assert_eq(memcmp(got, master + g_plan.units[u].shard_offset, g_plan.units[u].shard * sizeof(float)), 0, "unit %d after unit 2's write", u);
        cr_assert_eq(zero_swap_state_read(&s, ZERO_SWAP_P, u, 0, g_plan.units[u].shard, got), 0, "%s", zero_errmsg());
        cr_assert_eq(memcmp(got, master + g_plan.units[u].shard_offset, g_plan.units[u].shard * sizeof(float)), 0, "P's unit %d", u);
    }
    for (int u = 2; u >= 0; u--) { cr_assert_eq(zero_swap_grad_add(&s, u, grad + g_plan.units[u].shard_offset, 0, 1), 0, "%s", zero_errmsg()); }
    // the reference: cpu_adam_step over the same arrays
    CpuAdamParams hp = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f, 1};
    float* m = (float*)calloc(total, sizeof(float));
    float* v = (float*)calloc(total, sizeof(float));
    float* want = (float*)calloc(total, sizeof(float));
    memcpy(want, master, total * sizeof(float));
    for (int u = 0; u < 3; u++) {
        size_t b = g_plan.units[u].shard_offset;
        hp.weight_decay = u != 1 ? 0.1f : 0.0f;
        cr_assert_eq(cpu_adam_step(want + b, grad + b, CPU_ADAM_FP32, m + b, v + b, g_plan.units[u].shard, &hp, NULL, CPU_ADAM_FP32), 0);
    }
    hp.weight_decay = 0.0f;
    // unit 2's groups first (the first also holds the end of unit 1), then the rest
    float* host0 = (float*)calloc(g_plan.units[0].shard, sizeof(float));
    OutCtx ctx = {&s, host0, 0};
    const int first[3] = {0, 0, 1};
    size_t g1_first = g_plan.units[1].shard_offset / s.group, g1_last = (g_plan.units[1].shard_offset + n1 - 1) / s.group;
    cr_assert(g1_first < g1_last && g1_last == g_plan.units[2].shard_offset / s.group, "unit 1 split by the order");
    ZeroSwapCounters c0 = zero_swap_counters(&s);
    cr_assert_eq(zero_swap_step_begin(&s, &hp, 0.1f, out_unit, CPU_ADAM_FP32, out_flush, &ctx, first), 0, "%s", zero_errmsg());
    cr_assert_eq(zero_swap_param_read(&s, 1, got, n1), -1, "unit 1 read before the step carried it through");
    cr_assert_eq(zero_swap_step_through(&s, 2), 0, "%s", zero_errmsg());
    char* b = (char*)abuf(zero_swap_param_bytes(&s, 1));
    cr_assert_eq(zero_swap_param_read_start(&s, 1, b), -1, "unit 1, part-updated and staged, read before it is through");
    ZeroSwapCounters c1 = zero_swap_counters(&s);
    read_ahead_check(&s, 2, want + g_plan.units[2].shard_offset, "updated, from its staging");
    ZeroSwapCounters c2 = zero_swap_counters(&s);
    cr_assert(c2.read_bytes == c1.read_bytes && c2.stage_hit_bytes > c1.stage_hit_bytes, "unit 2 from its staging");
    cr_assert_eq(zero_swap_step_through(&s, 1), 0, "%s", zero_errmsg());
    c1 = zero_swap_counters(&s);
    read_ahead_check(&s, 1, want + g_plan.units[1].shard_offset, "updated in two parts, from the disk");
    c2 = zero_swap_counters(&s);
    cr_assert(c2.read_bytes == c1.read_bytes + (double)zero_swap_param_bytes(&s, 1) && c2.stage_hit_bytes == c1.stage_hit_bytes,
              "unit 1's staging held only its second part: read from the disk");
    cr_assert_eq(zero_swap_param_write(&s, 1, got), -1, "a shard written during the step");
    cr_assert_eq(zero_swap_step_through(&s, -1), 0, "%s", zero_errmsg());
    cr_assert_eq(ctx.flushed, 1);
    c2 = zero_swap_counters(&s);
    size_t groups = zero_swap_align(total * sizeof(float));  // (groups of whole blocks)
    cr_assert_eq(c2.write_bytes - c0.write_bytes, 3.0 * (double)groups, "the step wrote P, M and V and no copy of the parameters");
    cr_assert_eq(memcmp(host0, want, g_plan.units[0].shard * sizeof(float)), 0, "unit 0's copy on the host");
    for (int u = 1; u <= 2; u++) {
        cr_assert_eq(zero_swap_param_read(&s, u, got, g_plan.units[u].shard), 0, "%s", zero_errmsg());
        cr_assert_eq(memcmp(got, want + g_plan.units[u].shard_offset, g_plan.units[u].shard * sizeof(float)), 0, "unit %d after the step", u);
    }
    free(master); free(grad); free(got); free(m); free(v); free(want); free(host0); free(b);
    zero_swap_close(&s);
}
