/*
 The device engine, continued (zero3/device.cuh includes this file after its pass): the
 NVMe tiers of ZeRO-Infinity on the GPU, through zero3/swap.h, the module the host engine
 uses too. Not included on its own.

   --offload-optimizer nvme (stage 3): the fp32 master, both moments and the gradient
       shards in this rank's swap file. Every gradient shard leaves the GPU as its
       reduction completes (grads_host, zero3/device.cuh) and is added into the file's
       gradient region; the step streams the file by sub-groups through the SIMD CPU
       Adam (zero_swap_step: reads ahead, writes behind), which writes the floatX
       compute copy: into h_params, uploaded as with the optimizer on the CPU, or with
       parameter offload where the parameters live.
   --offload-param nvme (stage 3): the units' floatX shards in the file's parameter
       region, but for max_in_cpu elements of them (the persistent units first) kept in
       pinned host memory (host_shards). The unit the pass driver will gather after its
       window ahead (ZeroMover.upcoming), and the ones after it while the ring of pinned
       buffers (offload_param.buffer_count) has more than one free, start their reads into
       them; a gather waits for its unit's read (or reads then, unhinted, into the buffer
       always kept for that) and uploads the buffer as any offloaded shard.

 --dpu with the optimizer on NVMe: the update thread streams the swap file while the GPU
 computes the next step's forward, until that step's first gradient shard must be added
 to the file (zero_dev_update_join). With the parameters on NVMe it is refused: the
 thread would write the parameter region that the gathers read.
*/
#ifndef ZERO3_DEVICE_SWAP_CUH
#define ZERO3_DEVICE_SWAP_CUH

// the next pinned read buffer that no read ahead owns (round robin), once the upload issued
// from it before has passed its event; NULL with zero_error when there is none
static ZeroDevStage* zero_dev_pstage_take(ZeroDev* d) {
    for (int k = 0; k < d->npstage; k++) {
        ZeroDevStage* st = &d->pstage[d->pstage_next];
        d->pstage_next = (d->pstage_next + 1) % d->npstage;
        if (st->reading >= 0) { continue; }
        if (st->used && zero_gpu_wait(NULL, st->up_ev, "waiting for a shard's upload") != 0) { return NULL; }
        st->used = 0;
        return st;
    }
    zero_error("zero device: every read buffer holds a shard read ahead for a later gather");
    return NULL;
}

// The mover's hint (ZeroMover.upcoming): unit u's gather comes after those started. A unit
// on NVMe starts its read into a pinned buffer now, to be waited for when its gather
// starts; 1 then, or when it needs no read (being read, or cached), so that the next unit
// is hinted too. 0 stops the hints: no NVMe, or no free buffer but the one kept for the
// gathers that were not hinted.
static int zero_dev_upcoming(void* be, int u) {
    ZeroDev* d = (ZeroDev*)be;
    if (!d->param_nvme) { return 0; }
    if (d->unit_host[u] != NULL || d->read_ahead[u] >= 0) { return 1; }
    int owned = 0;
    for (int i = 0; i < d->npstage; i++) { owned += d->pstage[i].reading >= 0; }
    if (owned >= d->npstage - 1) { return 0; }
    ZeroDevStage* st = zero_dev_pstage_take(d);
    zero_nvtx_push("nvme read ahead", u);
    if (zero_nvtx_popped(st == NULL || zero_swap_param_read_start(&d->swap, u, st->buf) != 0)) { return -1; }
    st->reading = u;
    d->read_ahead[u] = (int)(st - d->pstage);
    if (owned + 1 > d->reads_ahead_peak) { d->reads_ahead_peak = owned + 1; }
    return 1;
}

// where unit u's floatX shard is on the host (parameter offload): the shards' array
// (cpu), the cached units' array, or for a unit on NVMe a pinned buffer its read fills (read
// ahead at the hint, or now), free once the upload issued from it has passed its event
static const floatX* zero_dev_param_src(ZeroDev* d, int u) {
    const ZeroUnit* pu = &d->plan.units[u];
    if (!d->param_nvme) { return d->shard_params + pu->shard_offset; }
    if (d->unit_host[u] != NULL) { return d->unit_host[u]; }
    ZeroDevStage* st;  // (the time waited is the swap file's counters')
    if (d->read_ahead[u] >= 0) {
        st = &d->pstage[d->read_ahead[u]];
        d->read_ahead[u] = -1;
        st->reading = -1;
        zero_nvtx_push("nvme read wait", u);
        double t0 = zero_now_ms();
        if (zero_nvtx_popped(zero_swap_param_wait(&d->swap, u)) != 0 ||
            zero_trace_host(&d->trace, "nvme read wait", u, ZERO_TRACK_HOST, t0, zero_now_ms()) != 0) {
            return NULL;
        }
        d->reads_ahead_used++;
    } else {
        zero_nvtx_push("nvme read", u);
        double t0 = zero_now_ms();
        if (zero_nvtx_popped((st = zero_dev_pstage_take(d)) == NULL || zero_swap_param_read(&d->swap, u, st->buf, pu->shard) != 0) ||
            zero_trace_host(&d->trace, "nvme read", u, ZERO_TRACK_HOST, t0, zero_now_ms()) != 0) {
            return NULL;
        }
    }
    d->pstage_last = st;
    return st->buf;
}

// after an upload from zero_dev_param_src's staging: its buffer is free once the copy is done
static int zero_dev_param_src_done(ZeroDev* d, int u) {
    if (!d->param_nvme || d->unit_host[u] != NULL) { return 0; }
    d->pstage_last->used = 1;
    return zero_cuda(cudaEventRecord(d->pstage_last->up_ev, d->copy_in), "cudaEventRecord");
}

// ----------------------------------------------------------------------------
// the optimizer step from the swap file

// zero_swap_step's destination of unit u's updated compute copy: the h_params buffer
// (uploaded after, or the parameters themselves with offload to the CPU), the cached
// shard, or the swap module's staging of a shard on NVMe
static void* zero_dev_swap_out(void* ctx, int u) {
    ZeroDev* d = (ZeroDev*)ctx;
    if (!d->param_nvme) { return d->h_params + d->plan.units[u].shard_offset; }
    return d->unit_host[u] != NULL ? (void*)d->unit_host[u] : zero_swap_param_out(&d->swap, u);
}

static int zero_dev_swap_flush(void* ctx) {
    ZeroDev* d = (ZeroDev*)ctx;
    return d->param_nvme ? zero_swap_param_flush(&d->swap) : 0;
}

// the CPU Adam over the swap file, sub-group by sub-group; the gradient region is this
// step's (the next step's first adds overwrite it)
static int zero_dev_swap_update(ZeroDev* d, float lr, float weight_decay, float grad_scale, int t) {
    CpuAdamParams hp = {lr, d->beta1, d->beta2, d->eps, 0.0f, grad_scale, t};
    CpuAdamDtype ot = sizeof(floatX) == 2 ? CPU_ADAM_BF16 : CPU_ADAM_FP32;
    int rc = zero_swap_step(&d->swap, &hp, weight_decay, zero_dev_swap_out, ot, zero_dev_swap_flush, d);
    zero_swap_grad_clear(&d->swap);
    return rc;
}

// --dpu: the CPU Adam's thread is done (its result is uploaded later, zero_dev_flush). With
// the optimizer on NVMe the main thread joins it before it uses the swap file again: the
// next step's first gradient add, which the thread's update overlaps until then.
static int zero_dev_update_join(ZeroDev* d) {
    if (!d->update_running) { return 0; }
    if (pthread_join(d->update_thread, NULL) != 0) { return zero_error("zero device: joining the CPU Adam thread failed"); }
    d->update_running = 0;
    if (d->update_args.rc != 0) { return zero_error("zero device: CPU Adam thread: %s", d->update_args.msg); }
    d->update_ms += d->update_args.ms;
    if (zero_trace_host(&d->trace, "cpu adam", -1, ZERO_TRACK_HOST, d->update_args.t0, d->update_args.t0 + d->update_args.ms) != 0) {
        return -1;
    }
    if (d->swap_open) { d->swap_seen = zero_swap_counters(&d->swap); }
    return 0;
}

// ----------------------------------------------------------------------------
// init, teardown

// The swap file: the optimizer's regions (over the step's pieces, as segments) and the
// parameter region of the units not cached, whose cache is pinned here; the staging ring.
static int zero_dev_swap_init(ZeroDev* d) {
    const ZeroPlan* p = &d->plan;
    const ZeroDevStepPlan* pl = &d->step;
    d->segs = (ZeroSegment*)calloc(pl->npieces > 0 ? (size_t)pl->npieces : 1, sizeof(ZeroSegment));
    d->on_host = (int*)calloc((size_t)p->num_units, sizeof(int));
    d->unit_host = (floatX**)calloc((size_t)p->num_units, sizeof(floatX*));
    if (d->segs == NULL || d->on_host == NULL || d->unit_host == NULL) { return zero_error("zero device: out of memory"); }
    for (int i = 0; i < pl->npieces; i++) {
        const ZeroDevPiece* pc = &pl->pieces[i];
        d->segs[i] = (ZeroSegment){pc->sh, pc->sh + pc->n, pc->unit, pc->sh - p->units[pc->unit].shard_offset, pc->decay};
    }
    size_t file_bytes = 0, cached = 0;
    if (d->param_nvme) {
        cached = zero_swap_placement(p, d->sched.persistent, (double)d->cfg.max_in_cpu, sizeof(floatX), d->on_host, &file_bytes);
        if ((d->host_shards = (floatX*)zero_dev_alloc_host(cached * sizeof(floatX), &d->host_bytes_params)) == NULL) { return -1; }
        for (int u = 0, at = 0; u < p->num_units; u++) {
            if (d->on_host[u]) { d->unit_host[u] = d->host_shards + at; at += (int)p->units[u].shard; }
        }
        size_t largest_shard = 0;
        for (int u = 0; u < p->num_units; u++) {
            if (!d->on_host[u] && p->units[u].shard > largest_shard) { largest_shard = p->units[u].shard; }
        }
        // 4 KiB-aligned whole blocks (a read ahead is O_DIRECT into them): counted as the
        // estimate counts them, the alignment's slack apart
        size_t bytes = zero_swap_align(largest_shard * sizeof(floatX));
        d->npstage = zero_dev_param_stages(p, &d->cfg);
        d->read_ahead = (int*)malloc((size_t)p->num_units * sizeof(int));
        d->pstage = (ZeroDevStage*)calloc((size_t)d->npstage, sizeof(ZeroDevStage));
        if (d->read_ahead == NULL || d->pstage == NULL) { return zero_error("zero device: out of memory"); }
        for (int u = 0; u < p->num_units; u++) { d->read_ahead[u] = -1; }
        for (int i = 0; i < d->npstage; i++) {
            ZeroDevStage* st = &d->pstage[i];
            double ignored = 0;
            st->reading = -1;
            if ((st->alloc = zero_dev_alloc_host(bytes + NVME_ALIGN, &ignored)) == NULL ||
                zero_cuda(cudaEventCreateWithFlags(&st->up_ev, cudaEventDisableTiming), "cudaEventCreate") != 0) {
                return -1;
            }
            st->buf = (floatX*)(((uintptr_t)st->alloc + NVME_ALIGN - 1) / NVME_ALIGN * NVME_ALIGN);
            d->host_bytes_buffers += (double)bytes;
        }
    }
    ZeroSwapOpen o;
    memset(&o, 0, sizeof(o));
    o.plan = p;
    o.dir = d->cfg.nvme_path;
    o.rank = d->global_rank;
    o.optimizer = d->opt_nvme;
    o.segs = d->segs;
    o.nsegs = pl->npieces;
    o.sub_group_size = d->cfg.sub_group_size;
    o.buffer_count = d->cfg.buffer_count;
    o.pipeline_read = d->cfg.pipeline_read;
    o.pipeline_write = d->cfg.pipeline_write;
    o.on_host = d->param_nvme ? d->on_host : NULL;
    o.param_elem_bytes = sizeof(floatX);
    if (zero_swap_open(&d->swap, &o) != 0) { return -1; }
    d->swap_open = 1;
    d->host_bytes_buffers += (double)d->swap.host_bytes;
    return 0;
}

static void zero_dev_swap_free(ZeroDev* d) {
    if (d->swap_open) { zero_swap_close(&d->swap); }
    for (int i = 0; i < d->npstage; i++) {
        if (d->pstage[i].alloc != NULL) { cudaFreeHost(d->pstage[i].alloc); }
        if (d->pstage[i].up_ev != NULL) { cudaEventDestroy(d->pstage[i].up_ev); }
    }
    if (d->host_shards != NULL) { cudaFreeHost(d->host_shards); }
    free(d->segs); free(d->on_host); free(d->unit_host); free(d->read_ahead); free(d->pstage);
}

// ----------------------------------------------------------------------------
// the parameters and the master, a unit at a time (init, checkpoints)

// unit u's floatX shard from src (host memory) to where it lives: the GPU's shards, the
// host's, the cache or the parameter region
static int zero_dev_param_put(ZeroDev* d, int u, const floatX* src) {
    const ZeroUnit* pu = &d->plan.units[u];
    if (d->param_nvme && d->unit_host[u] == NULL) { return zero_swap_param_write(&d->swap, u, src); }
    floatX* dst = d->param_nvme ? d->unit_host[u] : d->shard_params + pu->shard_offset;
    return zero_cuda(cudaMemcpy(dst, src, pu->shard * sizeof(floatX), cudaMemcpyDefault), "storing a parameter shard");
}

// unit u's floatX shard into dst (host memory), from wherever it lives
static int zero_dev_param_get(ZeroDev* d, int u, floatX* dst) {
    const ZeroUnit* pu = &d->plan.units[u];
    if (d->param_nvme && d->unit_host[u] == NULL) { return zero_swap_param_read(&d->swap, u, dst, pu->shard); }
    const floatX* src = d->param_nvme ? d->unit_host[u] : d->shard_params + pu->shard_offset;
    return zero_cuda(cudaMemcpy(dst, src, pu->shard * sizeof(floatX), cudaMemcpyDefault), "reading a parameter shard");
}

// A checkpoint's compute copy with the parameters on NVMe: this rank's shards in
// shard-buffer order, one unit's shard at a time through a host buffer
static int zero_dev_params_stream(ZeroDev* d, FILE* fp, int writing) {
    const ZeroPlan* p = &d->plan;
    size_t largest = 0;
    for (int u = 0; u < p->num_units; u++) { largest = p->units[u].shard > largest ? p->units[u].shard : largest; }
    floatX* buf = (floatX*)malloc((largest > 0 ? largest : 1) * sizeof(floatX));
    if (buf == NULL) { return zero_error("zero device: out of memory for a parameter shard"); }
    int rc = 0;
    for (int u = 0; u < p->num_units && rc == 0; u++) {
        size_t n = p->units[u].shard;
        if (writing) {
            rc = zero_dev_param_get(d, u, buf);
            if (rc == 0 && fwrite(buf, sizeof(floatX), n, fp) != n) { rc = zero_error("zero device: writing the state failed: %s", strerror(errno)); }
        } else {
            rc = fread(buf, sizeof(floatX), n, fp) == n ? zero_dev_param_put(d, u, buf) : zero_error("zero device: the state is truncated");
        }
    }
    free(buf);
    return rc;
}

#endif // ZERO3_DEVICE_SWAP_CUH
