/*
 The device engine, continued (zero3/device.cuh, which includes this file after the
 engine's state and its pass): the optimizer step (AdamW on the GPU, or the CPU Adam of
 ZeRO-Offload with its copy streams and --dpu's update thread), the statistics, and the
 engine's part of a checkpoint. Not included on its own.
*/
#ifndef ZERO3_DEVICE_STEP_CUH
#define ZERO3_DEVICE_STEP_CUH

// ----------------------------------------------------------------------------
// the optimizer step

// stage 3: persistent unit u gets this rank's updated shard (on the GPU, or the host's
// with parameter offload: cudaMemcpyDefault) and every other rank's, on the NCCL stream
static int zero_dev_refresh_unit(ZeroDev* d, int u) {
    const ZeroUnit* pu = &d->plan.units[u];
    const floatX* mine = d->param_nvme ? d->unit_host[u] : d->shard_params + pu->shard_offset;  // (persistent: cached)
    if (zero_cuda(cudaMemcpyAsync(d->unit_ptr[u] + (size_t)d->rank * pu->shard, mine,
                                  pu->shard * sizeof(floatX), cudaMemcpyDefault, d->nccl.stream), "copying a shard") != 0 ||
        zero_nccl_allgather(&d->nccl, d->unit_ptr[u], pu->shard, NCCL_FLOATX, u) != 0) {
        return -1;
    }
    if (d->offload_param) { d->moved_h2d += (double)pu->shard * sizeof(floatX); }
    return 0;
}

// stage 3: every persistent unit refreshed
static int zero_dev_refresh_persistent(ZeroDev* d) {
    for (int u = 0; u < d->plan.num_units; u++) {
        if (d->sched.persistent[u] && zero_dev_refresh_unit(d, u) != 0) { return -1; }
    }
    return 0;
}

// offload: the SIMD CPU Adam over this rank's part of every tensor, from the gradient
// shards at `grads`, writing the fp32 master and moments and the floatX compute copy
// (out: an h_params buffer). Called on the step's thread, or on update_thread with dpu.
static int zero_dev_cpu_update_shards(ZeroDev* d, const void* grads, floatX* out, float lr, float weight_decay, float grad_scale, int t) {
    if (d->opt_nvme) { return zero_dev_swap_update(d, lr, weight_decay, grad_scale, t); }  // (grads, out: the swap file's, d->swap's)
    CpuAdamParams hp = {lr, d->beta1, d->beta2, d->eps, 0.0f, grad_scale, t};
    size_t gb = zero_dev_shard_grad_bytes(d);
    CpuAdamDtype gt = gb == 2 ? CPU_ADAM_BF16 : CPU_ADAM_FP32;
    CpuAdamDtype ot = sizeof(floatX) == 2 ? CPU_ADAM_BF16 : CPU_ADAM_FP32;
    for (int i = 0; i < d->step.npieces; i++) {
        const ZeroDevPiece* pc = &d->step.pieces[i];
        hp.weight_decay = pc->decay ? weight_decay : 0.0f;
        // the parameters on NVMe: a unit's cached shard, or the swap module's staging of it
        // (the pieces go in shard-buffer order: a unit is staged once)
        floatX* to = out + pc->sh;
        if (d->param_nvme) {
            floatX* unit = (floatX*)zero_dev_swap_out(d, pc->unit);
            if (unit == NULL) { return -1; }
            to = unit + (pc->sh - d->plan.units[pc->unit].shard_offset);
        }
        if (cpu_adam_step(pc->master, (const char*)grads + pc->sh * gb, gt, pc->m, pc->v, pc->n, &hp, to, ot) != 0) {
            return -1;
        }
    }
    return zero_dev_swap_flush(d);
}
// (the same in an NVTX range: the CPU Adam on a profiler's timeline, on its own thread with --dpu)
static int zero_dev_cpu_update(ZeroDev* d, const void* grads, floatX* out, float lr, float weight_decay, float grad_scale, int t) {
    zero_nvtx_push("cpu adam", -1);
    return zero_nvtx_popped(zero_dev_cpu_update_shards(d, grads, out, lr, weight_decay, grad_scale, t));
}

static void* zero_dev_update_main(void* arg) {
    ZeroDevUpdate* a = (ZeroDevUpdate*)arg;
    if (a->d->omp_threads > 0) { omp_set_num_threads(a->d->omp_threads); }  // a new thread has the default team size
    a->t0 = zero_now_ms();
    a->rc = zero_dev_cpu_update(a->d, a->grads, a->out, a->lr, a->weight_decay, a->grad_scale, a->t);
    a->ms = zero_now_ms() - a->t0;
    if (a->rc != 0) { snprintf(a->msg, sizeof(a->msg), "%s", zero_errmsg()); }
    return NULL;
}

// after an update at stage 0: every rank updated the whole model alike
static int zero_dev_share_none(ZeroDev* d) {
    (void)d;
    return 0;
}

// after an update at stages 1-2: every rank's updated shards to every rank, in place; the
// next forward waits on the GPU
static int zero_dev_share_allgather(ZeroDev* d) {
    int span = -1;
    if (zero_nccl_after(&d->nccl, d->compute) != 0 || zero_trace_open(&d->trace, d->nccl.stream, &span) != 0 ||
        zero_nccl_group_start(&d->nccl, "all-gather of the updated shards", -1) != 0) {
        return -1;
    }
    for (int u = 0; u < d->plan.num_units; u++) {  // one group: NCCL schedules them together
        if (zero_nccl_allgather(&d->nccl, d->params + d->plan.units[u].full_offset, d->plan.units[u].shard, NCCL_FLOATX, u) != 0) {
            zero_nccl_group_end();
            return -1;
        }
    }
    return zero_nccl_group_end() != 0 || zero_trace_close(&d->trace, span, d->nccl.stream, "all-gather", -1, ZERO_TRACK_COLLECTIVES) != 0 ||
           zero_dev_join(d) != 0 ? -1 : 0;
}

// after an update at stage 3: the persistent units refreshed (the others are gathered at
// their next use, from the shards just written)
static int zero_dev_share_refresh(ZeroDev* d) {
    if (zero_nccl_after(&d->nccl, d->compute) != 0 || zero_dev_refresh_persistent(d) != 0 || zero_dev_join(d) != 0) { return -1; }
    d->shards_written = 1;
    zero_pass_params_changed(&d->pass);  // hpZ: slices of the old parameters
    return 0;
}

// offload: the updated floatX shards (src, an h_params buffer) to the GPU on the copy-in
// stream, the compute stream waiting for them; then every rank's shards to every rank.
// With parameter offload src becomes the shards the gathers upload from.
static int zero_dev_upload_shards(ZeroDev* d, const floatX* src) {
    cudaStream_t s = d->compute;
    // the copies overwrite parameters that work queued on the compute stream (and the
    // gathers on the NCCL stream) may still read: after both
    if (d->use_nccl && zero_dev_join(d) != 0) { return -1; }
    if (zero_cuda(cudaEventRecord(d->upload_ev, s), "cudaEventRecord") != 0 ||
        zero_cuda(cudaStreamWaitEvent(d->copy_in, d->upload_ev, 0), "cudaStreamWaitEvent") != 0) {
        return -1;
    }
    if (d->offload_param) {  // src holds the parameters from now on (or the cache and the swap file do): the gathers upload them
        if (!d->param_nvme) { d->shard_params = (floatX*)src; }
        return d->step.share(d);
    }
    int span = -1;
    if (zero_trace_open(&d->trace, d->copy_in, &span) != 0) { return -1; }
    for (int u = 0; u < d->plan.num_units; u++) {
        const ZeroUnit* pu = &d->plan.units[u];
        if (zero_cuda(cudaMemcpyAsync(d->step.unit_shard[u], src + pu->shard_offset, pu->shard * sizeof(floatX),
                                      cudaMemcpyHostToDevice, d->copy_in), "copying a parameter shard in") != 0) {
            return -1;
        }
        d->moved_h2d += (double)pu->shard * sizeof(floatX);
    }
    if (zero_trace_close(&d->trace, span, d->copy_in, "upload", -1, ZERO_TRACK_COPIES) != 0 ||
        zero_cuda(cudaEventRecord(d->copied_ev, d->copy_in), "cudaEventRecord") != 0 || zero_dev_wait(d, d->copied_ev) != 0) {
        return -1;
    }
    return d->step.share(d);
}
// (the same in an NVTX range)
static int zero_dev_upload(ZeroDev* d, const floatX* src) {
    zero_nvtx_push("upload", -1);
    return zero_nvtx_popped(zero_dev_upload_shards(d, src));
}

// dpu: waits for the pending CPU update and uploads its result (at the end of the next
// step, and before anything reads the master or needs the latest parameters: checkpoints,
// the end of training)
static int zero_dev_flush(void* impl) {
    ZeroDev* d = (ZeroDev*)impl;
    if (!d->update_pending) { return 0; }
    if (zero_dev_update_join(d) != 0) { return -1; }
    d->update_pending = 0;
    // the thread wrote update_args.out; the upload from it runs on the copy-in stream while
    // the next thread writes the other buffer (see zero_dev_step)
    return zero_dev_upload(d, d->update_args.out);
}

// offload: the CPU Adam of this step (the gradient shards are on the host), on the step's
// thread, or (dpu) on a thread of its own while the GPU computes the next step
static int zero_dev_offload_step(ZeroDev* d, const ZeroStep* st, float grad_scale) {
    if (isnan(grad_scale)) {  // a skipped step (adamw_skip_kernel): no update; --dpu's pending one still lands
        if (d->opt_nvme && (zero_dev_update_join(d) != 0 || (zero_swap_grad_clear(&d->swap), 0))) { return -1; }  // (discarded)
        return zero_dev_flush(d);
    }
    if (!d->dpu) {
        double t0 = zero_now_ms();
        if (zero_dev_cpu_update(d, d->h_grads, d->h_params, st->lr, st->weight_decay, grad_scale, st->t) != 0 ||
            zero_trace_host(&d->trace, "cpu adam", -1, ZERO_TRACK_HOST, t0, zero_now_ms()) != 0) {
            return -1;
        }
        d->update_ms += zero_now_ms() - t0;
        return zero_dev_upload(d, d->h_params);
    }
    // The previous step's update goes to the GPU now (its upload queued on the copy-in
    // stream), this step's starts on a thread from the gradients just copied, into the
    // other h_params buffer: the one uploaded a step ago, which the copy-in stream's
    // synchronization in zero_dev_step finished. The next step's copies fill the other gradient buffer. Its result is
    // shared with the ranks when it is uploaded.
    if (zero_dev_flush(d) != 0) { return -1; }
    d->h_params = d->h_params == d->h_params_buf[0] ? d->h_params_buf[1] : d->h_params_buf[0];
    memset(&d->update_args, 0, sizeof(d->update_args));
    d->update_args.d = d;
    d->update_args.grads = d->h_grads;
    d->update_args.out = d->h_params;
    d->update_args.lr = st->lr;
    d->update_args.weight_decay = st->weight_decay;
    d->update_args.grad_scale = grad_scale;
    d->update_args.t = st->t;
    if (pthread_create(&d->update_thread, NULL, zero_dev_update_main, &d->update_args) != 0) {
        return zero_error("zero device: starting the CPU Adam thread failed");
    }
    d->update_pending = 1;
    d->update_running = 1;
    d->h_grads = d->h_grads == d->h_grads_buf[0] ? d->h_grads_buf[1] : d->h_grads_buf[0];
    return 0;
}

// AdamW on the GPU, one launch per piece; the scale is read on the GPU (scale_dev)
static int zero_dev_update_gpu(ZeroDev* d, const ZeroStep* st, float* grad_scale) {
    unsigned int run_seed = (unsigned int)(st->seed ^ (st->seed >> 32));
    const float* scale_dev = d->norm_out;
    for (int i = 0; i < d->step.npieces; i++) {
        const ZeroDevPiece* pc = &d->step.pieces[i];
        float wd = pc->decay ? st->weight_decay : 0.0f;
        int rc = pc->grad32 != NULL
                     ? adamw_update_cuda(pc->param, pc->master, pc->grad32, pc->m, pc->v, pc->n, st->lr, d->beta1, d->beta2, d->eps,
                                         wd, *grad_scale, st->t, run_seed, d->compute, pc->off, scale_dev)
                     : adamw_update_cuda(pc->param, pc->master, pc->gradx, pc->m, pc->v, pc->n, st->lr, d->beta1, d->beta2, d->eps,
                                         wd, *grad_scale, st->t, run_seed, d->compute, pc->off, scale_dev);
        if (rc != 0) { return -1; }
    }
    return 0;
}

// offload: the CPU Adam needs the scale, every gradient shard on the host, and the
// h_params buffers free; the update itself runs after the accumulators are cleared
// (zero_dev_offload_step), which must wait for the copies that read them
static int zero_dev_update_offload_ready(ZeroDev* d, const ZeroStep* st, float* grad_scale) {
    (void)st;
    if (zero_gpu_wait(d->compute, NULL, "waiting for the norm") != 0) { return -1; }
    *grad_scale = d->host_norm[0];
    double w0 = zero_now_ms();
    if (zero_gpu_wait(d->copy_out, NULL, "waiting for the gradient copies") != 0) { return -1; }
    d->host_wait_ms += zero_now_ms() - w0;
    // every earlier upload from an h_params buffer is done before the CPU Adam writes
    // one again (the compute stream, just synchronized, waited for them too: this keeps
    // the guarantee where it is needed)
    return zero_gpu_wait(d->copy_in, NULL, "waiting for the uploads");
}

// without offload, the updated parameters are shared at once
static int zero_dev_after_share(ZeroDev* d, const ZeroStep* st, float grad_scale) {
    (void)st; (void)grad_scale;
    return d->step.share(d);
}

// the update's pieces: each tensor whole (stage 0), or its part of this rank's shard
static int zero_dev_pieces_init(ZeroDev* d) {
    ZeroDevStepPlan* pl = &d->step;
    pl->pieces = (ZeroDevPiece*)calloc(d->num_tensors > 0 ? (size_t)d->num_tensors : 1, sizeof(ZeroDevPiece));
    if (pl->pieces == NULL) { return zero_error("zero device: out of memory for the step's pieces"); }
    for (int i = 0; i < d->num_tensors; i++) {
        const ZeroTensor* tr = &d->tensors[i];
        // this rank's part of the tensor: at `off` in the padded model (the rounding bits,
        // and the compute copy at stages 0-2), at `sh` in the shard buffers (stages 1-3)
        size_t off = d->plan.units[tr->unit].full_offset + tr->offset, sh = 0, n = tr->size;
        if (d->stage >= 1) {
            int in = zero_plan_tensor_part(&d->plan, tr->unit, d->rank, tr->offset, tr->offset + tr->size, &off, &sh, &n);
            if (in < 0) { return -1; }
            if (in == 0) { continue; }  // no element of this tensor in this rank's shard
        }
        size_t at = d->stage == 0 ? off : sh;  // master, moments and gradient: the whole model, or the shards
        ZeroDevPiece piece = {d->stage < 3 ? d->params + off : d->shard_params + sh, d->master + at, d->m + at, d->v + at,
                              NULL, NULL, n, off, sh, tr->unit, tr->decay};
        ZeroDevPiece* pc = &pl->pieces[pl->npieces++];
        *pc = piece;
        if (d->grads32 != NULL) { pc->grad32 = d->grads32 + at; }
        else if (d->gshard32 != NULL) { pc->grad32 = d->gshard32 + at; }
        else if (d->acc != NULL) { pc->grad32 = d->acc + at; }
        else if (d->gshard != NULL) { pc->gradx = d->gshard + at; }
        else { pc->gradx = d->grads + at; }
    }
    return 0;
}

// Resolves the step's layout (d->step) once the engine's arrays are allocated: they are
// not moved after init (--dpu's double buffers are the offload's, read at the step).
static int zero_dev_step_plan_init(ZeroDev* d) {
    ZeroDevStepPlan* pl = &d->step;
    const ZeroPlan* p = &d->plan;
    pl->unit_shard = (floatX**)calloc((size_t)p->num_units, sizeof(floatX*));
    if (pl->unit_shard == NULL) { return zero_error("zero device: out of memory for the step's layout"); }
    for (int u = 0; u < p->num_units; u++) {
        const ZeroUnit* pu = &p->units[u];
        pl->unit_shard[u] = d->stage == 3 ? d->shard_params + pu->shard_offset : d->params + pu->full_offset + (size_t)d->rank * pu->shard;
    }
    // the norm's source: the gradient as reduced (stage 0 whole, stage 1 its shard, in
    // fp32 with comm32), or the fp32 accumulators of stages 2-3
    pl->norm_n = d->stage == 0 ? p->padded_total : p->shard_total;
    pl->norm32 = d->grads32 != NULL ? d->grads32 : d->gshard32 != NULL ? d->gshard32 : d->acc;
    pl->normx = pl->norm32 != NULL ? NULL : d->gshard != NULL ? d->gshard : d->grads;
    pl->norm_allreduce = d->stage >= 1 && d->world > 1;
    // the next step accumulates from zero (stages 2-3 zero each unit's buffer when taken;
    // grads_host's first add of a step starts from zero: nothing to clear)
    pl->clear = d->stage < 2 ? (void*)d->grads : (void*)d->acc;
    pl->clear_bytes = d->stage < 2 ? p->padded_total * sizeof(floatX) : p->shard_total * sizeof(float);
    pl->update = d->offload ? zero_dev_update_offload_ready : zero_dev_update_gpu;
    pl->after = d->offload ? zero_dev_offload_step : zero_dev_after_share;
    pl->share = d->stage == 3 ? zero_dev_share_refresh : d->stage >= 1 ? zero_dev_share_allgather : zero_dev_share_none;
    return zero_dev_pieces_init(d);
}

// Global norm of the mean gradient, clipping, AdamW on this rank's part of every tensor
// (one launch each; an element's stochastic rounding bits depend on its place in the
// padded model, so every stage draws the same bits for it), then the updated parameters
// go to every rank, all as d->step says (zero_dev_step_plan_init). The gradients are sums
// over ranks: the 1/world of the mean is folded into AdamW's gradient scale. The norm, its
// sum over ranks (an NCCL all-reduce) and the scale are computed on the GPU, where AdamW
// reads the scale: without offload the host does not wait. With offload the CPU Adam waits
// for the scale, and for the gradient copies anyway.
static int zero_dev_step(void* impl, const ZeroStep* st) {
    ZeroDev* d = (ZeroDev*)impl;
    const ZeroDevStepPlan* pl = &d->step;
    cudaStream_t s = d->compute;
    if (zero_dev_cache_restore(d) != 0) { return -1; }  // (the step refreshes the persistent units)
    if (d->use_nccl && zero_dev_join(d) != 0) { return -1; }  // the reductions are done
    if (d->grads_host) {
        // the shards are summed on the host, and so are their squares: every shard sent is
        // added, and the squared norm goes to the GPU, where the ranks' sum and the scale are
        if (zero_dev_slots_drain(d) != 0 || zero_dev_update_join(d) != 0) { return -1; }
        *d->host_sumsq = d->opt_nvme ? zero_swap_grad_sumsq(&d->swap) : d->grad_sumsq;
        d->grad_sumsq = 0.0;
        memset(d->acc_started, 0, (size_t)d->plan.num_units);  // the next step's first adds start from zero
        if (zero_cuda(cudaMemcpyAsync(d->norm_sum, d->host_sumsq, sizeof(double), cudaMemcpyHostToDevice, s), "copying the norm") != 0) {
            return -1;
        }
    } else {
        // this rank's squared norm, in double, summed over ranks at stages 1-3 (each rank holds
        // the squares of its shards), then the scale and the norm: all on the GPU
        int rc = pl->norm32 != NULL ? global_norm_squared(d->norm_sum, d->norm_scratch, pl->norm32, pl->norm_n, s)
                                    : global_norm_squared(d->norm_sum, d->norm_scratch, pl->normx, pl->norm_n, s);
        if (rc != 0) { return -1; }
    }
    if (pl->norm_allreduce) {  // 8 bytes, left out of the model's traffic counters (the host engine's scalar sums are too)
        if (zero_nccl_after(&d->nccl, s) != 0 || zero_nccl_watch_begin(d->nccl.stream, "all-reduce of the gradient norm", -1) != 0 ||
            zero_nccl_watched(zero_nccl_error(ncclAllReduce(d->norm_sum, d->norm_sum, 1, ncclFloat64, ncclSum, d->nccl.comm,
                                                            d->nccl.stream), "the norm's all-reduce")) != 0 ||
            zero_dev_join(d) != 0) {
            return -1;
        }
    }
    adamw_grad_scale_kernel<<<1, 1, 0, s>>>(d->norm_out, d->norm_out + 1, d->norm_sum, d->dp_world, st->grad_clip);
    adamw_skip_kernel<<<1, 1, 0, s>>>(d->norm_out, d->norm_out + 1, st->skip, st->skip_norm_above);  // NaN scale: AdamW changes nothing
    // the scale and the norm to the host: read after the trainer's end-of-step
    // synchronization (zero_dev_stats), or at once with offload, whose CPU Adam needs the scale
    if (zero_cuda(cudaGetLastError(), "the gradient scale") != 0 ||
        zero_cuda(cudaMemcpyAsync(d->host_norm, d->norm_out, 2 * sizeof(float), cudaMemcpyDeviceToHost, s),
                  "copying the norm") != 0) {
        return -1;
    }
    float grad_scale = 1.0f;  // the CPU Adam's copy (offload)
    if (pl->update(d, st, &grad_scale) != 0) { return -1; }
    if (pl->clear != NULL && zero_cuda(cudaMemsetAsync(pl->clear, 0, pl->clear_bytes, s), "cudaMemsetAsync") != 0) { return -1; }
    return pl->after(d, st, grad_scale);
}

// ----------------------------------------------------------------------------
// what the engine reports

// the compute stream's waits on communication so far, plus the host's for the gradient
// copies; the last step's norm. Synchronizes the compute stream: between steps.
static int zero_dev_stats(void* impl, ZeroStats* out) {
    ZeroDev* d = (ZeroDev*)impl;
    unsigned long long total = 0;
    // the step first, watched (zero3/nccl_watch.cuh): a copy into pageable memory waits for it unwatched
    if (zero_gpu_wait(d->compute, NULL, "waiting for the step") != 0 ||
        zero_cuda(cudaMemcpyAsync(&total, d->wait_clock + 1, sizeof(total), cudaMemcpyDeviceToHost, d->compute),
                  "reading the wait clock") != 0 ||
        zero_cuda(cudaStreamSynchronize(d->compute), "cudaStreamSynchronize") != 0) {
        return -1;
    }
    out->norm = d->host_norm[1];
    out->wait_ms = (double)total * 1e-6 + d->host_wait_ms;
    // every communicator's traffic: the shard group's, MiCS's replicas', hpZ's group's
    const ZeroNccl* cs[3] = {&d->nccl, &d->rep, &d->hpz};
    memset(out->comm_bytes, 0, sizeof(out->comm_bytes));
    memset(out->link_bytes, 0, sizeof(out->link_bytes));
    for (int i = 0; i < 3; i++) { zero_stats_add_traffic(out, cs[i]->bytes, cs[i]->link_bytes); }
    out->links_known = 1;
    out->nodes = d->nodes;
    out->ranks_per_node = d->per_node;
    out->moved[ZERO_MOVE_D2H] = d->moved_d2h;
    out->moved[ZERO_MOVE_H2D] = d->moved_h2d;
    out->update_ms = d->update_ms;
    out->mem[ZERO_MEM_PARAMS] = d->bytes_params;
    out->mem[ZERO_MEM_GRADS] = d->bytes_grads;
    out->mem[ZERO_MEM_OPTIMIZER] = d->bytes_optimizer;
    out->mem[ZERO_MEM_BUFFERS] = d->bytes_buffers;
    out->mem[ZERO_MEM_HOST_PARAMS] = d->host_bytes_params;
    out->mem[ZERO_MEM_HOST_GRADS] = d->host_bytes_grads;
    out->mem[ZERO_MEM_HOST_OPTIMIZER] = d->host_bytes_optimizer;
    out->mem[ZERO_MEM_HOST_BUFFERS] = d->host_bytes_buffers;
    out->mem_peak = d->bytes_params + d->bytes_grads + d->bytes_optimizer + d->bytes_buffers;  // allocated once, at init
    if (d->swap_open) {  // the NVMe tiers (as last seen, while --dpu's thread owns the file)
        if (!d->update_running) { d->swap_seen = zero_swap_counters(&d->swap); }
        ZeroSwapCounters c = d->swap_seen;
        out->moved[ZERO_MOVE_NVME_READ] = c.read_bytes;
        out->moved[ZERO_MOVE_NVME_WRITE] = c.write_bytes;
        out->nvme_wait_ms = c.wait_ms;
        out->update_nvme_wait_ms = c.step_wait_ms;
        out->reads_ahead = (double)d->reads_ahead_used;
        out->reads_ahead_peak = d->reads_ahead_peak;
        out->nvme_bytes = (double)d->swap.file_bytes;
    }
    out->padded_total = d->plan.padded_total;
    return 0;
}

// ----------------------------------------------------------------------------
// checkpoints

// bytes of a device or pinned host array streamed through a bounded host buffer
static int zero_dev_stream(FILE* fp, void* arr, size_t bytes, int writing) {
    const size_t chunk = (size_t)64 << 20;
    char* buf = (char*)malloc(bytes < chunk ? (bytes > 0 ? bytes : 1) : chunk);
    if (buf == NULL) { return zero_error("zero device: out of memory for the checkpoint buffer"); }
    int rc = 0;
    for (size_t off = 0; off < bytes && rc == 0; off += chunk) {
        size_t n = bytes - off < chunk ? bytes - off : chunk;
        if (writing) {
            rc = zero_cuda(cudaMemcpy(buf, (const char*)arr + off, n, cudaMemcpyDefault), "reading the state");
            if (rc == 0 && fwrite(buf, 1, n, fp) != n) { rc = zero_error("zero device: writing the state failed: %s", strerror(errno)); }
        } else {
            if (fread(buf, 1, n, fp) != n) { rc = zero_error("zero device: the state is truncated"); }
            if (rc == 0) { rc = zero_cuda(cudaMemcpy((char*)arr + off, buf, n, cudaMemcpyDefault), "writing the state"); }
        }
    }
    free(buf);
    return rc;
}

// the fp32 master, m and v (n bytes each) to or from a checkpoint: the arrays (GPU or pinned
// host memory), or the swap file's regions, in the same bytes
static int zero_dev_opt_stream(ZeroDev* d, FILE* fp, size_t n, int writing) {
    if (d->opt_nvme) {
        for (int r = ZERO_SWAP_P; r <= ZERO_SWAP_V; r++) {
            if ((writing ? zero_swap_region_save(&d->swap, r, fp) : zero_swap_region_load(&d->swap, r, fp)) != 0) { return -1; }
        }
        return 0;
    }
    float* arrs[3] = {d->master, d->m, d->v};
    for (int i = 0; i < 3; i++) {
        if (zero_dev_stream(fp, arrs[i], n, writing) != 0) { return -1; }
    }
    return 0;
}

// the compute copy a resume needs (bf16: it comes from stochastic rounding, so it is
// saved, not recomputed): the whole model at stages 0-2, this rank's shards at stage 3
static floatX* zero_dev_param_state(const ZeroDev* d, size_t* elems) {
    *elems = d->stage < 3 ? d->plan.padded_total : d->plan.shard_total;
    return d->stage < 3 ? d->params : d->shard_params;
}

static ZeroStateHeader zero_dev_state_header(const ZeroDev* d) {
    size_t np = 0;
    zero_dev_param_state(d, &np);
    return zero_state_header("device", d->stage, &d->plan, sizeof(floatX), 3 * d->opt_elems * sizeof(float) + np * sizeof(floatX));
}

// This rank's part of a checkpoint (zero3/checkpoint.h): the section header ("device"),
// then the fp32 master, m and v (opt_elems each: the padded model at stage 0, this rank's
// shards after), then the compute copy (zero_dev_param_state). A pending --dpu update is
// applied first.
static int zero_dev_save(void* impl, FILE* fp) {
    ZeroDev* d = (ZeroDev*)impl;
    if (zero_dev_flush(d) != 0 || zero_gpu_wait(d->compute, NULL, "waiting for the state") != 0) { return -1; }
    ZeroStateHeader h = zero_dev_state_header(d);
    size_t np = 0, n = d->opt_elems * sizeof(float);
    floatX* pstate = zero_dev_param_state(d, &np);
    if (zero_state_write_header(fp, &h) != 0 || zero_dev_opt_stream(d, fp, n, 1) != 0 ||
        (d->param_nvme ? zero_dev_params_stream(d, fp, 1) : zero_dev_stream(fp, pstate, np * sizeof(floatX), 1)) != 0) {
        return -1;
    }
    return 0;
}

// reads what zero_dev_save wrote into an engine of the same partition and precision; the
// persistent units of stage 3 are then gathered again from the shards
static int zero_dev_load(void* impl, FILE* fp) {
    ZeroDev* d = (ZeroDev*)impl;
    ZeroStateHeader want = zero_dev_state_header(d);
    size_t np = 0, n = d->opt_elems * sizeof(float);
    floatX* pstate = zero_dev_param_state(d, &np);
    if (zero_dev_flush(d) != 0 || zero_dev_cache_restore(d) != 0 || zero_gpu_wait(d->compute, NULL, "waiting before the load") != 0 ||
        zero_state_read_header(fp, &want) != 0 || zero_dev_opt_stream(d, fp, n, 0) != 0 ||
        (d->param_nvme ? zero_dev_params_stream(d, fp, 0) : zero_dev_stream(fp, pstate, np * sizeof(floatX), 0)) != 0) {
        return -1;
    }
    if (d->stage != 3) { return 0; }
    d->shards_written = 1;
    zero_pass_params_changed(&d->pass);  // hpZ: slices of the old parameters
    if (zero_nccl_after(&d->nccl, d->compute) != 0 || zero_dev_refresh_persistent(d) != 0 || zero_dev_join(d) != 0) { return -1; }
    return 0;
}

// the mean gradient of unit u's [begin, begin + n): the step's sum over the ranks where the
// norm reads it (the step plan's norm32 or normx, on the GPU or pinned), or with the
// gradient shards on the host their accumulators (h_grads; zeros for a unit none was added
// to yet) or the swap file's region, once every shard sent has been added
static int zero_dev_grad_shard(ZeroDev* d, int u, size_t begin, size_t n, float* out) {
    const ZeroUnit* pu = &d->plan.units[u];
    const ZeroDevStepPlan* pl = &d->step;
    int rc = 0;
    if (d->grads_host) {
        if (zero_dev_slots_drain(d) != 0 || (d->opt_nvme && zero_dev_update_join(d) != 0)) { return -1; }
        if (d->opt_nvme) {
            rc = zero_swap_state_read(&d->swap, ZERO_SWAP_G, u, 0, n, out);
        } else if (d->acc_started[u]) {
            memcpy(out, (const float*)d->h_grads + pu->shard_offset, n * sizeof(float));
        } else {
            memset(out, 0, n * sizeof(float));
        }
    } else {
        size_t at = d->stage == 0 ? pu->full_offset + begin : pu->shard_offset;
        if ((d->use_nccl && zero_dev_join(d) != 0) || zero_gpu_wait(d->compute, NULL, "waiting for the gradient") != 0) { return -1; }
        if (pl->norm32 != NULL) {
            rc = zero_cuda(cudaMemcpy(out, pl->norm32 + at, n * sizeof(float), cudaMemcpyDefault), "copying the gradient");
        } else {  // floatX, widened as cpu_adam_grad_add reads it
            floatX* tmp = (floatX*)malloc(n * sizeof(floatX));
            if (tmp == NULL) { return zero_error("zero: out of memory for a gradient's copy"); }
            rc = zero_cuda(cudaMemcpy(tmp, pl->normx + at, n * sizeof(floatX), cudaMemcpyDefault), "copying the gradient");
            if (rc == 0) { cpu_adam_grad_add(out, tmp, sizeof(floatX) == 2, n, 1); }
            free(tmp);
        }
    }
    for (size_t i = 0; rc == 0 && i < n; i++) { out[i] /= (float)d->dp_world; }
    return rc;
}

// This rank's range of unit u's fp32 master, m, v or mean gradient (ZeroOps.state_shard):
// its shard's real elements, from the whole arrays (stage 0) or the shards (1-3), on the
// GPU or, with offload, in pinned host memory (cudaMemcpyDefault takes either), or the
// swap file
static int zero_dev_state_shard(void* impl, int what, int u, size_t* begin, size_t* n, float* out) {
    ZeroDev* d = (ZeroDev*)impl;
    const ZeroUnit* pu = &d->plan.units[u];
    *begin = (size_t)d->rank * pu->shard;
    *n = zero_plan_shard_numel(&d->plan, u, d->rank);
    if (out == NULL || *n == 0) { return 0; }
    if (what == ZERO_STATE_GRAD) { return zero_dev_grad_shard(d, u, *begin, *n, out); }
    if (zero_dev_flush(d) != 0) { return -1; }  // --dpu: the pending update is part of the master
    if (zero_gpu_wait(d->compute, NULL, "waiting for the master") != 0) { return -1; }
    if (d->opt_nvme) {
        int region = what == ZERO_STATE_MASTER ? ZERO_SWAP_P : what == ZERO_STATE_M ? ZERO_SWAP_M : ZERO_SWAP_V;
        return zero_swap_state_read(&d->swap, region, u, 0, *n, out);
    }
    const float* arr = what == ZERO_STATE_MASTER ? d->master : what == ZERO_STATE_M ? d->m : d->v;
    const float* src = arr + (d->stage == 0 ? pu->full_offset + *begin : pu->shard_offset);
    return zero_cuda(cudaMemcpy(out, src, *n * sizeof(float), cudaMemcpyDefault), "copying the optimizer's state");
}

// ----------------------------------------------------------------------------
// changing a state (zero_tensor_set)

// fp32 to floatX on the host, rounded to nearest (as zero_to_floatx_kernel on the GPU)
static void zero_dev_round(floatX* out, const float* in, size_t n) {
#if defined(ENABLE_FP32)
    memcpy(out, in, n * sizeof(float));
#else
    for (size_t i = 0; i < n; i++) { out[i] = __float2bfloat16_rn(in[i]); }
#endif
}

// the gradient's part [at, at + k) of unit u's shard (whole: stage 0's [begin, begin + k)
// of the unit) from the mean in, kept as the sum over the ranks where the norm reads it:
// the host's accumulators and their squared norm, the swap file's region, or the GPU's
static int zero_dev_grad_write(ZeroDev* d, int u, size_t at, size_t k, const float* in) {
    const ZeroUnit* pu = &d->plan.units[u];
    const ZeroDevStepPlan* pl = &d->step;
    float* sum = (float*)malloc(k * sizeof(float) + 1);
    if (sum == NULL) { return zero_error("zero device: out of memory for a gradient's change"); }
    for (size_t i = 0; i < k; i++) { sum[i] = in[i] * (float)d->dp_world; }
    int rc = 0;
    if (d->grads_host) {
        if (zero_dev_slots_drain(d) != 0 || (d->opt_nvme && zero_dev_update_join(d) != 0)) { rc = -1; }
        else if (d->opt_nvme) { rc = zero_swap_state_write(&d->swap, ZERO_SWAP_G, u, at, k, sum); }
        else if (!d->acc_started[u]) { rc = zero_error("zero device: unit %d has no gradient this step to change", u); }
        else {
            float* acc = (float*)d->h_grads + pu->shard_offset + at;
            d->grad_sumsq += grad_norm_squared(sum, k) - grad_norm_squared(acc, k);  // (the step's norm)
            memcpy(acc, sum, k * sizeof(float));
        }
    } else {
        size_t off = d->stage == 0 ? pu->full_offset + at : pu->shard_offset + at;
        if ((d->use_nccl && zero_dev_join(d) != 0) || zero_gpu_wait(d->compute, NULL, "waiting for the gradient") != 0) { rc = -1; }
        else if (pl->norm32 != NULL) {
            rc = zero_cuda(cudaMemcpy((float*)pl->norm32 + off, sum, k * sizeof(float), cudaMemcpyDefault), "changing the gradient");
        } else {
            floatX* x = (floatX*)malloc(k * sizeof(floatX) + 1);
            rc = x != NULL ? 0 : zero_error("zero device: out of memory for a gradient's change");
            if (rc == 0) { zero_dev_round(x, sum, k); }
            if (rc == 0) { rc = zero_cuda(cudaMemcpy((floatX*)pl->normx + off, x, k * sizeof(floatX), cudaMemcpyDefault), "changing the gradient"); }
            free(x);
        }
        // offload's host copy of the shards (stages 1-3, copied out on the last micro-step): what the
        // CPU Adam reads, once the copies have landed
        if (rc == 0 && d->offload && d->stage > 0 && d->h_grads != NULL &&
            (rc = zero_gpu_wait(d->copy_out, NULL, "waiting for the gradient's copies")) == 0) {
            if (d->stage == 1 && pl->norm32 == NULL) {
                floatX* hx = (floatX*)d->h_grads + pu->shard_offset + at;
                zero_dev_round(hx, sum, k);
            } else {
                memcpy((float*)d->h_grads + pu->shard_offset + at, sum, k * sizeof(float));
            }
        }
    }
    free(sum);
    return rc;
}

// ZeroOps.state_write: unit u's [begin, begin + n) of a state, the part this rank holds
// (stage 0: all of it; the compute copy at stages 0-2: all of it), wherever it lives
static int zero_dev_state_write(void* impl, int what, int u, size_t begin, size_t n, const float* in) {
    ZeroDev* d = (ZeroDev*)impl;
    const ZeroUnit* pu = &d->plan.units[u];
    if (zero_dev_flush(d) != 0 || zero_gpu_wait(d->compute, NULL, "waiting before a change") != 0) { return -1; }  // --dpu's update first
    // the part of [begin, begin + n) in this rank's shard: k elements from `at` in the shard, src in `in`
    size_t at = 0, end = 0;
    if (zero_plan_shard_range(&d->plan, u, d->rank, begin, begin + n, &at, &end) < 0) { return -1; }
    size_t k = end - at;
    const float* src = k > 0 ? in + ((size_t)d->rank * pu->shard + at - begin) : in;
    int whole = d->stage == 0;
    if (what == ZERO_STATE_GRAD) { return whole ? zero_dev_grad_write(d, u, begin, n, in) : zero_dev_grad_write(d, u, at, k, src); }
    if (what != ZERO_STATE_MASTER && d->opt_nvme) { return zero_swap_state_write(&d->swap, what == ZERO_STATE_M ? ZERO_SWAP_M : ZERO_SWAP_V, u, at, k, src); }
    int rc = 0;
    if (what == ZERO_STATE_MASTER && d->opt_nvme) {
        rc = zero_swap_state_write(&d->swap, ZERO_SWAP_P, u, at, k, src);
    } else {
        float* arr = what == ZERO_STATE_MASTER ? d->master : what == ZERO_STATE_M ? d->m : d->v;
        float* dst = whole ? arr + pu->full_offset + begin : arr + pu->shard_offset + at;
        rc = zero_cuda(cudaMemcpy(dst, whole ? in : src, (whole ? n : k) * sizeof(float), cudaMemcpyDefault), "changing the optimizer's state");
    }
    if (rc != 0 || what != ZERO_STATE_MASTER) { return rc; }
    // the compute copy: the whole buffer every rank holds (stages 0-2), or the shard (3), wherever it lives
    size_t m = d->stage < 3 ? n : pu->shard;
    floatX* x = (floatX*)malloc(m * sizeof(floatX) + 1);
    if (x == NULL) { return zero_error("zero device: out of memory for a parameter shard"); }
    if (d->stage < 3) {
        zero_dev_round(x, in, n);
        rc = zero_cuda(cudaMemcpy(d->params + pu->full_offset + begin, x, n * sizeof(floatX), cudaMemcpyDefault), "changing the parameters");
    } else if (k > 0) {
        rc = zero_dev_param_get(d, u, x);
        if (rc == 0) { zero_dev_round(x + at, src, k); rc = zero_dev_param_put(d, u, x); }
    }
    free(x);
    return rc;
}

// ZeroOps.state_commit: what is held whole made whole again after every rank's write:
// stage 0 gathers the unit of the state (the compute copy too, for the master), stages 1-2
// the compute copy's unit; stage 3 regathers a persistent unit and forgets hpZ's slices
static int zero_dev_state_commit(void* impl, int what, int u) {
    ZeroDev* d = (ZeroDev*)impl;
    const ZeroUnit* pu = &d->plan.units[u];
    if ((what != ZERO_STATE_MASTER && d->stage > 0) || !d->use_nccl) { return 0; }  // (no NCCL: one rank at stage 0)
    if (zero_dev_cache_restore(d) != 0) { return -1; }  // (a persistent unit is refreshed below)
    if (zero_nccl_after(&d->nccl, d->compute) != 0) { return -1; }
    if (d->stage == 0) {  // every rank holds every state whole: each rank's range to the others (set_local wrote its own)
        const ZeroDevStepPlan* pl = &d->step;
        int rc = 0;
        if (what == ZERO_STATE_GRAD && pl->norm32 == NULL) {
            rc = zero_nccl_allgather(&d->nccl, (floatX*)pl->normx + pu->full_offset, pu->shard, NCCL_FLOATX, u);
        } else {
            float* arr = what == ZERO_STATE_MASTER ? d->master : what == ZERO_STATE_M ? d->m : what == ZERO_STATE_V ? d->v : (float*)pl->norm32;
            rc = zero_nccl_allgather(&d->nccl, arr + pu->full_offset, pu->shard, ncclFloat32, u);
        }
        if (rc == 0 && what == ZERO_STATE_MASTER) { rc = zero_nccl_allgather(&d->nccl, d->params + pu->full_offset, pu->shard, NCCL_FLOATX, u); }
        if (rc != 0) { return -1; }
    } else if (d->stage < 3) {
        if (zero_nccl_allgather(&d->nccl, d->params + pu->full_offset, pu->shard, NCCL_FLOATX, u) != 0) { return -1; }
    } else {
        d->shards_written = 1;
        zero_pass_params_changed(&d->pass);  // hpZ: slices of the old parameters
        if (d->sched.persistent[u] && zero_dev_refresh_unit(d, u) != 0) { return -1; }
    }
    return zero_dev_join(d) != 0 || zero_gpu_wait(d->compute, NULL, "sharing a change") != 0 ? -1 : 0;
}

// ----------------------------------------------------------------------------
// the cache: the pools' buffers and the persistent units' copies, freed on demand

// Every pool buffer's memory freed (release: its bytes added to *bytes) or allocated again
// (not release: the bytes allocated, counted into *bytes); the buffers' events and the
// pools' layout stay
static int zero_dev_pools_memory(ZeroDev* d, int release, double* bytes) {
    ZeroDevPool* all[2] = {d->ppool, d->gpool};
    int counts[2] = {d->nppool, d->ngpool};
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < counts[k]; i++) {
            ZeroDevPool* p = &all[k][i];
            size_t shard = p->elems / d->world;
            for (int j = 0; j < p->count; j++) {
                ZeroDevBuf* b = &p->bufs[j];
                if (release) {
                    if (b->unit != -1) { return zero_error("zero device: unit %d is still gathered between passes", b->unit); }
                    *bytes += (double)(p->elems * sizeof(floatX) + (p->rs ? shard * sizeof(floatX) : 0) + (p->rs32 ? shard * sizeof(float) : 0));
                    cudaFree(b->buf); cudaFree(b->rs_out); cudaFree(b->rs32);
                    b->buf = NULL; b->rs_out = NULL; b->rs32 = NULL;
                    continue;
                }
                b->buf = (floatX*)zero_dev_alloc(p->elems * sizeof(floatX), bytes);
                if (p->rs) { b->rs_out = (floatX*)zero_dev_alloc(shard * sizeof(floatX), bytes); }
                if (p->rs32) { b->rs32 = (float*)zero_dev_alloc(shard * sizeof(float), bytes); }
                if (b->buf == NULL || (p->rs && b->rs_out == NULL) || (p->rs32 && b->rs32 == NULL)) { return -1; }
            }
        }
    }
    return 0;
}

// ZeroOps.empty_cache: once the work so far is done (a pending --dpu update applied, the
// reductions joined, the GPU idle), every pool buffer's memory and, at stage 3, the
// persistent units' copies freed, until zero_dev_cache_restore
static int zero_dev_empty_cache(void* impl, double* freed) {
    ZeroDev* d = (ZeroDev*)impl;
    *freed = 0.0;
    if (d->cache_emptied) { return 0; }
    if (zero_dev_flush(d) != 0 || (d->use_nccl && zero_dev_join(d) != 0) ||
        zero_gpu_wait(d->compute, NULL, "waiting before the cache is emptied") != 0 ||
        zero_cuda(cudaDeviceSynchronize(), "waiting before the cache is emptied") != 0 || zero_dev_pools_memory(d, 1, freed) != 0) {
        return -1;
    }
    for (int u = 0; d->stage == 3 && u < d->plan.num_units; u++) {
        if (!d->sched.persistent[u]) { continue; }
        *freed += (double)d->plan.units[u].padded * sizeof(floatX);
        cudaFree(d->unit_ptr[u]);
        d->unit_ptr[u] = NULL;
    }
    d->cache_emptied = 1;
    return 0;
}

// What zero_dev_empty_cache freed, allocated again (not counted again: the accounting's
// figures are peaks) and the persistent units gathered again; nothing when nothing was freed
static int zero_dev_cache_restore(ZeroDev* d) {
    if (!d->cache_emptied) { return 0; }
    double again = 0.0;
    if (zero_dev_pools_memory(d, 0, &again) != 0) { return -1; }
    for (int u = 0; d->stage == 3 && u < d->plan.num_units; u++) {
        if (!d->sched.persistent[u]) { continue; }
        if ((d->unit_ptr[u] = (floatX*)zero_dev_alloc(d->plan.units[u].padded * sizeof(floatX), &again)) == NULL) { return -1; }
    }
    d->cache_emptied = 0;
    // (the allocations' zeroing, on the default stream, done before any stream writes them)
    if (zero_cuda(cudaDeviceSynchronize(), "allocating the cache again") != 0) { return -1; }
    if (d->stage != 3) { return 0; }
    return zero_nccl_after(&d->nccl, d->compute) != 0 || zero_dev_refresh_persistent(d) != 0 || zero_dev_join(d) != 0 ? -1 : 0;
}

#endif // ZERO3_DEVICE_STEP_CUH
