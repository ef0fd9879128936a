// zero3/host_init.c: the host engine's init, free of the parts set up at init, and the checkpoint I/O (the interface and its notes: zero3/host.h)
#include "zero3/host.h"           // ZeroHost, the engine's prototypes
#include "zero3/host_internal.h"  // the helpers host*.c share
#include "zero3/util.h"     // zero_error, zero_errmsg, zero_now_ms

size_t zero_param_placement(const ZeroPlan* p, const ZeroSchedule* sched, const ZeroConfig* cfg, int* on_host,
                                   size_t* file_bytes) {
    double budget = cfg->offload_param == ZERO_OFFLOAD_NVME ? (double)cfg->max_in_cpu : 1e300;
    return zero_swap_placement(p, sched->persistent, budget, sizeof(float), on_host, file_bytes);
}

ZeroSwapOpen zero_host_swap_open(const ZeroPlan* p, const ZeroConfig* cfg, int rank, const ZeroSegment* segs, int nsegs,
                                 const int* on_host) {
    ZeroSwapOpen o;
    memset(&o, 0, sizeof(o));
    o.plan = p;
    o.dir = cfg->nvme_path;
    o.rank = rank;
    o.optimizer = cfg->offload_optimizer == ZERO_OFFLOAD_NVME;
    o.segs = segs;
    o.nsegs = nsegs;
    o.sub_group_size = cfg->sub_group_size;
    o.buffer_count = cfg->buffer_count;
    o.pipeline_read = cfg->pipeline_read;
    o.pipeline_write = cfg->pipeline_write;
    o.on_host = on_host;
    o.param_elem_bytes = sizeof(float);
    o.param_in_master = o.optimizer && on_host != NULL;  // (fp32: the master is the compute copy)
    return o;
}

// Stage 3: where each unit's parameter shard lives (zero_param_placement): the host's in
// one array, the others in the swap file, opened here with the optimizer's regions when
// the optimizer is on NVMe (the segments are found already).
static int zero_param_store_init(ZeroHost* e) {
    ZeroPlan* p = &e->plan;
    int nu = p->num_units, rc = -1;
    e->param_ptr = (float**)calloc(nu, sizeof(float*));
    int* on_host = (int*)calloc(nu, sizeof(int));
    if (e->param_ptr == NULL || on_host == NULL) { free(on_host); return zero_error("zero: out of memory"); }
    size_t file_bytes = 0;
    size_t host_elems = zero_param_placement(p, &e->sched, &e->cfg, on_host, &file_bytes);
    int kind = e->offload_param != ZERO_OFFLOAD_NONE ? ZERO_MEM_HOST_PARAMS : ZERO_MEM_PARAMS;
    e->shard_params = (float*)zero_alloc(e, kind, host_elems);
    if (e->shard_params == NULL) { goto done; }
    ZeroSwapOpen o = zero_host_swap_open(p, &e->cfg, e->rank, e->segs, e->nsegs, on_host);
    if (file_bytes > 0 || e->offload_opt == ZERO_OFFLOAD_NVME) {
        if (zero_swap_open(&e->swap, &o) != 0) { goto done; }
        e->mem.nvme_bytes = (double)e->swap.file_bytes;
        e->mem.current[ZERO_MEM_HOST_BUFFERS] += (double)e->swap.host_bytes;  // its buffers, the blocks' checksums
    }
    if ((e->nahead = zero_ahead_count(p, on_host, &e->cfg, file_bytes)) > 0) {
        e->ahead_bytes = zero_swap_param_span_max(&o);
        e->ahead_buf = (char*)nvme_alloc((size_t)e->nahead * e->ahead_bytes);  // huge pages: few segments per O_DIRECT request
        e->ahead_unit = (int*)malloc((size_t)e->nahead * sizeof(int));
        if (e->ahead_buf == NULL || e->ahead_unit == NULL) { zero_error("zero: out of memory for the parameters' read-ahead buffers"); goto done; }
        for (int k = 0; k < e->nahead; k++) { e->ahead_unit[k] = -1; }  // nothing read ahead
        e->mem.current[ZERO_MEM_HOST_BUFFERS] += (double)e->nahead * (double)e->ahead_bytes;
    }
    e->mem.peak[ZERO_MEM_HOST_BUFFERS] = e->mem.current[ZERO_MEM_HOST_BUFFERS];
    size_t host_off = 0;
    for (int u = 0; u < nu; u++) {
        if (!on_host[u]) { continue; }
        e->param_ptr[u] = e->shard_params + host_off;
        host_off += p->units[u].shard;
    }
    rc = 0;
done:
    free(on_host);
    return rc;
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

// Optimizer offload. cpu: the gradient shards, the fp32 master and the moments on the
// host. nvme (stage 3; the swap file was opened with the parameter store, zero3/swap.h):
// master, moments and gradient shards in this rank's swap file.
static int zero_offload_init(ZeroHost* e) {
    ZeroPlan* p = &e->plan;
    if (e->offload_opt == ZERO_OFFLOAD_CPU) {
        e->host_grads = (float*)zero_alloc(e, ZERO_MEM_HOST_GRADS, p->shard_total);
        e->host_master = e->host_grads != NULL ? (float*)zero_alloc(e, ZERO_MEM_HOST_PARAMS, p->shard_total) : NULL;
        if (e->host_master == NULL) { return -1; }
        return zero_shards_copy_out(e, e->host_master);
    }
    // the master shards from the parameter store, zero moments (the gradient region is
    // written before it is read: the swap's first add of a unit overwrites)
    if (zero_nvme_write_master(e) != 0 || zero_swap_region_load(&e->swap, ZERO_SWAP_M, NULL) != 0) { return -1; }
    return zero_swap_region_load(&e->swap, ZERO_SWAP_V, NULL);
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
    ZeroGroups g;
    if (zero_groups_split(world, &e->cfg, &g) != 0) { return -1; }
    e->nodes = g.nodes;
    e->per_node = g.per_node;
    e->dp_world = g.dp_world;
    // (every group is wrapped, a group of one too: the statistics add every communicator's traffic)
    int rc = zero_comm_init_nodes(&e->comm, g.shard, g.node);
    if (rc == 0) { rc = zero_comm_init_nodes(&e->rep, g.reps, g.node); }
    if (rc == 0) { rc = zero_comm_init_nodes(&e->hpz, g.hpz, g.node); }
    zero_groups_free(&g);
    e->world = e->comm.world;
    e->rank = e->comm.rank;
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
    e->defer_update = e->stage == 3 && e->offload_opt == ZERO_OFFLOAD_NVME;  // (host.h's note)
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
    if (e->stage >= 1 && zero_segments_init(e) != 0) { return -1; }  // before the swap file, which walks them
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
    e->unit_how = (unsigned char*)calloc(num_units, 1);
    if (e->unit_how == NULL) { return zero_error("zero: out of memory for the engine's tables"); }
    if (e->hpz.world > 1 && (e->sec = (float*)zero_alloc(e, ZERO_MEM_PARAMS, p->padded_total / (size_t)e->hpz.world)) == NULL) {
        return -1;
    }
    if (zero_pass_init(&e->pass, &e->sched, &zero_host_mover, e, e->stage, e->sec != NULL) != 0) { return -1; }
    e->pass.reduce_local = e->world == 1;  // one rank: the whole gradient is its own shard
    e->pass.drain_at_end = 1;
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
    if (e->offload_opt != ZERO_OFFLOAD_NONE && zero_offload_init(e) != 0) { return -1; }
    return zero_host_step_plan_init(e);  // last: it points into the arrays above
}

// the mean gradient of unit u's [begin, begin + n): the step's sum over the ranks, where
// the norm reads it (zero_host_grads_finish has run: zero_state_shard's phase), divided
static int zero_host_grad_shard(ZeroHost* e, int u, size_t begin, size_t n, float* out) {
    const ZeroUnit* pu = &e->plan.units[u];
    if (e->stage == 0) {
        memcpy(out, e->full_grads + pu->full_offset + begin, n * sizeof(float));
    } else if (e->shard_grads == NULL) {  // the optimizer on NVMe: the swap file's gradient region
        if (zero_swap_state_read(&e->swap, ZERO_SWAP_G, u, 0, n, out) != 0) { return -1; }
    } else {
        memcpy(out, e->shard_grads + pu->shard_offset, n * sizeof(float));
    }
    for (size_t i = 0; i < n; i++) { out[i] /= (float)e->dp_world; }
    return 0;
}

int zero_host_state_shard(void* impl, int what, int u, size_t* begin, size_t* n, float* out) {
    ZeroHost* e = (ZeroHost*)impl;
    ZeroUnit* pu = &e->plan.units[u];
    if (zero_host_update_through(e, -1) != 0) { return -1; }  // (a deferred update)
    *begin = (size_t)e->rank * pu->shard;
    *n = zero_plan_shard_numel(&e->plan, u, e->rank);
    if (out == NULL || *n == 0) { return 0; }
    if (what == ZERO_STATE_GRAD) { return zero_host_grad_shard(e, u, *begin, *n, out); }
    if (what != ZERO_STATE_MASTER) {  // m or v: the arrays, or the swap file's regions
        if (e->offload_opt == ZERO_OFFLOAD_NVME) {
            return zero_swap_state_read(&e->swap, what == ZERO_STATE_M ? ZERO_SWAP_M : ZERO_SWAP_V, u, 0, *n, out);
        }
        const float* src = what == ZERO_STATE_M ? e->m : e->v;
        memcpy(out, src + (e->stage == 0 ? pu->full_offset + *begin : pu->shard_offset), *n * sizeof(float));
        return 0;
    }
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
    if (zero_host_update_through(e, -1) != 0) { return -1; }  // (a deferred update)
    if (zero_state_write_header(fp, &h) != 0 || zero_swap_grad_settle(&e->swap) != 0) { return -1; }
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
        return zero_swap_region_save(&e->swap, ZERO_SWAP_M, fp) != 0 || zero_swap_region_save(&e->swap, ZERO_SWAP_V, fp) != 0 ? -1 : 0;
    }
    ok = ok && fwrite(e->m, sizeof(float), e->opt_elems, fp) == e->opt_elems;
    ok = ok && fwrite(e->v, sizeof(float), e->opt_elems, fp) == e->opt_elems;
    return ok ? 0 : zero_error("zero: writing the optimizer state failed: %s", strerror(errno));
}

int zero_host_load(void* impl, FILE* fp) {
    ZeroHost* e = (ZeroHost*)impl;
    ZeroPlan* p = &e->plan;
    ZeroStateHeader want = zero_state_header("host", e->stage, p, sizeof(float), zero_host_state_bytes(e));
    if (zero_host_update_through(e, -1) != 0) { return -1; }  // (a deferred update: what it writes is replaced)
    if (zero_state_read_header(fp, &want) != 0 || zero_swap_grad_settle(&e->swap) != 0) { return -1; }
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
        if (zero_swap_region_load(&e->swap, ZERO_SWAP_M, fp) != 0 || zero_swap_region_load(&e->swap, ZERO_SWAP_V, fp) != 0 ||
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
