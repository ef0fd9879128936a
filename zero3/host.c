// zero3/host.c: the implementation (the interface and its notes: zero3/host.h)
#include "zero3/host.h"  // this module's types and prototypes
#include "zero3/host_internal.h"  // the helpers host*.c share
#include "zero3/util.h"     // zero_error, zero_errmsg, zero_now_ms, zero_clear

static const char* const zero_mem_names[ZERO_MEM_KINDS] = {"params", "grads", "optimizer", "buffers",
    "host params", "host grads", "host optimizer", "host buffers"};

void* zero_alloc(ZeroHost* e, int kind, size_t elems) {
    size_t bytes = (elems * sizeof(float) + 63) / 64 * 64;
    if (bytes == 0) { bytes = 64; }
    void* p = aligned_alloc(64, bytes);
    if (p == NULL) {
        zero_error("zero: out of memory allocating %.1f MiB of %s", bytes / 1048576.0, zero_mem_names[kind]);
        return NULL;
    }
    zero_clear(p, bytes);  // (on every core: a rank's shards are GBs at d48)
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

void* zero_buf_get(ZeroHost* e, size_t elems, int zeroed) {
    for (int i = e->npool - 1; i >= 0; i--) {
        if (e->pool[i].elems != elems) { continue; }
        void* p = e->pool[i].ptr;
        e->pool[i] = e->pool[--e->npool];
        if (zeroed) { memset(p, 0, elems * sizeof(float)); }
        return p;
    }
    return zero_alloc(e, ZERO_MEM_BUFFERS, elems);  // new memory comes zeroed
}

void zero_buf_put(ZeroHost* e, void* p, size_t elems) {
    if (p == NULL) { return; }
    if (e->npool < ZERO_POOL_MAX) {
        e->pool[e->npool].ptr = p;
        e->pool[e->npool].elems = elems;
        e->npool++;
        return;
    }
    zero_release_mem(e, ZERO_MEM_BUFFERS, p, elems);
}

// ----------------------------------------------------------------------------
// the mover (zero3/pass.h): the driver decides, these move bytes over MPI

int zero_ahead_count(const ZeroPlan* p, const int* on_host, const ZeroConfig* cfg, size_t param_file_bytes) {
    int n = 0;
    for (int u = 0; param_file_bytes > 0 && u < p->num_units; u++) { n += !on_host[u]; }
    return cfg->param_buffer_count < n ? cfg->param_buffer_count : n;
}

// the read-ahead buffer that holds (or is being filled with) unit u's shard, or -1
static int zero_ahead_find(const ZeroHost* e, int u) {
    for (int k = 0; k < e->nahead; k++) {
        if (e->ahead_unit[k] == u) { return k; }
    }
    return -1;
}

// Every read ahead is over and forgotten, at a pass's end: a guess the schedule overtook,
// or one the pass did not reach (the step and a load change the shards they read).
static int zero_ahead_drop(ZeroHost* e) {
    int rc = 0;
    for (int k = 0; k < e->nahead; k++) {
        int u = e->ahead_unit[k];
        e->ahead_unit[k] = -1;
        if (u >= 0 && zero_swap_param_wait(&e->swap, u) != 0) { rc = -1; }
    }
    return rc;
}

// ZeroMover.upcoming: unit u's gather comes after those started. With its shard on NVMe
// and a read-ahead buffer free (offload_param.buffer_count of them), its read starts now,
// overlapping the compute of the units before it; 1 then (or when it is being read
// already), so that the pass driver may hint the unit after it. 0 stops the hints: a unit
// whose shard is in memory, or no free buffer. A deferred update is carried through u
// first; the hints stop where they do so that it is carried no further than the reads.
static int zero_host_upcoming(void* be, int u) {
    ZeroHost* e = (ZeroHost*)be;
    if (zero_ahead_find(e, u) >= 0) { return 1; }  // being read already
    int nvme = e->nahead > 0 && zero_param_shard(e, u) == NULL;
    int k = nvme ? zero_ahead_find(e, -1) : -1;
    if (nvme && k < 0) { return 0; }  // every buffer holds an earlier hint's read
    if (zero_host_update_through(e, u) != 0) { return -1; }  // (a deferred update: u's shard first)
    if (!nvme) { return 0; }
    if (zero_swap_param_read_start(&e->swap, u, e->ahead_buf + (size_t)k * e->ahead_bytes) != 0) { return -1; }
    e->ahead_unit[k] = u;
    int busy = 0;
    for (int i = 0; i < e->nahead; i++) { busy += e->ahead_unit[i] >= 0; }
    if (busy > e->reads_ahead_peak) { e->reads_ahead_peak = busy; }
    return 1;
}

// this rank's shard of unit u into dst: from its read ahead if there is one (waited for
// now if it is still coming), else from the store
static int zero_shard_for_gather(ZeroHost* e, int u, float* dst) {
    size_t n = e->plan.units[u].shard;
    int k = zero_ahead_find(e, u);
    if (k < 0) { return zero_param_shard_get(e, u, dst, n); }
    e->ahead_unit[k] = -1;
    if (zero_swap_param_wait(&e->swap, u) != 0) { return -1; }
    memcpy(dst, e->ahead_buf + (size_t)k * e->ahead_bytes + zero_swap_param_skew(&e->swap, u), n * sizeof(float));
    e->reads_ahead++;
    return 0;
}

// starts gathering unit u into a fresh buffer (this rank's shard, or with hpZ its slice,
// is its input block)
static int zero_host_gather_start(void* be, int u, int how) {
    ZeroHost* e = (ZeroHost*)be;
    ZeroUnit* pu = &e->plan.units[u];
    if (zero_host_update_through(e, u) != 0) { return -1; }  // a deferred update: u's shard is new
    float* buf = (float*)zero_buf_get(e, pu->padded, 0);
    if (buf == NULL) { return -1; }
    e->unit_buf[u] = buf;
    e->unit_how[u] = (unsigned char)how;
    if (how == ZERO_GATHER_SLICES) {
        // hpZ: gathered inside the secondary group from this step's slices, never across the whole world
        size_t part = pu->padded / (size_t)e->hpz.world;
        memcpy(buf + (size_t)e->hpz.rank * part, e->sec + pu->full_offset / (size_t)e->hpz.world, part * sizeof(float));
        return zero_allgather(&e->hpz, buf, part, &e->unit_req[u]);
    }
    // the shard comes from the host (--offload-param), or NVMe: read ahead while the units
    // before it computed (zero_host_upcoming), and the prefetch schedule starts this
    // gather early, so that it runs ahead of the unit's use
    if (zero_shard_for_gather(e, u, buf + (size_t)e->rank * pu->shard) != 0) { return -1; }
    if (e->offload_param != ZERO_OFFLOAD_NONE) { e->moved[ZERO_MOVE_H2D] += pu->shard * sizeof(float); }
    if (e->cfg.quantized_weights) { return zero_allgather_q(&e->comm, buf, pu->shard, &e->unit_req[u]); }
    return zero_allgather(&e->comm, buf, pu->shard, &e->unit_req[u]);
}

// the communicator unit u's gather runs on
static ZeroComm* zero_gather_comm(ZeroHost* e, int u) { return e->unit_how[u] == ZERO_GATHER_SLICES ? &e->hpz : &e->comm; }

// waits for unit u's gather; hpZ keeps this rank's slice of a gather from the shards
static int zero_host_gather_wait(void* be, int u) {
    ZeroHost* e = (ZeroHost*)be;
    if (zero_comm_wait(zero_gather_comm(e, u), &e->unit_req[u]) != 0) { return -1; }
    if (e->unit_how[u] == ZERO_GATHER_SHARDS_KEEP) {
        ZeroUnit* pu = &e->plan.units[u];
        size_t part = pu->padded / (size_t)e->hpz.world;
        memcpy(e->sec + pu->full_offset / (size_t)e->hpz.world, e->unit_buf[u] + (size_t)e->hpz.rank * part, part * sizeof(float));
    }
    return 0;
}

static int zero_host_gather_free(void* be, int u) {
    ZeroHost* e = (ZeroHost*)be;
    zero_buf_put(e, e->unit_buf[u], e->plan.units[u].padded);
    e->unit_buf[u] = NULL;
    return 0;
}

static void* zero_host_params(void* be, int u) {
    ZeroHost* e = (ZeroHost*)be;
    return e->sched.gathers ? (void*)e->unit_buf[u] : (void*)(e->full_params + e->plan.units[u].full_offset);
}

// Open MPI moves a nonblocking collective on only while the rank is inside an MPI call,
// so at every unit boundary the engine gives its gathers and reductions in flight a
// turn; without this most of a prefetch would happen in the wait that needs it.
static int zero_poll(void* be) {
    ZeroHost* e = (ZeroHost*)be;
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

// the unit's full gradient buffer (padded): in the whole gradient (stages 0-1) or from the pool
static int zero_host_grad_buf(void* be, int u, void** out) {
    ZeroHost* e = (ZeroHost*)be;
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

int zero_red_staged(const ZeroConfig* cfg) { return !cfg->quantized_gradients; }

static size_t zero_red_stage(const ZeroHost* e, int u) {
    return zero_red_staged(&e->cfg) ? zero_comm_rs_stage(&e->comm, e->plan.units[u].shard) : 0;
}

// completes unit u's reduction, the oldest in flight
static int zero_host_reduce_complete(void* be, int u) {
    ZeroHost* e = (ZeroHost*)be;
    ZeroUnit* pu = &e->plan.units[u];
    if (zero_comm_wait(&e->comm, &e->red_req[u]) != 0) { return -1; }
    zero_buf_put(e, e->red_stage[u], zero_red_stage(e, u));
    e->red_stage[u] = NULL;
    int copy_out = e->host_grads != NULL && e->sched.last_micro;  // offload: the shard goes to the host now
    if (e->stage >= 2) {
        const float* got = e->red_recv[u];
        if (e->shard_grads == NULL) {
            if (zero_swap_grad_add(&e->swap, u, got, 0, e->sched.last_micro) != 0) { return -1; }
            if (e->sched.last_micro) { e->moved[ZERO_MOVE_D2H] += pu->shard * sizeof(float); }
        } else {
            cpu_adam_grad_add(e->shard_grads + pu->shard_offset, got, 0, pu->shard, 0);
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

int zero_reduce_drain(ZeroHost* e) {
    for (int u; (u = zero_schedule_reduce_oldest(&e->sched)) >= 0;) {
        if (zero_host_reduce_complete(e, u) != 0) { return -1; }
    }
    return 0;
}

// starts unit u's reduction: stage 0 all-reduces the whole gradient's unit, stage 1
// reduce-scatters it into the shard, stages 2-3 reduce-scatter the unit's buffer into a
// received shard that its completion adds into the accumulator
static int zero_host_reduce_start(void* be, int u) {
    ZeroHost* e = (ZeroHost*)be;
    ZeroUnit* pu = &e->plan.units[u];
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

const ZeroMover zero_host_mover = {
    .gather_start = zero_host_gather_start, .gather_wait = zero_host_gather_wait,
    .gather_free = zero_host_gather_free, .params = zero_host_params,
    .grad_buf = zero_host_grad_buf, .reduce_start = zero_host_reduce_start,
    .reduce_complete = zero_host_reduce_complete, .poll = zero_poll, .upcoming = zero_host_upcoming,
};

// ----------------------------------------------------------------------------
// the model's calls: the pass driver's (zero3/pass.h)

int zero_host_begin(void* impl, int pass, int last_micro) {
    ZeroHost* e = (ZeroHost*)impl;
    if (e->cache_emptied && zero_refresh_persistent(e) != 0) { return -1; }  // (zero_host_empty_cache freed them)
    return zero_pass_begin(&e->pass, pass, last_micro);
}

int zero_host_empty_cache(void* impl, double* freed) {
    ZeroHost* e = (ZeroHost*)impl;
    *freed = 0.0;
    for (int i = 0; i < e->npool; i++) {
        *freed += (double)e->pool[i].elems * sizeof(float);
        zero_release_mem(e, ZERO_MEM_BUFFERS, e->pool[i].ptr, e->pool[i].elems);
    }
    e->npool = 0;
    for (int u = 0; e->stage == 3 && u < e->plan.num_units; u++) {
        if (!e->sched.persistent[u] || e->unit_buf[u] == NULL) { continue; }
        *freed += (double)e->plan.units[u].padded * sizeof(float);
        zero_release_mem(e, ZERO_MEM_BUFFERS, e->unit_buf[u], e->plan.units[u].padded);
        e->unit_buf[u] = NULL;
        e->cache_emptied = 1;
    }
    return 0;
}
int zero_host_fetch(void* impl, int u, void** out) { return zero_pass_fetch(&((ZeroHost*)impl)->pass, u, out); }
int zero_host_release(void* impl, int u) { return zero_pass_release(&((ZeroHost*)impl)->pass, u); }
int zero_host_grad(void* impl, int u, void** out) {
    ZeroHost* e = (ZeroHost*)impl;
    // the gradients go where a deferred update still reads the last ones: it ends first
    return zero_host_update_through(e, -1) != 0 ? -1 : zero_pass_grad(&e->pass, u, out);
}
int zero_host_reduce(void* impl, int u) { return zero_pass_reduce(&((ZeroHost*)impl)->pass, u); }
int zero_host_end(void* impl) {
    ZeroHost* e = (ZeroHost*)impl;
    int train_last = e->sched.pass == ZERO_PASS_TRAIN && e->sched.last_micro;  // (read before the pass ends)
    if (zero_pass_end(&e->pass) != 0 || zero_ahead_drop(e) != 0) { return -1; }
    return train_last ? zero_host_grads_finish(e) : 0;  // the gradient is read between here and the step
}

void zero_host_free(void* impl) {
    ZeroHost* e = (ZeroHost*)impl;
    if (e == NULL) { return; }
    zero_swap_close(&e->swap);  // first: it waits for reads ahead still landing in ahead_buf
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
    free(e->segs); free(e->step.pieces); free(e->host_grads); free(e->host_master);
    free(e->param_ptr); free(e->ahead_buf); free(e->ahead_unit);
    zero_schedule_free(&e->sched);
    zero_plan_free(&e->plan);
    free(e->sec); free(e->unit_how);
    zero_pass_free(&e->pass);
    zero_comm_free(&e->comm);
    zero_comm_free(&e->rep);
    zero_comm_free(&e->hpz);
    free(e);
}

int zero_host_flush(void* impl) { return zero_host_update_through((ZeroHost*)impl, -1); }

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
    ZeroSwapCounters sc = zero_swap_counters(&e->swap);
    s->moved[ZERO_MOVE_NVME_READ] += sc.read_bytes;
    s->moved[ZERO_MOVE_NVME_WRITE] += sc.write_bytes;
    s->update_ms = e->update_ms;
    s->nvme_wait_ms = sc.wait_ms;
    s->update_nvme_wait_ms = e->update_nvme_wait_ms;
    s->reads_ahead = (double)e->reads_ahead;
    s->reads_ahead_peak = e->reads_ahead_peak;
    memcpy(s->mem, e->mem.peak, sizeof(s->mem));
    s->mem_peak = e->mem.total_peak;
    s->nvme_bytes = e->mem.nvme_bytes;
    s->padded_total = e->plan.padded_total;
    return 0;
}

static const ZeroOps zero_host_ops = {
    .name = "host",
    .begin = zero_host_begin, .fetch = zero_host_fetch, .release = zero_host_release,
    .grad = zero_host_grad, .reduce = zero_host_reduce, .end = zero_host_end,
    .step = zero_host_step, .flush = zero_host_flush, .stats = zero_host_stats,
    .save = zero_host_save, .load = zero_host_load,
    .state_shard = zero_host_state_shard, .state_write = zero_host_state_write, .state_commit = zero_host_state_commit,
    .empty_cache = zero_host_empty_cache,
    .free = zero_host_free,
};

int zero_host_create(Zero** z, const ZeroInit* in) {
    return zero_create(z, &zero_host_ops, calloc(1, sizeof(ZeroHost)), zero_host_init, in);
}
