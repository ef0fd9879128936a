// zero3/host.c: the implementation (the interface and its notes: zero3/host.h)
#include "zero3/host.h"  // this module's types and prototypes

static int zero_param_shard_get(ZeroHost* e, int u, float* dst, size_t n);
static int zero_grad_nvme_add(ZeroHost* e, int u, const float* got);

static const char* const zero_mem_names[ZERO_MEM_KINDS] = {"params", "grads", "optimizer", "buffers",
    "host params", "host grads", "host optimizer", "host buffers"};

static void* zero_alloc(ZeroHost* e, int kind, size_t elems) {
    size_t bytes = (elems * sizeof(float) + 63) / 64 * 64;
    if (bytes == 0) { bytes = 64; }
    void* p = aligned_alloc(64, bytes);
    if (p == NULL) {
        zero_error("zero: out of memory allocating %.1f MiB of %s", bytes / 1048576.0, zero_mem_names[kind]);
        return NULL;
    }
    memset(p, 0, bytes);
    e->mem.current[kind] += elems * sizeof(float);
    if (kind < ZERO_MEM_HOST_PARAMS) { e->mem.total += elems * sizeof(float); }
    if (e->mem.current[kind] > e->mem.peak[kind]) { e->mem.peak[kind] = e->mem.current[kind]; }
    if (e->mem.total > e->mem.total_peak) { e->mem.total_peak = e->mem.total; }
    return p;
}

static void zero_release_mem(ZeroHost* e, int kind, void* p, size_t elems) {
    if (p == NULL) { return; }
    free(p);
    e->mem.current[kind] -= elems * sizeof(float);
    if (kind < ZERO_MEM_HOST_PARAMS) { e->mem.total -= elems * sizeof(float); }
}

// A working-set buffer (ZERO_MEM_BUFFERS): one of the same size from the pool if there
// is one, else a new allocation. zeroed: 0 for buffers that are overwritten whole (a
// gather, a reduce-scatter's receive), 1 for accumulators. Pooled buffers stay counted
// as allocated, so the peak is what the process really holds.
static void* zero_buf_get(ZeroHost* e, size_t elems, int zeroed) {
    for (int i = e->npool - 1; i >= 0; i--) {
        if (e->pool[i].elems != elems) { continue; }
        void* p = e->pool[i].ptr;
        e->pool[i] = e->pool[--e->npool];
        if (zeroed) { memset(p, 0, elems * sizeof(float)); }
        return p;
    }
    return zero_alloc(e, ZERO_MEM_BUFFERS, elems);  // new memory comes zeroed
}

static void zero_buf_put(ZeroHost* e, void* p, size_t elems) {
    if (p == NULL) { return; }
    if (e->npool < ZERO_POOL_MAX) {
        e->pool[e->npool].ptr = p;
        e->pool[e->npool].elems = elems;
        e->npool++;
        return;
    }
    zero_release_mem(e, ZERO_MEM_BUFFERS, p, elems);
}

// starts gathering unit u into a fresh buffer (this rank's shard is its input block); the
// schedule already counts it in flight
static int zero_gather_start(ZeroHost* e, int u) {
    ZeroUnit* pu = &e->plan.units[u];
    float* buf = (float*)zero_buf_get(e, pu->padded, 0);
    if (buf == NULL) { return -1; }
    if (e->sec != NULL && e->sec_ok[u]) {
        // hpZ: the unit's slices inside the secondary group hold it already (this step's
        // first gather left them): gather from there, never across the whole world
        size_t part = pu->padded / (size_t)e->hpz.world;
        memcpy(buf + (size_t)e->hpz.rank * part, e->sec + pu->full_offset / (size_t)e->hpz.world, part * sizeof(float));
        e->unit_buf[u] = buf;
        e->unit_sec[u] = 1;
        return zero_allgather(&e->hpz, buf, part, &e->unit_req[u]);
    }
    e->unit_sec[u] = 0;
    // the shard comes from the host (--offload-param) or NVMe ahead of the gather: the
    // prefetch schedule starts this early, so the read runs ahead of the unit's use
    if (zero_param_shard_get(e, u, buf + (size_t)e->rank * pu->shard, pu->shard) != 0) { return -1; }
    if (e->offload_param != ZERO_OFFLOAD_NONE) { e->moved[ZERO_MOVE_H2D] += pu->shard * sizeof(float); }
    e->unit_buf[u] = buf;
    if (e->cfg.quantized_weights) { return zero_allgather_q(&e->comm, buf, pu->shard, &e->unit_req[u]); }
    return zero_allgather(&e->comm, buf, pu->shard, &e->unit_req[u]);
}

// the communicator unit u's gather runs on
static ZeroComm* zero_gather_comm(ZeroHost* e, int u) { return e->unit_sec[u] ? &e->hpz : &e->comm; }

// waits for unit u's gather, if one is in flight; hpZ keeps this rank's slice of a gather
// from the shards (the unit's first this step) for the unit's next gathers
static int zero_gather_finish(ZeroHost* e, int u) {
    if (e->sched.state[u] != ZERO_UNIT_IN_FLIGHT) { return 0; }
    if (zero_comm_wait(zero_gather_comm(e, u), &e->unit_req[u]) != 0) { return -1; }
    if (e->sec != NULL && !e->unit_sec[u]) {
        ZeroUnit* pu = &e->plan.units[u];
        size_t part = pu->padded / (size_t)e->hpz.world;
        memcpy(e->sec + pu->full_offset / (size_t)e->hpz.world, e->unit_buf[u] + (size_t)e->hpz.rank * part, part * sizeof(float));
        e->sec_ok[u] = 1;
    }
    zero_schedule_gathered(&e->sched, u);
    return 0;
}

static void zero_unit_free(ZeroHost* e, int u) {
    if (e->sched.state[u] == ZERO_UNIT_NOT_LIVE) { return; }
    zero_buf_put(e, e->unit_buf[u], e->plan.units[u].padded);
    e->unit_buf[u] = NULL;
    zero_schedule_freed(&e->sched, u);
}

// Open MPI moves a nonblocking collective on only while the rank is inside an MPI call,
// so at every unit boundary the engine gives its gathers and reductions in flight a
// turn; without this most of a prefetch would happen in the wait that needs it.
static int zero_poll(ZeroHost* e) {
    int done = 0;
    for (int u = 0; u < e->plan.num_units; u++) {
        if (e->sched.state[u] == ZERO_UNIT_IN_FLIGHT && zero_comm_test(zero_gather_comm(e, u), &e->unit_req[u], &done) != 0) { return -1; }
    }
    const ZeroSchedule* s = &e->sched;
    for (int i = 0; i < s->red_count; i++) {
        int u = s->reducing[(s->red_head + i) % s->num_units];
        if (zero_comm_test(&e->comm, &e->red_req[u], &done) != 0) { return -1; }
    }
    return 0;
}

// starts the gathers the schedule's window ahead asks for, after the use before `from`
static int zero_prefetch(ZeroHost* e, int from) {
    int ahead[64];  // prefetch_depth <= 64 (zero3/config.h)
    int n = zero_schedule_prefetch(&e->sched, from, ahead);
    for (int k = 0; k < n; k++) {
        if (zero_gather_start(e, ahead[k]) != 0) { return -1; }
    }
    return 0;
}

int zero_host_begin(void* impl, int pass, int last_micro) {
    ZeroHost* e = (ZeroHost*)impl;
    if (zero_schedule_begin(&e->sched, pass, last_micro) != 0) { return -1; }
    return zero_prefetch(e, 0);  // the first uses' gathers start before the first fetch
}

int zero_host_fetch(void* impl, int u, void** out) {
    ZeroHost* e = (ZeroHost*)impl;
    ZeroSchedule* s = &e->sched;
    if (zero_schedule_at(s, u, "fetch") != 0) { return -1; }
    if (!s->gathers) {
        *out = e->full_params + e->plan.units[u].full_offset;
        return 0;
    }
    if (s->state[u] == ZERO_UNIT_NOT_LIVE) {
        zero_schedule_started(s, u);
        if (zero_gather_start(e, u) != 0) { return -1; }
    }
    if (zero_gather_finish(e, u) != 0 || zero_prefetch(e, s->pos + 1) != 0) { return -1; }
    *out = e->unit_buf[u];
    return 0;
}

int zero_host_release(void* impl, int u) {
    ZeroHost* e = (ZeroHost*)impl;
    int rc = zero_schedule_release(&e->sched, u);
    if (rc < 0) { return -1; }
    if (rc == 1) { zero_unit_free(e, u); }
    return zero_poll(e);
}

int zero_host_grad(void* impl, int u, void** out) {
    ZeroHost* e = (ZeroHost*)impl;
    if (zero_schedule_grad(&e->sched, u) != 0) { return -1; }
    if (e->stage < 2) {
        *out = e->full_grads + e->plan.units[u].full_offset;
        return 0;
    }
    if (e->grad_buf[u] == NULL) {
        e->grad_buf[u] = (float*)zero_buf_get(e, e->plan.units[u].padded, 1);
        if (e->grad_buf[u] == NULL) { return -1; }
    }
    *out = e->grad_buf[u];
    return 0;
}

// Whether a configuration's reductions (stage 0's all-reduces, the reduce-scatters of
// stages 1-3) are staged through a buffer of the pool: zero3/comm.h's [Note: reduce-scatter
// in pieces] (qgZ's stage their own). The engine's size is zero_comm_rs_stage's of the
// unit's shard, --estimate's zero_rs_stage_elems'.
static int zero_red_staged(const ZeroConfig* cfg) { return !cfg->quantized_gradients; }

static size_t zero_red_stage(const ZeroHost* e, int u) {
    return zero_red_staged(&e->cfg) ? zero_comm_rs_stage(&e->comm, e->plan.units[u].shard) : 0;
}

// completes the oldest reduction in flight (stages 2-3: adds it into the accumulator, in
// memory or in the swap file)
static int zero_reduce_complete_one(ZeroHost* e) {
    int u = zero_schedule_reduce_oldest(&e->sched);
    ZeroUnit* pu = &e->plan.units[u];
    if (zero_comm_wait(&e->comm, &e->red_req[u]) != 0) { return -1; }
    zero_buf_put(e, e->red_stage[u], zero_red_stage(e, u));
    e->red_stage[u] = NULL;
    int copy_out = e->host_grads != NULL && e->sched.last_micro;  // offload: the shard goes to the host now
    if (e->stage >= 2) {
        const float* got = e->red_recv[u];
        if (e->shard_grads == NULL) {
            if (zero_grad_nvme_add(e, u, got) != 0) { return -1; }
            if (e->sched.last_micro) { e->moved[ZERO_MOVE_D2H] += pu->shard * sizeof(float); }
        } else {
            float* acc = e->shard_grads + pu->shard_offset;
            for (size_t i = 0; i < pu->shard; i++) { acc[i] += got[i]; }
        }
        zero_buf_put(e, e->red_recv[u], pu->shard);
        e->red_recv[u] = NULL;
        zero_buf_put(e, e->grad_buf[u], pu->padded);
        e->grad_buf[u] = NULL;
    }
    if (copy_out && e->stage >= 1) {
        memcpy(e->host_grads + pu->shard_offset, e->shard_grads + pu->shard_offset, pu->shard * sizeof(float));
        e->moved[ZERO_MOVE_D2H] += pu->shard * sizeof(float);
    }
    return 0;
}

static int zero_reduce_drain(ZeroHost* e) {
    while (e->sched.red_count > 0) {
        if (zero_reduce_complete_one(e) != 0) { return -1; }
    }
    return 0;
}

int zero_host_reduce(void* impl, int u) {
    ZeroHost* e = (ZeroHost*)impl;
    ZeroSchedule* s = &e->sched;
    if (zero_schedule_reduce(s, u) != 0) { return -1; }
    if (e->stage < 2 && !s->last_micro) { return 0; }  // accumulate locally until the boundary
    if (e->world == 1 && e->stage < 2) { return 0; }   // nothing to reduce, the full gradient is the shard
    while (zero_schedule_reduce_full(s, u)) {           // the window behind: reduce_bucket_size
        if (zero_reduce_complete_one(e) != 0) { return -1; }
    }
    ZeroUnit* pu = &e->plan.units[u];
    zero_schedule_reduce_started(s, u);
    size_t se = zero_red_stage(e, u);
    if (se > 0 && (e->red_stage[u] = (float*)zero_buf_get(e, se, 0)) == NULL) { return -1; }
    if (e->stage == 0) {
        return zero_allreduce(&e->comm, e->full_grads + pu->full_offset, pu->padded, e->red_stage[u], &e->red_req[u]);
    }
    if (e->stage == 1) {
        return zero_reduce_scatter(&e->comm, e->full_grads + pu->full_offset, e->shard_grads + pu->shard_offset,
                                   pu->shard, e->red_stage[u], &e->red_req[u]);
    }
    float* recv = (float*)zero_buf_get(e, pu->shard, 0);
    if (recv == NULL) { return -1; }
    e->red_recv[u] = recv;
    if (e->cfg.quantized_gradients) { return zero_reduce_scatter_q(&e->comm, e->grad_buf[u], recv, pu->shard, &e->red_req[u]); }
    return zero_reduce_scatter(&e->comm, e->grad_buf[u], recv, pu->shard, e->red_stage[u], &e->red_req[u]);
}

int zero_host_end(void* impl) {
    ZeroHost* e = (ZeroHost*)impl;
    if (zero_schedule_end(&e->sched) != 0) { return -1; }
    if (e->sched.pass == ZERO_PASS_TRAIN && zero_reduce_drain(e) != 0) { return -1; }
    for (int u = 0; e->sched.gathers && u < e->plan.num_units; u++) {
        if (e->sched.persistent[u]) { continue; }
        if (zero_gather_finish(e, u) != 0) { return -1; }  // a prefetch past the end cannot happen, but be safe
        zero_unit_free(e, u);
    }
    return 0;
}

// the parameter shard that AdamW updates, for unit u: in the full buffer (stages 1-2)
// or the shard buffer (stage 3)
static float* zero_param_shard(ZeroHost* e, int u) {
    ZeroUnit* pu = &e->plan.units[u];
    if (e->stage == 3) { return e->param_ptr[u]; }  // NULL: on NVMe, see zero_param_shard_get/put
    return e->full_params + pu->full_offset + (size_t)e->rank * pu->shard;
}

static size_t zero_align4k(size_t bytes) { return (bytes + NVME_ALIGN - 1) / NVME_ALIGN * NVME_ALIGN; }

// copies the first n elements (at most the shard) of unit u's parameter shard into dst,
// from the host or from NVMe
static int zero_param_shard_get(ZeroHost* e, int u, float* dst, size_t n) {
    ZeroUnit* pu = &e->plan.units[u];
    if (zero_param_shard(e, u) != NULL) {
        memcpy(dst, zero_param_shard(e, u), n * sizeof(float));
        return 0;
    }
    if (e->staged_unit == u) { e->staged_unit = -1; }  // about to be overwritten: it was flushed already
    size_t bytes = zero_align4k(pu->shard * sizeof(float));
    if (nvme_read(&e->nvme, e->param_stage, e->param_file_off[u], bytes) != 0) { return -1; }
    e->moved[ZERO_MOVE_NVME_READ] += bytes;
    memcpy(dst, e->param_stage, n * sizeof(float));
    return 0;
}

// writes the staged shard of an NVMe unit back to the swap file
static int zero_param_flush(ZeroHost* e) {
    if (e->staged_unit < 0) { return 0; }
    int u = e->staged_unit;
    size_t bytes = zero_align4k(e->plan.units[u].shard * sizeof(float));
    e->staged_unit = -1;
    if (nvme_write(&e->nvme, e->param_stage, e->param_file_off[u], bytes) != 0) { return -1; }
    e->moved[ZERO_MOVE_NVME_WRITE] += bytes;
    return 0;
}

// where the step writes unit u's updated shard: the host copy, or the staging buffer of
// an NVMe unit (the previous staged unit is flushed first). The optimizer walks the
// shard in order, so each NVMe unit is staged once per step.
static float* zero_param_out(ZeroHost* e, int u) {
    float* p = zero_param_shard(e, u);
    if (p != NULL) { return p; }
    if (e->staged_unit != u) {
        if (zero_param_flush(e) != 0) { return NULL; }
        memset(e->param_stage, 0, e->param_stage_bytes);
        e->staged_unit = u;
    }
    return e->param_stage;
}

// stores src as unit u's parameter shard (init, checkpoints)
static int zero_param_shard_put(ZeroHost* e, int u, const float* src) {
    ZeroUnit* pu = &e->plan.units[u];
    if (zero_param_shard(e, u) != NULL) {
        memcpy(zero_param_shard(e, u), src, pu->shard * sizeof(float));
        return 0;
    }
    float* out = zero_param_out(e, u);
    if (out == NULL) { return -1; }
    memcpy(out, src, pu->shard * sizeof(float));
    return zero_param_flush(e);
}

void zero_host_clear_grads(ZeroHost* e) {
    if (e->full_grads != NULL) { memset(e->full_grads, 0, e->plan.padded_total * sizeof(float)); }
    if (e->shard_grads != NULL) { memset(e->shard_grads, 0, e->plan.shard_total * sizeof(float)); }
    if (e->grad_in_file != NULL) { memset(e->grad_in_file, 0, (size_t)e->plan.num_units); }  // the next add overwrites
    e->grad_sumsq = 0.0;
}

// stage 3: the always-gathered units get their updated shards from every rank
static int zero_refresh_persistent(ZeroHost* e) {
    for (int u = 0; u < e->plan.num_units; u++) {
        if (!e->sched.persistent[u]) { continue; }
        ZeroUnit* pu = &e->plan.units[u];
        memcpy(e->unit_buf[u] + (size_t)e->rank * pu->shard, zero_param_shard(e, u), pu->shard * sizeof(float));
        if (zero_allgather(&e->comm, e->unit_buf[u], pu->shard, NULL) != 0) { return -1; }
    }
    return 0;
}

static size_t zero_nvme_offset(const ZeroHost* e, int region, size_t elem) {
    return (size_t)region * e->nvme_region + elem * sizeof(float);
}

// elements of group g, and the bytes to move for it (whole 4 KiB blocks: the regions are
// padded, so reading past the last real element stays inside the file)
static size_t zero_nvme_group_elems(const ZeroHost* e, int g) {
    size_t begin = (size_t)g * e->group;
    size_t end = begin + e->group < e->plan.shard_total ? begin + e->group : e->plan.shard_total;
    return end - begin;
}

static size_t zero_nvme_group_bytes(const ZeroHost* e, int g) {
    return zero_align4k(zero_nvme_group_elems(e, g) * sizeof(float));
}

static int zero_nvme_groups(const ZeroHost* e) { return (int)((e->plan.shard_total + e->group - 1) / e->group); }

// buffer b's array for one region of a group: `group` floats
static float* zero_nvme_buf(const ZeroHost* e, int b, int region) {
    return (float*)e->nvme_bufs[(size_t)b * NVME_REGIONS + region];
}

// tags: group * 8 + (is_write << 2) + region. The step reads all four regions of a group
// and writes back three: the gradient is consumed.
static int zero_nvme_submit(ZeroHost* e, int g, int is_write) {
    int b = g % e->nbufs;
    size_t bytes = zero_nvme_group_bytes(e, g);
    for (int r = NVME_P; r <= (is_write ? NVME_V : NVME_G); r++) {
        size_t off = zero_nvme_offset(e, r, (size_t)g * e->group);
        uint64_t tag = (uint64_t)g * 8 + ((uint64_t)is_write << 2) + (uint64_t)r;
        int rc = is_write ? nvme_write_async(&e->nvme, zero_nvme_buf(e, b, r), off, bytes, tag)
                          : nvme_read_async(&e->nvme, zero_nvme_buf(e, b, r), off, bytes, tag);
        if (rc != 0) { return -1; }
        e->moved[is_write ? ZERO_MOVE_NVME_WRITE : ZERO_MOVE_NVME_READ] += bytes;
    }
    return 0;
}

// waits until the requests of (group g, is_write) are done; other completions that
// arrive meanwhile are counted for their own group in `left` (2 entries per group)
static int zero_nvme_wait_group(ZeroHost* e, int* left, int g, int is_write) {
    while (left[2 * g + is_write] > 0) {
        uint64_t tag;
        if (nvme_wait(&e->nvme, &tag) != 0) { return -1; }
        left[2 * (tag / 8) + ((tag >> 2) & 1)]--;
    }
    return 0;
}

// the gradient staging buffer's write, if one is in flight, is done (it is the only
// asynchronous request outside the step: the parameter reads wait for themselves)
static int zero_grad_nvme_settle(ZeroHost* e) {
    if (!e->grad_write_pending) { return 0; }
    e->grad_write_pending = 0;
    return nvme_wait_all(&e->nvme);
}

// Adds unit u's reduced gradient shard (got) into the swap file's gradient region. The
// shard's bytes [lo, hi) rarely fall on 4 KiB blocks, and O_DIRECT moves whole blocks,
// so the span written is [lo, hi) widened to blocks; the neighbours' parts of its first
// and last block are read first and written back as they were. The first add of a step
// starts from zero (0 + got, as the in-memory accumulator does: -0 becomes +0); later
// micro-steps read the span, add and write it back. On the last micro-step the sum's
// squared norm is added to grad_sumsq for the step's clipping. One write is left in
// flight, overlapping the backward of the next units; the next add waits for it first,
// since two spans may share a block.
static int zero_grad_nvme_add(ZeroHost* e, int u, const float* got) {
    ZeroUnit* pu = &e->plan.units[u];
    size_t lo = zero_nvme_offset(e, NVME_G, pu->shard_offset), hi = lo + pu->shard * sizeof(float);
    size_t a = lo / NVME_ALIGN * NVME_ALIGN, b = zero_align4k(hi);
    char* stage = (char*)e->grad_stage;
    float* acc = (float*)(stage + (lo - a));
    if (zero_grad_nvme_settle(e) != 0) { return -1; }
    if (e->grad_in_file[u]) {
        if (nvme_read(&e->nvme, stage, a, b - a) != 0) { return -1; }
        e->moved[ZERO_MOVE_NVME_READ] += b - a;
    } else {
        int head = lo != a, tail = hi != b && !(head && b - a == NVME_ALIGN);  // one block holding both: read once
        if (head && nvme_read(&e->nvme, stage, a, NVME_ALIGN) != 0) { return -1; }
        if (tail && nvme_read(&e->nvme, stage + (b - a) - NVME_ALIGN, b - NVME_ALIGN, NVME_ALIGN) != 0) { return -1; }
        e->moved[ZERO_MOVE_NVME_READ] += (double)(head + tail) * NVME_ALIGN;
        memset(acc, 0, pu->shard * sizeof(float));
    }
    for (size_t i = 0; i < pu->shard; i++) { acc[i] += got[i]; }
    if (e->sched.last_micro) { e->grad_sumsq += grad_norm_squared(acc, pu->shard); }
    if (nvme_write_async(&e->nvme, stage, a, b - a, 0) != 0) { return -1; }
    e->grad_write_pending = 1;
    e->moved[ZERO_MOVE_NVME_WRITE] += b - a;
    e->grad_in_file[u] = 1;
    return 0;
}

// The pipelined optimizer step (ZeRO-Infinity): with buffer_count buffers, the read of
// group i+1 and the writes of earlier groups are in flight while group i is updated.
// A buffer is reused only once the writes of the group it held are done.
static int zero_nvme_step(ZeroHost* e, CpuAdamParams* hp, float weight_decay) {
    int ngroups = zero_nvme_groups(e);
    int* left = (int*)calloc(2 * (size_t)ngroups, sizeof(int));
    if (left == NULL) { return zero_error("zero: out of memory for the NVMe step"); }
    int rc = -1, seg = 0;
    for (int g = 0; g < ngroups; g++) { left[2 * g] = NVME_REGIONS; left[2 * g + 1] = NVME_REGIONS - 1; }
    if (zero_nvme_submit(e, 0, 0) != 0) { goto done; }
    for (int g = 0; g < ngroups; g++) {
        int next = g + 1;
        if (next < ngroups) {
            int prev_owner = next - e->nbufs;  // the group that last used next's buffer
            if (prev_owner >= 0 && zero_nvme_wait_group(e, left, prev_owner, 1) != 0) { goto done; }
            if (zero_nvme_submit(e, next, 0) != 0) { goto done; }
        }
        if (zero_nvme_wait_group(e, left, g, 0) != 0) { goto done; }
        int b = g % e->nbufs;
        size_t g0 = (size_t)g * e->group, g1 = g0 + zero_nvme_group_elems(e, g);
        float* p = zero_nvme_buf(e, b, NVME_P);
        float* m = zero_nvme_buf(e, b, NVME_M);
        float* v = zero_nvme_buf(e, b, NVME_V);
        const float* grad = zero_nvme_buf(e, b, NVME_G);
        while (seg < e->nsegs && e->segs[seg].end <= g0) { seg++; }
        for (int i = seg; i < e->nsegs && e->segs[i].begin < g1; i++) {
            ZeroSegment sg = e->segs[i];
            size_t lo = sg.begin > g0 ? sg.begin : g0, hi = sg.end < g1 ? sg.end : g1;
            hp->weight_decay = sg.decay ? weight_decay : 0.0f;
            float* out = zero_param_out(e, sg.unit);
            if (out == NULL) { goto done; }
            out += sg.unit_lo + (lo - sg.begin);
            if (cpu_adam_step(p + (lo - g0), grad + (lo - g0), CPU_ADAM_FP32, m + (lo - g0), v + (lo - g0),
                              hi - lo, hp, out, CPU_ADAM_FP32) != 0) { goto done; }
            e->moved[ZERO_MOVE_H2D] += (hi - lo) * sizeof(float);
        }
        if (zero_nvme_submit(e, g, 1) != 0) { goto done; }
    }
    if (nvme_wait_all(&e->nvme) != 0 || zero_param_flush(e) != 0) { goto done; }
    rc = 0;
done:
    free(left);
    return rc;
}

// Streams a region of the swap file to a checkpoint (to_swap 0) or from one into the
// file (to_swap 1; fp NULL: zeroes), group by group through buffer 0: checkpoints and
// init hold one group, never the region.
static int zero_nvme_stream(ZeroHost* e, int region, FILE* fp, int to_swap) {
    float* buf = zero_nvme_buf(e, 0, NVME_P);
    for (int g = 0; g < zero_nvme_groups(e); g++) {
        size_t n = zero_nvme_group_elems(e, g), bytes = zero_nvme_group_bytes(e, g);
        size_t off = zero_nvme_offset(e, region, (size_t)g * e->group);
        if (to_swap) {
            memset(buf, 0, bytes);
            if (fp != NULL && fread(buf, sizeof(float), n, fp) != n) { return zero_error("zero: the optimizer state is truncated"); }
            if (nvme_write(&e->nvme, buf, off, bytes) != 0) { return -1; }
        } else {
            if (nvme_read(&e->nvme, buf, off, bytes) != 0) { return -1; }
            if (fwrite(buf, sizeof(float), n, fp) != n) { return zero_error("zero: writing the optimizer state failed: %s", strerror(errno)); }
        }
    }
    return 0;
}

// largest parameter shard of any unit, in elements
static size_t zero_max_shard(const ZeroHost* e) {
    size_t m = 0;
    for (int u = 0; u < e->plan.num_units; u++) { m = e->plan.units[u].shard > m ? e->plan.units[u].shard : m; }
    return m;
}

// The master region from the parameter shards (init, load): unit by unit through one
// shard-sized buffer into group buffer 0, each group written once it is full.
static int zero_nvme_write_master(ZeroHost* e) {
    float* buf = zero_nvme_buf(e, 0, NVME_P);
    float* shard = (float*)malloc(zero_max_shard(e) * sizeof(float) + 64);
    if (shard == NULL) { return zero_error("zero: out of memory for a parameter shard"); }
    int rc = -1, g = 0, ngroups = zero_nvme_groups(e);
    memset(buf, 0, e->group * sizeof(float));
    for (int u = 0; u < e->plan.num_units; u++) {
        ZeroUnit* pu = &e->plan.units[u];
        if (zero_param_shard_get(e, u, shard, pu->shard) != 0) { goto done; }
        for (size_t i = 0; i < pu->shard;) {
            size_t pos = pu->shard_offset + i;
            for (; (size_t)(g + 1) * e->group <= pos; g++) {  // groups before pos are complete
                if (nvme_write(&e->nvme, buf, zero_nvme_offset(e, NVME_P, (size_t)g * e->group), zero_nvme_group_bytes(e, g)) != 0) { goto done; }
                memset(buf, 0, e->group * sizeof(float));
            }
            size_t n = (size_t)(g + 1) * e->group - pos;
            n = n < pu->shard - i ? n : pu->shard - i;
            memcpy(buf + (pos - (size_t)g * e->group), shard + i, n * sizeof(float));
            i += n;
        }
    }
    for (; g < ngroups; g++) {
        if (nvme_write(&e->nvme, buf, zero_nvme_offset(e, NVME_P, (size_t)g * e->group), zero_nvme_group_bytes(e, g)) != 0) { goto done; }
        memset(buf, 0, e->group * sizeof(float));
    }
    rc = 0;
done:
    free(shard);
    return rc;
}

int zero_host_step(void* impl, const ZeroStep* st) {
    ZeroHost* e = (ZeroHost*)impl;
    float lr = st->lr, weight_decay = st->weight_decay;
    int t = st->t;
    if (zero_reduce_drain(e) != 0 || zero_grad_nvme_settle(e) != 0) { return -1; }
    double sumsq;
    if (e->stage == 0) {
        sumsq = grad_norm_squared(e->full_grads, e->plan.padded_total);  // replicated: no communication
    } else {
        if (e->stage == 1 && e->world == 1) {  // stage 1 at one rank did not reduce: the full gradient is the shard
            memcpy(e->shard_grads, e->full_grads, e->plan.shard_total * sizeof(float));
            if (e->host_grads != NULL) {
                memcpy(e->host_grads, e->shard_grads, e->plan.shard_total * sizeof(float));
                e->moved[ZERO_MOVE_D2H] += e->plan.shard_total * sizeof(float);
            }
        }
        // MiCS: each group reduced its own ranks' gradients; the second hop sums them over
        // the groups (the ranks holding the same shards), once per step (stage 3, no offload)
        if (e->rep.world > 1 && zero_allreduce(&e->rep, e->shard_grads, e->plan.shard_total, NULL, NULL) != 0) { return -1; }
        if (e->shard_grads == NULL) {
            sumsq = e->grad_sumsq;
        } else {
            sumsq = grad_norm_squared(e->host_grads != NULL ? e->host_grads : e->shard_grads, e->plan.shard_total);
        }
        if (zero_allreduce_scalars(&e->comm, &sumsq, 1) != 0) { return -1; }
    }
    float scale = adamw_grad_scale(sumsq, e->dp_world, st->grad_clip, &e->norm);
    if (st->skip || !isfinite(e->norm)) {  // an overflow: nothing changes, the gradients go
        zero_host_clear_grads(e);
        return 0;
    }
    CpuAdamParams hp = {lr, e->beta1, e->beta2, e->eps, 0.0f, scale, t};

    // Every path updates with the SIMD CPU Adam (zero3/cpu_adam.h), in place: on the
    // CPU trainer the "device" is host memory too. zero3/adamw.h's scalar adamw_update
    // stays as the tests' reference.
    double t_update = zero_now_ms(), nvme_wait0 = e->nvme.wait_ms;
    if (e->stage == 0) {
        for (int i = 0; i < e->num_tensors; i++) {
            ZeroTensor tr = e->tensors[i];
            size_t off = e->plan.units[tr.unit].full_offset + tr.offset;
            hp.weight_decay = tr.decay ? weight_decay : 0.0f;
            if (cpu_adam_step(e->full_params + off, e->full_grads + off, CPU_ADAM_FP32, e->m + off, e->v + off,
                              tr.size, &hp, NULL, CPU_ADAM_FP32) != 0) { return -1; }
        }
    } else if (e->offload_opt == ZERO_OFFLOAD_NONE) {
        for (int i = 0; i < e->nsegs; i++) {
            ZeroSegment sg = e->segs[i];
            hp.weight_decay = sg.decay ? weight_decay : 0.0f;
            if (cpu_adam_step(zero_param_shard(e, sg.unit) + sg.unit_lo, e->shard_grads + sg.begin, CPU_ADAM_FP32,
                              e->m + sg.begin, e->v + sg.begin, sg.end - sg.begin, &hp, NULL, CPU_ADAM_FP32) != 0) { return -1; }
        }
    } else if (e->offload_opt == ZERO_OFFLOAD_CPU) {
        // SIMD AdamW on the host shards; the updated parameters go straight to the
        // device's shard (the copy back)
        for (int i = 0; i < e->nsegs; i++) {
            ZeroSegment sg = e->segs[i];
            size_t n = sg.end - sg.begin;
            hp.weight_decay = sg.decay ? weight_decay : 0.0f;
            float* out = zero_param_out(e, sg.unit);
            if (out == NULL || cpu_adam_step(e->host_master + sg.begin, e->host_grads + sg.begin, CPU_ADAM_FP32, e->m + sg.begin,
                                             e->v + sg.begin, n, &hp, out + sg.unit_lo, CPU_ADAM_FP32) != 0) { return -1; }
            e->moved[ZERO_MOVE_H2D] += n * sizeof(float);
        }
        if (zero_param_flush(e) != 0) { return -1; }
    } else if (zero_nvme_step(e, &hp, weight_decay) != 0) {
        return -1;
    }
    e->update_ms += zero_now_ms() - t_update;
    e->update_nvme_wait_ms += e->nvme.wait_ms - nvme_wait0;

    // the updated shards go to every rank: stages 1-2 all-gather into the full buffer;
    // stage 3 refreshes its persistent units (the others are gathered at their next use)
    if (e->stage == 1 || e->stage == 2) {
        for (int u = 0; u < e->plan.num_units; u++) {
            ZeroUnit* pu = &e->plan.units[u];
            if (zero_allgather(&e->comm, e->full_params + pu->full_offset, pu->shard, &e->unit_req[u]) != 0) { return -1; }
        }
        for (int u = 0; u < e->plan.num_units; u++) {
            if (zero_comm_wait(&e->comm, &e->unit_req[u]) != 0) { return -1; }
        }
    } else if (e->stage == 3) {
        if (zero_refresh_persistent(e) != 0) { return -1; }
    }

    if (e->sec_ok != NULL) { memset(e->sec_ok, 0, (size_t)e->plan.num_units); }  // hpZ: the slices are of the old parameters
    zero_host_clear_grads(e);
    return 0;
}

// Opens this rank's swap file: the optimizer's regions (master, m, v, gradients) when it
// is on NVMe, then the parameter region for the units not cached on the host.
static int zero_nvme_open(ZeroHost* e, size_t param_bytes) {
    ZeroPlan* p = &e->plan;
    size_t whole = (p->shard_total + 1023) / 1024 * 1024;
    e->nvme_region = whole * sizeof(float);
    size_t opt_bytes = e->offload_opt == ZERO_OFFLOAD_NVME ? NVME_REGIONS * e->nvme_region : 0;
    if (nvme_open(&e->nvme, e->cfg.nvme_path, e->rank, opt_bytes + param_bytes, 8) != 0) { return -1; }
    e->nvme_ready = 1;
    e->mem.nvme_bytes = (double)(opt_bytes + param_bytes);
    e->mem.current[ZERO_MEM_HOST_BUFFERS] += (double)nvme_sums_bytes(opt_bytes + param_bytes);  // the blocks' checksums
    e->mem.peak[ZERO_MEM_HOST_BUFFERS] = e->mem.current[ZERO_MEM_HOST_BUFFERS];
    return 0;
}

// Stage 3: which units' parameter shards stay on the host (on_host[u] = 1) and the rest
// in the swap file: with --offload-param nvme, units stay while max_in_cpu elements allow,
// the schedule's persistent ones first. Returns the host's elements; *file_bytes gets the
// swap file's parameter region (each shard 4 KiB-aligned).
static size_t zero_param_placement(const ZeroPlan* p, const ZeroSchedule* sched, const ZeroConfig* cfg, int* on_host,
                                   size_t* file_bytes) {
    size_t host_elems = 0;
    double budget = cfg->offload_param == ZERO_OFFLOAD_NVME ? (double)cfg->max_in_cpu : 1e300;
    for (int pass = 0; pass < 2; pass++) {  // persistent units first, then in order
        for (int u = 0; u < p->num_units; u++) {
            int persistent = sched->persistent[u];
            if (persistent != (pass == 0) || on_host[u]) { continue; }
            if (persistent || (double)(host_elems + p->units[u].shard) <= budget) {
                on_host[u] = 1;
                host_elems += p->units[u].shard;
            }
        }
    }
    *file_bytes = 0;
    for (int u = 0; u < p->num_units; u++) {
        if (!on_host[u]) { *file_bytes += zero_align4k(p->units[u].shard * sizeof(float)); }
    }
    return host_elems;
}

// Stage 3: where each unit's parameter shard lives (zero_param_placement).
static int zero_param_store_init(ZeroHost* e) {
    ZeroPlan* p = &e->plan;
    int nu = p->num_units;
    e->param_ptr = (float**)calloc(nu, sizeof(float*));
    e->param_file_off = (size_t*)calloc(nu, sizeof(size_t));
    int* on_host = (int*)calloc(nu, sizeof(int));
    if (e->param_ptr == NULL || e->param_file_off == NULL || on_host == NULL) { free(on_host); return zero_error("zero: out of memory"); }
    e->staged_unit = -1;
    size_t file_bytes = 0, max_shard = zero_max_shard(e) * sizeof(float);
    size_t host_elems = zero_param_placement(p, &e->sched, &e->cfg, on_host, &file_bytes);
    int kind = e->offload_param != ZERO_OFFLOAD_NONE ? ZERO_MEM_HOST_PARAMS : ZERO_MEM_PARAMS;
    e->shard_params = (float*)zero_alloc(e, kind, host_elems);
    if (e->shard_params == NULL) { free(on_host); return -1; }
    int need_nvme = file_bytes > 0 || e->offload_opt == ZERO_OFFLOAD_NVME;
    if (need_nvme && zero_nvme_open(e, file_bytes) != 0) { free(on_host); return -1; }
    size_t host_off = 0, file_off = e->offload_opt == ZERO_OFFLOAD_NVME ? NVME_REGIONS * e->nvme_region : 0;
    for (int u = 0; u < nu; u++) {
        if (on_host[u]) {
            e->param_ptr[u] = e->shard_params + host_off;
            host_off += p->units[u].shard;
        } else {
            e->param_file_off[u] = file_off;
            file_off += zero_align4k(p->units[u].shard * sizeof(float));
        }
    }
    free(on_host);
    if (file_bytes > 0) {
        e->param_stage_bytes = zero_align4k(max_shard);
        e->param_stage = (float*)nvme_alloc(e->param_stage_bytes);  // huge pages: few segments per O_DIRECT request
        if (e->param_stage == NULL) { return zero_error("zero: out of memory for the parameter staging buffer"); }
        e->mem.current[ZERO_MEM_HOST_BUFFERS] += (double)e->param_stage_bytes;
        e->mem.peak[ZERO_MEM_HOST_BUFFERS] = e->mem.current[ZERO_MEM_HOST_BUFFERS];
    }
    return 0;
}

// the tensors' parts of this rank's shard, in shard-buffer order
static int zero_segments_init(ZeroHost* e) {
    e->segs = (ZeroSegment*)malloc((size_t)e->num_tensors * sizeof(ZeroSegment));
    if (e->segs == NULL) { return zero_error("zero: out of memory"); }
    e->nsegs = 0;
    for (int i = 0; i < e->num_tensors; i++) {
        ZeroTensor tr = e->tensors[i];
        size_t full, sh, n;
        int in = zero_plan_tensor_part(&e->plan, tr.unit, e->rank, tr.offset, tr.offset + tr.size, &full, &sh, &n);
        if (in < 0) { return -1; }
        if (in == 0) { continue; }
        size_t so = e->plan.units[tr.unit].shard_offset;
        e->segs[e->nsegs++] = (ZeroSegment){sh, sh + n, tr.unit, sh - so, tr.decay};
    }
    return 0;
}

// this rank's parameter shards, copied into one array in shard-buffer order
static int zero_shards_copy_out(ZeroHost* e, float* dst) {
    for (int u = 0; u < e->plan.num_units; u++) {
        if (zero_param_shard_get(e, u, dst + e->plan.units[u].shard_offset, e->plan.units[u].shard) != 0) { return -1; }
    }
    return 0;
}

// the NVMe step's sub-group: sub_group_size elements in whole 4 KiB blocks, at most the
// (4 KiB-padded) shard and the 1 GiB one registered buffer may hold
static size_t zero_nvme_group_size(const ZeroConfig* cfg, size_t shard_total) {
    size_t g = ((size_t)cfg->sub_group_size + 1023) / 1024 * 1024;
    size_t whole = (shard_total + 1023) / 1024 * 1024, most = ((size_t)1 << 30) / sizeof(float);
    g = g < whole ? g : whole;
    return g < most ? g : most;
}

// sets of group buffers (p, m, v, g each): buffer_count, at least 2 (one read ahead while one updates)
static int zero_nvme_buffer_sets(const ZeroConfig* cfg) { return cfg->buffer_count >= 2 ? cfg->buffer_count : 2; }

// a shard's span in the gradient region: its bytes widened to 4 KiB blocks at both ends
static size_t zero_grad_stage_bytes(size_t max_shard) { return zero_align4k(max_shard * sizeof(float)) + NVME_ALIGN; }

// Optimizer offload. cpu: the gradient shards, the fp32 master and the moments on the
// host. nvme (stage 3; the file was opened with the parameter store): master, moments and
// gradient shards in this rank's swap file, moved by sub-groups of sub_group_size
// elements (whole 4 KiB blocks, at most the 1 GiB a registered buffer may hold) through
// buffer_count sets of group buffers, and one unit's gradient shard staged at a time.
static int zero_offload_init(ZeroHost* e) {
    ZeroPlan* p = &e->plan;
    if (e->offload_opt == ZERO_OFFLOAD_CPU) {
        e->host_grads = (float*)zero_alloc(e, ZERO_MEM_HOST_GRADS, p->shard_total);
        e->host_master = e->host_grads != NULL ? (float*)zero_alloc(e, ZERO_MEM_HOST_PARAMS, p->shard_total) : NULL;
        if (e->host_master == NULL) { return -1; }
        return zero_shards_copy_out(e, e->host_master);
    }
    e->group = zero_nvme_group_size(&e->cfg, p->shard_total);
    e->nbufs = zero_nvme_buffer_sets(&e->cfg);
    void** bufs = NULL;
    if (nvme_buffers_alloc(&e->nvme, e->nbufs * NVME_REGIONS, e->group * sizeof(float), &bufs) != 0) { return -1; }
    e->nvme_bufs = bufs;
    e->mem.current[ZERO_MEM_HOST_BUFFERS] += (double)e->nbufs * NVME_REGIONS * e->group * sizeof(float);
    e->grad_stage_bytes = zero_grad_stage_bytes(zero_max_shard(e));
    e->grad_stage = (float*)nvme_alloc(e->grad_stage_bytes);
    e->grad_in_file = (unsigned char*)calloc((size_t)p->num_units, 1);
    if (e->grad_stage == NULL || e->grad_in_file == NULL) { return zero_error("zero: out of memory for the gradient staging buffer"); }
    e->mem.current[ZERO_MEM_HOST_BUFFERS] += (double)e->grad_stage_bytes;
    e->mem.peak[ZERO_MEM_HOST_BUFFERS] = e->mem.current[ZERO_MEM_HOST_BUFFERS];
    // the master shards from the parameter store, zero moments (the gradient region is
    // written before it is read: grad_in_file)
    if (zero_nvme_write_master(e) != 0 || zero_nvme_stream(e, NVME_M, NULL, 1) != 0) { return -1; }
    return zero_nvme_stream(e, NVME_V, NULL, 1);
}

// Unit u's initial parameters: this rank's shard from in->fill (into the full buffer, or
// at stage 3 into the parameter store, through a unit buffer only where the unit is
// persistent or its shard lives on NVMe), the ranks' agreement that every fill succeeded,
// then the gather of what this rank holds whole. The padding stays zero.
static int zero_host_fill_unit(ZeroHost* e, const ZeroInit* in, int u) {
    ZeroUnit* pu = &e->plan.units[u];
    size_t mine = (size_t)e->rank * pu->shard, n = zero_plan_shard_numel(&e->plan, u, e->rank);
    int whole = e->stage < 3 || e->sched.persistent[u];
    float* buf = e->stage < 3 ? e->full_params + pu->full_offset : NULL;
    float* shard = e->stage < 3 ? buf + mine : zero_param_shard(e, u);  // NULL: on NVMe
    if (e->stage == 3 && (whole || shard == NULL)) {
        buf = (float*)zero_buf_get(e, pu->padded, 1);  // zeroed: the padding
        if (buf == NULL) { return -1; }
        shard = buf + mine;
    }
    int failed = n > 0 && in->fill(in->fill_ctx, u, mine, n, shard) != 0;
    if (!failed && e->stage == 3 && shard != zero_param_shard(e, u)) { failed = zero_param_shard_put(e, u, shard) != 0; }
    int rc = zero_fill_agree(e->comm.comm, failed);
    if (rc == 0 && whole) { rc = zero_allgather(&e->comm, buf, pu->shard, NULL); }
    if (e->stage < 3) { return rc; }
    if (rc == 0 && e->sched.persistent[u]) {  // small: stays gathered for the whole run
        e->unit_buf[u] = buf;
        zero_schedule_gathered(&e->sched, u);
        return 0;
    }
    zero_buf_put(e, buf, pu->padded);  // to the pool (which zero_host_free empties): the first gather of a unit this size reuses it
    return rc;
}

int zero_host_comms_init(ZeroHost* e, MPI_Comm world) {
    const ZeroConfig* cfg = &e->cfg;
    int wrank = 0, wsize = 0, node = 0;
    MPI_Comm_rank(world, &wrank);
    MPI_Comm_size(world, &wsize);
    if (zero_comm_node(world, cfg->ranks_per_node, &node) != 0) { return -1; }
    ZeroSpan all;   // where the whole world's ranks are, for the report
    if (zero_comm_span(world, node, &all) != 0) { return -1; }
    e->nodes = all.nodes;
    e->per_node = all.span == ZERO_SPAN_UNEVEN ? 0 : all.per_node;
    int S = cfg->mics_shard_size > 0 ? cfg->mics_shard_size : wsize;
    if (wsize % S != 0) { return zero_error("zero: mics_shard_size %d does not divide the %d ranks", S, wsize); }
    MPI_Comm group = MPI_COMM_NULL, reps = MPI_COMM_NULL;
    int rc = MPI_Comm_split(world, wrank / S, wrank, &group);
    if (rc == MPI_SUCCESS) { rc = MPI_Comm_split(world, wrank % S, wrank, &reps); }
    if (rc != MPI_SUCCESS) { return zero_comm_mpi_error("MPI_Comm_split (the shard groups)", rc); }
    rc = zero_comm_init_nodes(&e->comm, group, node);
    if (rc == 0) { rc = zero_comm_init_nodes(&e->rep, reps, node); }
    MPI_Comm_free(&group);
    MPI_Comm_free(&reps);
    if (rc != 0) { return -1; }
    e->world = e->comm.world;
    e->rank = e->comm.rank;
    e->dp_world = wsize;
    int P = cfg->hpz_partition_size;
    if (P > e->world || e->world % P != 0) { return zero_error("zero: zero_hpz_partition_size %d does not divide the %d ranks", P, e->world); }
    MPI_Comm sec = MPI_COMM_NULL;
    rc = MPI_Comm_split(e->comm.comm, e->rank / P, e->rank, &sec);
    if (rc != MPI_SUCCESS) { return zero_comm_mpi_error("MPI_Comm_split (the hpZ groups)", rc); }
    rc = zero_comm_init_nodes(&e->hpz, sec, node);
    MPI_Comm_free(&sec);
    return rc;
}

int zero_host_init(void* impl, const ZeroInit* in) {
    ZeroHost* e = (ZeroHost*)impl;
    const ZeroConfig* cfg = in->cfg;
    const ZeroModel* model = in->model;
    int num_units = model->num_units;
    memset(e, 0, sizeof(*e));
    e->cfg = *cfg;
    e->stage = cfg->stage;
    e->offload_opt = cfg->offload_optimizer;
    e->offload_param = cfg->offload_param;
    e->staged_unit = -1;  // no NVMe parameter shard staged
    if (e->offload_param != ZERO_OFFLOAD_NONE && e->stage != 3) {
        return zero_error("zero: parameter offload needs ZeRO stage 3");
    }
    if (e->offload_param == ZERO_OFFLOAD_NVME && e->offload_opt == ZERO_OFFLOAD_NONE) {
        // the step writes NVMe-resident shards through the host: the optimizer must run there
        return zero_error("zero: offload_param nvme needs offload_optimizer cpu or nvme");
    }
    if (e->offload_opt != ZERO_OFFLOAD_NONE && e->stage == 0) {
        return zero_error("zero: optimizer offload needs ZeRO stage 1 or more");
    }
    e->beta1 = in->beta1; e->beta2 = in->beta2; e->eps = in->eps;
    if (zero_host_comms_init(e, in->comm) != 0) { return -1; }
    if (zero_plan_init(&e->plan, model->unit_numel, num_units, e->world, e->rank, sizeof(float)) != 0) { return -1; }
    if (zero_schedule_init(&e->sched, model, &e->plan, cfg) != 0) { return -1; }
    ZeroPlan* p = &e->plan;
    e->num_tensors = model->num_tensors;
    e->tensors = (ZeroTensor*)malloc(model->num_tensors * sizeof(ZeroTensor));
    e->unit_buf = (float**)calloc(num_units, sizeof(float*));
    e->unit_req = (ZeroRequest*)calloc(num_units, sizeof(ZeroRequest));
    e->grad_buf = (float**)calloc(num_units, sizeof(float*));
    e->red_req = (ZeroRequest*)calloc(num_units, sizeof(ZeroRequest));
    e->red_recv = (float**)calloc(num_units, sizeof(float*));
    e->red_stage = (float**)calloc(num_units, sizeof(float*));
    if (!e->tensors || !e->unit_buf || !e->unit_req || !e->grad_buf || !e->red_req || !e->red_recv || !e->red_stage) {
        return zero_error("zero: out of memory for the engine's tables");
    }
    memcpy(e->tensors, model->tensors, model->num_tensors * sizeof(ZeroTensor));
    for (int u = 0; u < num_units; u++) { e->unit_req[u].unit = e->red_req[u].unit = u; }  // named by the watchdog

    // the initial parameters (zero3/zero.h's [Note: partitioned init]): stages 0-2 keep the
    // full padded buffer, each rank fills its shards there and the units are all-gathered.
    // Stage 3 keeps only its shards (and the small persistent units whole): the full model
    // is never held, which is what lets stage 3 hold models that do not fit one rank.
    if (e->stage < 3) {
        e->full_params = (float*)zero_alloc(e, ZERO_MEM_PARAMS, p->padded_total);
        if (e->full_params == NULL) { return -1; }
    } else if (zero_param_store_init(e) != 0) {
        return -1;
    }
    for (int u = 0; u < num_units; u++) {
        if (zero_host_fill_unit(e, in, u) != 0) { return -1; }
    }
    e->unit_sec = (unsigned char*)calloc(num_units, 1);
    if (e->unit_sec == NULL) { return zero_error("zero: out of memory for the engine's tables"); }
    if (e->hpz.world > 1) {
        e->sec = (float*)zero_alloc(e, ZERO_MEM_PARAMS, p->padded_total / (size_t)e->hpz.world);
        e->sec_ok = (unsigned char*)calloc(num_units, 1);
        if (e->sec == NULL || e->sec_ok == NULL) { return zero_error("zero: out of memory for hpZ's secondary parameters"); }
    }
    if (e->stage < 2) {
        e->full_grads = (float*)zero_alloc(e, ZERO_MEM_GRADS, p->padded_total);
        if (e->full_grads == NULL) { return -1; }
    }
    if (e->stage >= 1 && e->offload_opt != ZERO_OFFLOAD_NVME) {  // NVMe: the swap file's gradient region
        e->shard_grads = (float*)zero_alloc(e, ZERO_MEM_GRADS, p->shard_total);
        if (e->shard_grads == NULL) { return -1; }
    }
    e->opt_elems = e->stage == 0 ? p->padded_total : p->shard_total;
    if (e->offload_opt != ZERO_OFFLOAD_NVME) {  // NVMe: the moments live in the swap file
        int kind = e->offload_opt == ZERO_OFFLOAD_CPU ? ZERO_MEM_HOST_OPTIMIZER : ZERO_MEM_OPTIMIZER;
        e->m = (float*)zero_alloc(e, kind, e->opt_elems);
        e->v = (float*)zero_alloc(e, kind, e->opt_elems);
        if (e->m == NULL || e->v == NULL) { return -1; }
    }
    if (e->stage >= 1 && zero_segments_init(e) != 0) { return -1; }
    if (e->offload_opt != ZERO_OFFLOAD_NONE && zero_offload_init(e) != 0) { return -1; }
    return 0;
}

void zero_host_free(void* impl) {
    ZeroHost* e = (ZeroHost*)impl;
    if (e == NULL) { return; }
    for (int u = 0; u < e->plan.num_units; u++) {
        if (e->unit_buf != NULL) { free(e->unit_buf[u]); }
        if (e->grad_buf != NULL) { free(e->grad_buf[u]); }
        if (e->red_recv != NULL) { free(e->red_recv[u]); }
        if (e->red_stage != NULL) { free(e->red_stage[u]); }
    }
    free(e->full_params); free(e->shard_params); free(e->full_grads); free(e->shard_grads);
    free(e->m); free(e->v);
    free(e->tensors); free(e->unit_buf); free(e->unit_req); free(e->grad_buf); free(e->red_req); free(e->red_recv); free(e->red_stage);
    for (int i = 0; i < e->npool; i++) { free(e->pool[i].ptr); }
    free(e->segs); free(e->host_grads); free(e->host_master); free(e->grad_in_file);
    free(e->param_ptr); free(e->param_file_off); free(e->param_stage);
    if (e->nvme_ready) { nvme_close(&e->nvme, 1); }  // also frees the registered buffers
    free(e->grad_stage);  // after the close, which waits for a write still reading it
    zero_schedule_free(&e->sched);
    zero_plan_free(&e->plan);
    free(e->sec); free(e->sec_ok); free(e->unit_sec);
    zero_comm_free(&e->comm);
    zero_comm_free(&e->rep);
    zero_comm_free(&e->hpz);
    free(e);
}

int zero_host_master_shard(void* impl, int u, size_t* begin, size_t* n, float* out) {
    ZeroHost* e = (ZeroHost*)impl;
    ZeroUnit* pu = &e->plan.units[u];
    *begin = (size_t)e->rank * pu->shard;
    *n = zero_plan_shard_numel(&e->plan, u, e->rank);
    if (out == NULL || *n == 0) { return 0; }
    if (e->stage < 3) {
        memcpy(out, e->full_params + pu->full_offset + *begin, *n * sizeof(float));
        return 0;
    }
    return zero_param_shard_get(e, u, out, *n);
}

// bytes of this rank's state after its header: the parameters it owns and m, v
static size_t zero_host_state_bytes(const ZeroHost* e) {
    size_t params = e->stage == 0 ? e->plan.padded_total : e->plan.shard_total;
    return (params + 2 * e->opt_elems) * sizeof(float);
}

int zero_host_save(void* impl, FILE* fp) {
    ZeroHost* e = (ZeroHost*)impl;
    ZeroPlan* p = &e->plan;
    ZeroStateHeader h = zero_state_header("host", e->stage, p, sizeof(float), zero_host_state_bytes(e));
    if (zero_state_write_header(fp, &h) != 0 || zero_grad_nvme_settle(e) != 0) { return -1; }
    int ok = 1;
    if (e->stage == 0) {
        ok = fwrite(e->full_params, sizeof(float), p->padded_total, fp) == p->padded_total;
    } else {
        float* tmp = (float*)malloc(zero_max_shard(e) * sizeof(float) + 64);
        ok = tmp != NULL;
        for (int u = 0; u < p->num_units && ok; u++) {
            size_t n = p->units[u].shard;
            ok = zero_param_shard_get(e, u, tmp, n) == 0 && fwrite(tmp, sizeof(float), n, fp) == n;
        }
        free(tmp);
    }
    if (ok && e->offload_opt == ZERO_OFFLOAD_NVME) {  // the moments come from the swap file
        return zero_nvme_stream(e, NVME_M, fp, 0) != 0 || zero_nvme_stream(e, NVME_V, fp, 0) != 0 ? -1 : 0;
    }
    ok = ok && fwrite(e->m, sizeof(float), e->opt_elems, fp) == e->opt_elems;
    ok = ok && fwrite(e->v, sizeof(float), e->opt_elems, fp) == e->opt_elems;
    return ok ? 0 : zero_error("zero: writing the optimizer state failed: %s", strerror(errno));
}

int zero_host_load(void* impl, FILE* fp) {
    ZeroHost* e = (ZeroHost*)impl;
    ZeroPlan* p = &e->plan;
    ZeroStateHeader want = zero_state_header("host", e->stage, p, sizeof(float), zero_host_state_bytes(e));
    if (zero_state_read_header(fp, &want) != 0 || zero_grad_nvme_settle(e) != 0) { return -1; }
    int ok = 1;
    if (e->stage == 0) {
        ok = fread(e->full_params, sizeof(float), p->padded_total, fp) == p->padded_total;
    } else {
        float* tmp = (float*)malloc(zero_max_shard(e) * sizeof(float) + 64);
        ok = tmp != NULL;
        for (int u = 0; u < p->num_units && ok; u++) {
            size_t n = p->units[u].shard;
            ok = fread(tmp, sizeof(float), n, fp) == n && zero_param_shard_put(e, u, tmp) == 0;
        }
        free(tmp);
    }
    if (!ok) { return zero_error("zero: the optimizer state is truncated or the swap file failed"); }
    if (e->offload_opt == ZERO_OFFLOAD_NVME) {  // the moments go to the swap file, the master too
        if (zero_nvme_stream(e, NVME_M, fp, 1) != 0 || zero_nvme_stream(e, NVME_V, fp, 1) != 0 ||
            zero_nvme_write_master(e) != 0) { return -1; }
    } else {
        ok = fread(e->m, sizeof(float), e->opt_elems, fp) == e->opt_elems;
        ok = ok && fread(e->v, sizeof(float), e->opt_elems, fp) == e->opt_elems;
        if (!ok) { return zero_error("zero: the optimizer state is truncated or the swap file failed"); }
    }
    if (e->host_master != NULL && zero_shards_copy_out(e, e->host_master) != 0) { return -1; }
    if (e->stage == 1 || e->stage == 2) {
        for (int u = 0; u < p->num_units; u++) {
            if (zero_allgather(&e->comm, e->full_params + p->units[u].full_offset, p->units[u].shard, NULL) != 0) { return -1; }
        }
    } else if (e->stage == 3) {
        if (zero_refresh_persistent(e) != 0) { return -1; }
    }
    return 0;
}

static void zero_pool_walk(ZeroPoolWalk* w, size_t elems, int delta) {
    int i = 0;
    while (i < w->n && w->elems[i] != elems) { i++; }
    if (i == w->n) { w->elems[i] = elems; w->held[i] = w->most[i] = 0; w->n++; }
    w->held[i] += delta;
    if (w->held[i] > w->most[i]) { w->most[i] = w->held[i]; }
}

// the oldest reduction completes as zero_reduce_complete_one completes it
static void zero_walk_reduced(ZeroSchedule* s, const ZeroPlan* p, ZeroPoolWalk* w) {
    int v = zero_schedule_reduce_oldest(s);
    if (w->red_stage[v] > 0) { zero_pool_walk(w, w->red_stage[v], -1); }
    if (w->stage >= 2) {
        zero_pool_walk(w, p->units[v].shard, -1);    // red_recv
        zero_pool_walk(w, p->units[v].padded, -1);   // grad_buf
    }
}

// a reduction starts as zero_host_reduce starts one: the window behind first
static void zero_walk_reduce(ZeroSchedule* s, const ZeroPlan* p, ZeroPoolWalk* w, int u) {
    while (zero_schedule_reduce_full(s, u)) { zero_walk_reduced(s, p, w); }
    zero_schedule_reduce_started(s, u);
    if (w->red_stage[u] > 0) { zero_pool_walk(w, w->red_stage[u], 1); }
    if (w->stage >= 2) { zero_pool_walk(w, p->units[u].shard, 1); }
}

// Walks a training pass and a forward one as the engine makes them (begin; per use: fetch
// and its prefetch, the gradient at the unit's last use of a training pass, release, its
// reduce; end), counting the pool's buffers by size. The model's calls are
// taken to be the trainer's: a unit's gradient is opened at its last use and reduced after
// its release, except the pass's first unit (the input embedding: the encoder's backward
// adds to it last), reduced at the end.
static int zero_host_walk(ZeroSchedule* s, const ZeroPlan* p, ZeroPoolWalk* w) {
    int stage = w->stage;
    int* ahead = (int*)malloc(((size_t)s->prefetch_depth + 1) * sizeof(int));
    if (ahead == NULL) { return zero_error("zero estimate: out of memory"); }
    for (int u = 0; s->gathers && u < s->num_units; u++) {
        if (s->persistent[u]) { zero_pool_walk(w, p->units[u].padded, 1); zero_schedule_gathered(s, u); }
    }
    for (int pass = 0; pass < ZERO_NUM_PASSES; pass++) {
        zero_schedule_begin(s, pass, 1);
        int n = zero_schedule_prefetch(s, 0, ahead);
        for (int k = 0; k < n; k++) { zero_pool_walk(w, p->units[ahead[k]].padded, 1); }
        const int* unit = s->unit[pass];
        int len = s->len[pass];
        for (int i = 0; i < len; i++) {
            int u = unit[i], last = pass == ZERO_PASS_TRAIN;
            for (int j = i + 1; j < len && last; j++) { last = unit[j] != u; }
            if (s->gathers) {
                if (s->state[u] == ZERO_UNIT_NOT_LIVE) { zero_schedule_started(s, u); zero_pool_walk(w, p->units[u].padded, 1); }
                zero_schedule_gathered(s, u);
                n = zero_schedule_prefetch(s, i + 1, ahead);
                for (int k = 0; k < n; k++) { zero_pool_walk(w, p->units[ahead[k]].padded, 1); }
            }
            if (last && stage >= 2) { zero_pool_walk(w, p->units[u].padded, 1); }
            if (zero_schedule_release(s, u) == 1) { zero_pool_walk(w, p->units[u].padded, -1); zero_schedule_freed(s, u); }
            if (last && u != unit[0]) { zero_walk_reduce(s, p, w, u); }
        }
        if (pass == ZERO_PASS_TRAIN) { zero_walk_reduce(s, p, w, unit[0]); }
        while (s->red_count > 0) { zero_walk_reduced(s, p, w); }
        for (int u = 0; s->gathers && u < s->num_units; u++) {
            if (!s->persistent[u] && s->state[u] != ZERO_UNIT_NOT_LIVE) { zero_pool_walk(w, p->units[u].padded, -1); zero_schedule_freed(s, u); }
        }
        zero_schedule_end(s);
    }
    free(ahead);
    return 0;
}

int zero_host_estimate(const ZeroModel* model, const ZeroConfig* cfg, int world, ZeroHostEstimate* out) {
    // every declaration before the first goto: the header is also compiled as C++
    ZeroPlan p;
    ZeroSchedule s;
    int rc = -1, stage = cfg->stage, nu = model->num_units, nvme_opt = cfg->offload_optimizer == ZERO_OFFLOAD_NVME;
    ZeroPoolWalk w = {NULL, NULL, NULL, 0, stage, NULL};
    size_t* red_stage = NULL;
    int* on_host = NULL;
    size_t max_shard = 0, max_padded = 0, file_bytes = 0;
    const double f = sizeof(float);
    double params, grads, opt_elems, moments, cpu;
    memset(out, 0, sizeof(*out));
    memset(&s, 0, sizeof(s));
    // MiCS: the states are sharded over the shard group, not the world
    if (cfg->mics_shard_size > 0 && cfg->mics_shard_size < world) { world = cfg->mics_shard_size; }
    if (zero_plan_init(&p, model->unit_numel, model->num_units, world, 0, sizeof(float)) != 0) { return -1; }
    if (zero_schedule_init(&s, model, &p, cfg) != 0) { goto done; }
    for (int u = 0; u < nu; u++) {
        max_shard = p.units[u].shard > max_shard ? p.units[u].shard : max_shard;
        max_padded = p.units[u].padded > max_padded ? p.units[u].padded : max_padded;
    }
    w.elems = (size_t*)calloc(3 * (size_t)nu, sizeof(size_t));   // sizes: a unit's padded, shard and staging
    w.held = (int*)calloc(3 * (size_t)nu, sizeof(int));
    w.most = (int*)calloc(3 * (size_t)nu, sizeof(int));
    on_host = (int*)calloc((size_t)nu, sizeof(int));
    red_stage = (size_t*)calloc((size_t)nu, sizeof(size_t));
    if (w.elems == NULL || w.held == NULL || w.most == NULL || on_host == NULL || red_stage == NULL) { zero_error("zero estimate: out of memory"); goto done; }
    for (int u = 0; u < nu && zero_red_staged(cfg); u++) { red_stage[u] = zero_rs_stage_elems(world, p.units[u].shard); }
    w.red_stage = red_stage;
    params = stage < 3 ? (double)p.padded_total : (double)zero_param_placement(&p, &s, cfg, on_host, &file_bytes);
    grads = (stage < 2 ? (double)p.padded_total : 0.0) + (stage >= 1 && !nvme_opt ? (double)p.shard_total : 0.0);
    opt_elems = stage == 0 ? (double)p.padded_total : (double)p.shard_total;
    moments = nvme_opt ? 0.0 : 2.0 * opt_elems;
    cpu = cfg->offload_optimizer == ZERO_OFFLOAD_CPU ? 2.0 * (double)p.shard_total : 0.0;  // gradients, master
    if (stage == 3 && cfg->hpz_partition_size > 1) { params += (double)p.padded_total / cfg->hpz_partition_size; }  // hpZ's slices
    // (the reductions' staging is in the walk, as on a flat span; the scratch of the
    // hierarchical hops across nodes, which take none of it, and of qwZ and qgZ is not counted)
    out->states = (params + grads + moments + cpu) * f;
    if (zero_host_walk(&s, &p, &w) != 0) { goto done; }
    for (int i = 0; i < w.n; i++) {
        out->buffers += (double)w.most[i] * (double)w.elems[i] * f;
        for (int k = 0; k < ZERO_EST_POOL_SIZES; k++) {  // insert among the largest sizes
            if (w.most[i] == 0 || w.elems[i] <= out->pool_elems[k]) { continue; }
            for (int j = ZERO_EST_POOL_SIZES - 1; j > k; j--) { out->pool_elems[j] = out->pool_elems[j - 1]; out->pool_count[j] = out->pool_count[j - 1]; }
            out->pool_elems[k] = w.elems[i];
            out->pool_count[k] = w.most[i];
            break;
        }
    }
    if (nvme_opt) {
        double group = (double)zero_nvme_group_size(cfg, p.shard_total);
        out->host_buffers += zero_nvme_buffer_sets(cfg) * (double)NVME_REGIONS * group * f + (double)zero_grad_stage_bytes(max_shard);
        out->swap += NVME_REGIONS * (double)((p.shard_total + 1023) / 1024 * 1024) * f;
    }
    if (file_bytes > 0) { out->host_buffers += (double)zero_align4k(max_shard * sizeof(float)); }
    out->swap += (double)file_bytes;
    if (out->swap > 0) { out->host_buffers += (double)nvme_sums_bytes((size_t)out->swap); }  // the blocks' checksums
    out->unit = (double)max_padded * f;
    rc = 0;
done:
    free(w.elems); free(w.held); free(w.most); free(on_host); free(red_stage);
    zero_schedule_free(&s);
    zero_plan_free(&p);
    return rc;
}

static int zero_host_flush(void* impl) { (void)impl; return 0; }

int zero_host_stats(void* impl, ZeroStats* s) {
    ZeroHost* e = (ZeroHost*)impl;
    s->norm = e->norm;
    // every communicator's traffic: the shard group's, MiCS's replicas', hpZ's group's
    const ZeroComm* cs[3] = {&e->comm, &e->rep, &e->hpz};
    s->wait_ms = 0.0;
    memset(s->comm_bytes, 0, sizeof(s->comm_bytes));
    memset(s->link_bytes, 0, sizeof(s->link_bytes));
    for (int i = 0; i < 3; i++) {
        s->wait_ms += cs[i]->wait_ms;
        zero_stats_add_traffic(s, cs[i]->bytes, cs[i]->link_bytes);
    }
    s->links_known = 1;
    s->nodes = e->nodes;
    s->ranks_per_node = e->per_node;
    memcpy(s->moved, e->moved, sizeof(s->moved));
    s->update_ms = e->update_ms;
    s->nvme_wait_ms = e->nvme.wait_ms;
    s->update_nvme_wait_ms = e->update_nvme_wait_ms;
    memcpy(s->mem, e->mem.peak, sizeof(s->mem));
    s->mem_peak = e->mem.total_peak;
    s->nvme_bytes = e->mem.nvme_bytes;
    s->padded_total = e->plan.padded_total;
    return 0;
}

static const ZeroOps zero_host_ops = {
    "host", zero_host_begin, zero_host_fetch, zero_host_release, zero_host_grad, zero_host_reduce, zero_host_end,
    zero_host_step, zero_host_flush, zero_host_stats, zero_host_save, zero_host_load, zero_host_master_shard, zero_host_free,
};

int zero_host_create(Zero* z, const ZeroInit* in) {
    return zero_create(z, &zero_host_ops, calloc(1, sizeof(ZeroHost)), zero_host_init, in);
}
