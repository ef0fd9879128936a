/*
 The device engine, continued (zero3/device.cuh includes this file last): init, from the
 schedule's pools to the NCCL communicators and ZeRO++'s groups, teardown, and the table
 of calls behind zero_dev_create. Not included on its own.
*/
#ifndef ZERO3_DEVICE_INIT_CUH
#define ZERO3_DEVICE_INIT_CUH

// ----------------------------------------------------------------------------
// init and teardown

// the pools: stage 3's gather buffers, as many of each size as the pass driver ever holds
// (walked at init: its decisions depend only on the schedule and the configuration);
// stages 2-3's gradient buffers, two per size when several units have it (one being
// written while the other is reduced), plus one more if the embedding (unit 0) has it
// too, since its gradient is open for the whole backward
static int zero_dev_pools_init(ZeroDev* d) {
    // the counts --estimate finds (zero3/dev_estimate.h), one pool per size
    size_t elems[ZERO_DEV_MAX_POOLS], gelems[ZERO_DEV_MAX_POOLS];
    int count[ZERO_DEV_MAX_POOLS], gcount[ZERO_DEV_MAX_POOLS];
    if (zero_dev_pool_counts(&d->plan, &d->sched, d->stage, elems, count, &d->nppool) != 0 ||
        zero_dev_grad_pool_counts(&d->plan, d->stage, gelems, gcount, &d->ngpool) != 0) {
        return -1;
    }
    for (int i = 0; i < d->nppool; i++) { d->ppool[i].elems = elems[i]; d->ppool[i].count = count[i]; }
    for (int i = 0; i < d->ngpool; i++) { d->gpool[i].elems = gelems[i]; d->gpool[i].count = gcount[i]; }
    int red32 = d->comm32 || d->cfg.quantized_gradients;  // those reduce into d->wide_out, or with grads_host their own rs32
    if (zero_dev_pools_alloc(d, d->ppool, d->nppool, 0, 0) != 0) { return -1; }
    return zero_dev_pools_alloc(d, d->gpool, d->ngpool, !red32, red32 && d->grads_host);
}

// The initial parameters (zero3/zero.h's [Note: partitioned init]), unit by unit: this
// rank's shard filled on the host (one shard-sized buffer) and uploaded into an fp32 unit
// buffer on the GPU, the ranks' agreement that every fill succeeded, the unit all-gathered
// there where this rank holds it whole (stages 0-2, persistent units); then the master
// (whole or this rank's shard) and the floatX compute copy.
static int zero_dev_fill_params(ZeroDev* d, const ZeroInit* in) {
    const ZeroPlan* p = &d->plan;
    size_t largest = 0, largest_shard = 0;
    for (int u = 0; u < p->num_units; u++) {
        if (p->units[u].padded > largest) { largest = p->units[u].padded; }
        if (p->units[u].shard > largest_shard) { largest_shard = p->units[u].shard; }
    }
    float* host_shard = (float*)malloc(largest_shard * sizeof(float));
    double scratch_bytes = 0;
    float* dev_unit = (float*)zero_dev_alloc(largest * sizeof(float), &scratch_bytes);
    // parameter offload: each shard converted on the GPU, then stored where it lives
    floatX* dev_shard = d->offload_param ? (floatX*)zero_dev_alloc(largest_shard * sizeof(floatX), &scratch_bytes) : NULL;
    floatX* host_x = d->offload_param ? (floatX*)malloc(largest_shard * sizeof(floatX)) : NULL;
    int rc = host_shard != NULL && dev_unit != NULL && (!d->offload_param || (dev_shard != NULL && host_x != NULL))
                 ? 0 : zero_error("zero device: out of memory for the initial parameters");
    if (rc == 0 && d->opt_nvme) { rc = zero_swap_master_begin(&d->swap); }  // (the master goes to the swap file unit by unit)
    for (int u = 0; u < p->num_units && rc == 0; u++) {
        const ZeroUnit* pu = &p->units[u];
        size_t n = zero_plan_shard_numel(p, u, d->rank);
        int whole = d->stage < 3 || d->sched.persistent[u];
        float* mine = dev_unit + (size_t)d->rank * pu->shard;
        memset(host_shard, 0, pu->shard * sizeof(float));  // the padding is zero
        rc = zero_fill_agree(d->comm, n > 0 && in->fill(in->fill_ctx, u, (size_t)d->rank * pu->shard, n, host_shard) != 0);
        if (rc == 0) { rc = zero_cuda(cudaMemcpy(mine, host_shard, pu->shard * sizeof(float), cudaMemcpyHostToDevice), "uploading a shard"); }
        if (rc == 0) { rc = zero_cuda(cudaDeviceSynchronize(), "uploading a shard"); }  // before the NCCL stream reads it
        if (rc == 0 && whole && d->world > 1) {
            rc = zero_nccl_allgather(&d->nccl, dev_unit, pu->shard, ncclFloat32, u);
            if (rc == 0) { rc = zero_gpu_wait(d->nccl.stream, NULL, "gathering a unit"); }
        }
        if (rc == 0 && d->stage == 0) {
            rc = zero_cuda(cudaMemcpy(d->master + pu->full_offset, dev_unit, pu->padded * sizeof(float), cudaMemcpyDeviceToDevice), "copying");
        } else if (rc == 0 && d->opt_nvme) {
            rc = zero_swap_master_unit(&d->swap, u, host_shard);  // (this rank's shard, its padding zero)
        } else if (rc == 0) {  // (cudaMemcpyDefault: the master may be pinned host memory)
            rc = zero_cuda(cudaMemcpy(d->master + pu->shard_offset, mine, pu->shard * sizeof(float), cudaMemcpyDefault), "copying");
        }
        if (rc != 0) { break; }
        if (d->stage < 3) {
            zero_to_floatx_kernel<<<(unsigned)CEIL_DIV(pu->padded, (size_t)256), 256>>>(d->params + pu->full_offset, dev_unit, pu->padded);
        } else {
            floatX* to = d->offload_param ? dev_shard : d->shard_params + pu->shard_offset;
            zero_to_floatx_kernel<<<(unsigned)CEIL_DIV(pu->shard, (size_t)256), 256>>>(to, mine, pu->shard);
            if (d->sched.persistent[u]) {
                zero_to_floatx_kernel<<<(unsigned)CEIL_DIV(pu->padded, (size_t)256), 256>>>(d->unit_ptr[u], dev_unit, pu->padded);
            }
        }
        rc = zero_cuda(cudaGetLastError(), "launching the conversion");
        if (rc == 0 && d->offload_param) {
            rc = zero_cuda(cudaMemcpy(host_x, dev_shard, pu->shard * sizeof(floatX), cudaMemcpyDeviceToHost), "copying a parameter shard to the host");
            if (rc == 0) { rc = zero_dev_param_put(d, u, host_x); }
        }
        if (rc == 0) { rc = zero_cuda(cudaDeviceSynchronize(), "converting a unit"); }  // dev_unit is reused next
    }
    if (rc == 0 && d->opt_nvme) { rc = zero_swap_master_end(&d->swap); }
    free(host_shard);
    free(host_x);
    cudaFree(dev_unit);
    cudaFree(dev_shard);
    d->shards_written = 1;
    return rc;
}

// The communicators over zero3/groups.h's groups (the host engine's too): the shard group
// (everyone, or MiCS's groups of mics_shard_size consecutive ranks), the replicas (only
// with MiCS), the secondary group (only with hpZ), each over NCCL and told where the nodes are.
// NCCL whenever the engine communicates; at one rank stages 1-3 still run it (the
// collectives are then copies), so the whole path runs on a single GPU.
static int zero_dev_comms_init(ZeroDev* d) {
    ZeroGroups g;
    if (MPI_Comm_rank(d->comm, &d->global_rank) != MPI_SUCCESS) { return zero_error("zero device: MPI_Comm_rank failed"); }
    if (zero_groups_split(d->comm, &d->cfg, &g) != 0) { return -1; }
    d->nodes = g.nodes;
    d->per_node = g.per_node;
    d->dp_world = g.dp_world;
    d->rank = g.rank;
    d->world = g.world;
    d->use_nccl = d->world > 1 || d->stage >= 1;
    int rc = 0;
    if ((d->use_nccl && zero_nccl_init(&d->nccl, g.shard, g.node, NULL) != 0) ||
        (g.mics && zero_nccl_init(&d->rep, g.reps, g.node, &d->nccl) != 0) ||
        (g.hpz_on && zero_nccl_init(&d->hpz, g.hpz, g.node, &d->nccl) != 0)) {
        rc = -1;
    }
    zero_groups_free(&g);
    return rc;
}

// ZeRO++'s buffers (stage 3): hpZ's slices; the quantised collectives' scratch, for the
// largest unit; qgZ's fp32 reduced shard (wide_out, shared with the fp32 reductions)
static int zero_dev_zeropp_init(ZeroDev* d) {
    const ZeroPlan* p = &d->plan;
    size_t scratch = 0, largest_shard = 0;
    for (int u = 0; u < p->num_units; u++) {
        size_t sh = p->units[u].shard;
        if (sh > largest_shard) { largest_shard = sh; }
        size_t qw = d->cfg.quantized_weights ? (size_t)d->world * zero_quant_bytes(sh) : 0;
        size_t qg = d->cfg.quantized_gradients ? zero_nccl_rs_q_scratch(&d->nccl, sh) : 0;
        if (qw > scratch) { scratch = qw; }
        if (qg > scratch) { scratch = qg; }
    }
    if (scratch > 0 && (d->qscratch = (unsigned char*)zero_dev_alloc(scratch, &d->bytes_buffers)) == NULL) { return -1; }
    if ((d->comm32 || d->cfg.quantized_gradients) && d->stage >= 2 && !d->grads_host &&
        (d->wide_out = (float*)zero_dev_alloc(largest_shard * sizeof(float), &d->bytes_buffers)) == NULL) {
        return -1;
    }
    if (d->hpz.world > 1) {
        d->sec = (floatX*)zero_dev_alloc(p->padded_total / (size_t)d->hpz.world * sizeof(floatX), &d->bytes_params);
        if (d->sec == NULL) { return -1; }
    }
    return 0;
}

// grads_host: the staging slots (pinned, the largest shard in fp32 each), their events,
// the accumulators' flags and the norm's pinned word
static int zero_dev_slots_init(ZeroDev* d) {
    size_t largest_shard = 0;
    for (int u = 0; u < d->plan.num_units; u++) {
        if (d->plan.units[u].shard > largest_shard) { largest_shard = d->plan.units[u].shard; }
    }
    for (int i = 0; i < ZERO_DEV_SLOTS; i++) {
        if ((d->slots[i].host = zero_dev_alloc_host(largest_shard * sizeof(float), &d->host_bytes_buffers)) == NULL ||
            zero_cuda(cudaEventCreateWithFlags(&d->slots[i].done, cudaEventDisableTiming), "cudaEventCreate") != 0) {
            return -1;
        }
    }
    d->acc_started = (unsigned char*)calloc((size_t)d->plan.num_units, 1);
    if (d->acc_started == NULL) { return zero_error("zero device: out of memory"); }
    return zero_cuda(cudaMallocHost((void**)&d->host_sumsq, sizeof(double)), "cudaMallocHost");
}

// Builds the device engine over in->comm (one GPU per rank, the device set) for
// in->model, its work ordered after in->stream, the model's.
static int zero_dev_init(void* impl, const ZeroInit* in) {
    ZeroDev* d = (ZeroDev*)impl;
    if (zero_gpu_check_floatx(in->param_bytes, "device") != 0) { return -1; }
    const ZeroConfig* cfg = in->cfg;
    int num_units = in->model->num_units;
    memset(d, 0, sizeof(*d));
    d->cfg = *cfg;
    d->stage = cfg->stage;
    d->compute = (cudaStream_t)in->stream;
    d->comm = in->comm;
    d->beta1 = in->beta1; d->beta2 = in->beta2; d->eps = in->eps;
    d->opt_nvme = cfg->offload_optimizer == ZERO_OFFLOAD_NVME;
    d->param_nvme = cfg->offload_param == ZERO_OFFLOAD_NVME;
    d->offload = cfg->offload_optimizer != ZERO_OFFLOAD_NONE;  // the CPU Adam, on pinned arrays or from the swap file
    d->offload_param = cfg->offload_param != ZERO_OFFLOAD_NONE;
    d->dpu = in->dpu;
    d->omp_threads = in->threads;
    if (d->offload && d->stage == 0) { return zero_error("zero device: optimizer offload needs ZeRO stage 1 or more"); }
    if (d->dpu && !d->offload) { return zero_error("zero device: --dpu delays the CPU Adam's update: it needs --offload-optimizer cpu"); }
    if (d->dpu && d->param_nvme) {  // (its thread would write the parameter region the gathers read)
        return zero_error("zero device: --dpu delays the CPU Adam's update: not with the parameters on NVMe");
    }
    if (d->opt_nvme && d->stage != 3) { return zero_error("zero device: optimizer offload to NVMe needs ZeRO stage 3"); }
    if (d->offload_param && (d->stage != 3 || !d->offload)) {  // (the fp32 master would be a shard-sized array on the GPU)
        return zero_error("zero device: parameter offload needs ZeRO stage 3 and the optimizer offloaded too (--offload-optimizer cpu or nvme)");
    }
    if (d->offload_param && cfg->hpz_partition_size > 1) {
        return zero_error("zero device: hpZ (zero_hpz_partition_size) keeps a slice of every unit on the GPU: not with parameter offload");
    }
    d->grads_host = d->offload_param || d->opt_nvme;
    if (zero_dev_comms_init(d) != 0) { return -1; }
    if (zero_plan_init(&d->plan, in->model->unit_numel, num_units, d->world, d->rank, sizeof(floatX)) != 0 ||
        zero_schedule_init(&d->sched, in->model, &d->plan, cfg) != 0) {
        return -1;
    }
    const ZeroPlan* p = &d->plan;
    d->num_tensors = in->model->num_tensors;
    d->tensors = (ZeroTensor*)malloc(d->num_tensors * sizeof(ZeroTensor));
    d->unit_ptr = (floatX**)calloc(num_units, sizeof(floatX*));
    d->unit_buf = (ZeroDevBuf**)calloc(num_units, sizeof(ZeroDevBuf*));
    d->grad_buf = (ZeroDevBuf**)calloc(num_units, sizeof(ZeroDevBuf*));
    d->reduced_ev = (cudaEvent_t*)calloc(num_units, sizeof(cudaEvent_t));
    if (!d->tensors || !d->unit_ptr || !d->unit_buf || !d->grad_buf || !d->reduced_ev) { return zero_error("zero device: out of memory"); }
    memcpy(d->tensors, in->model->tensors, d->num_tensors * sizeof(ZeroTensor));
    for (int u = 0; u < num_units; u++) {
        if (zero_cuda(cudaEventCreateWithFlags(&d->reduced_ev[u], cudaEventDisableTiming), "cudaEventCreate") != 0) { return -1; }
    }
    // fp32 reductions of bf16 gradients (fp32 ones are reduced in fp32 anyway; without NCCL,
    // one rank at stage 0, nothing is reduced)
    d->comm32 = cfg->comm_dtype == ZERO_COMM_FP32 && sizeof(floatX) != sizeof(float) && d->use_nccl;

    // the model states
    size_t np = p->padded_total, ns = p->shard_total;
    d->opt_elems = d->stage == 0 ? np : ns;
    if (d->stage < 3) {
        if ((d->params = (floatX*)zero_dev_alloc(np * sizeof(floatX), &d->bytes_params)) == NULL) { return -1; }
    } else if (!d->offload_param && (d->shard_params = (floatX*)zero_dev_alloc(ns * sizeof(floatX), &d->bytes_params)) == NULL) {
        return -1;
    }
    if (d->stage < 2 && (d->grads = (floatX*)zero_dev_alloc(np * sizeof(floatX), &d->bytes_grads)) == NULL) { return -1; }
    if (d->stage == 1 && !d->comm32 && (d->gshard = (floatX*)zero_dev_alloc(ns * sizeof(floatX), &d->bytes_grads)) == NULL) { return -1; }
    if (d->stage >= 2 && !d->grads_host && (d->acc = (float*)zero_dev_alloc(ns * sizeof(float), &d->bytes_grads)) == NULL) { return -1; }
    if (d->comm32) {  // the fp32 reductions' buffers (see the top of the file)
        size_t largest = 0, largest_shard = 0;
        for (int u = 0; u < num_units; u++) {
            if (p->units[u].padded > largest) { largest = p->units[u].padded; }
            if (p->units[u].shard > largest_shard) { largest_shard = p->units[u].shard; }
        }
        if ((d->stage == 0 && (d->grads32 = (float*)zero_dev_alloc(np * sizeof(float), &d->bytes_grads)) == NULL) ||
            (d->stage == 1 && (d->gshard32 = (float*)zero_dev_alloc(ns * sizeof(float), &d->bytes_grads)) == NULL) ||
            (d->stage >= 1 && (d->wide = (float*)zero_dev_alloc(largest * sizeof(float), &d->bytes_buffers)) == NULL)) {
            return -1;
        }
    }
    if (zero_dev_zeropp_init(d) != 0 ||
        zero_pass_init(&d->pass, &d->sched, &zero_dev_mover, d, d->stage, d->sec != NULL) != 0) {
        return -1;
    }
    d->pass.reduce_local = !d->use_nccl;  // one rank at stage 0: nothing to reduce
    if (d->offload) {
        // in memory: the master, moments and gradient shards (with the optimizer on NVMe
        // the swap file holds them); the compute copy the CPU Adam writes (with the
        // parameters on NVMe, the cache and the swap file are written instead)
        size_t gb = zero_dev_shard_grad_bytes(d);
        int mem = !d->opt_nvme;
        if ((mem && (d->master = (float*)zero_dev_alloc_host(ns * sizeof(float), &d->host_bytes_optimizer)) == NULL) ||
            (mem && (d->m = (float*)zero_dev_alloc_host(ns * sizeof(float), &d->host_bytes_optimizer)) == NULL) ||
            (mem && (d->v = (float*)zero_dev_alloc_host(ns * sizeof(float), &d->host_bytes_optimizer)) == NULL) ||
            (mem && (d->h_grads_buf[0] = zero_dev_alloc_host(ns * gb, &d->host_bytes_grads)) == NULL) ||
            (d->dpu && (d->h_grads_buf[1] = zero_dev_alloc_host(ns * gb, &d->host_bytes_grads)) == NULL) ||
            (!d->param_nvme && (d->h_params_buf[0] = (floatX*)zero_dev_alloc_host(ns * sizeof(floatX), &d->host_bytes_params)) == NULL) ||
            (d->dpu && (d->h_params_buf[1] = (floatX*)zero_dev_alloc_host(ns * sizeof(floatX), &d->host_bytes_params)) == NULL)) {
            return -1;
        }
        d->h_grads = d->h_grads_buf[0];
        d->h_params = d->h_params_buf[0];
        if (d->offload_param && !d->param_nvme) { d->shard_params = d->h_params; }  // the CPU Adam writes the shards the gathers upload
        if (d->grads_host && zero_dev_slots_init(d) != 0) { return -1; }
        if (zero_cuda(cudaStreamCreateWithFlags(&d->copy_out, cudaStreamNonBlocking), "creating the copy-out stream") != 0 ||
            zero_cuda(cudaStreamCreateWithFlags(&d->copy_in, cudaStreamNonBlocking), "creating the copy-in stream") != 0 ||
            zero_cuda(cudaEventCreateWithFlags(&d->reduced_out_ev, cudaEventDisableTiming), "cudaEventCreate") != 0 ||
            zero_cuda(cudaEventCreateWithFlags(&d->upload_ev, cudaEventDisableTiming), "cudaEventCreate") != 0 ||
            zero_cuda(cudaEventCreateWithFlags(&d->copied_ev, cudaEventDisableTiming), "cudaEventCreate") != 0) {
            return -1;
        }
    } else if ((d->master = (float*)zero_dev_alloc(d->opt_elems * sizeof(float), &d->bytes_optimizer)) == NULL ||
               (d->m = (float*)zero_dev_alloc(d->opt_elems * sizeof(float), &d->bytes_optimizer)) == NULL ||
               (d->v = (float*)zero_dev_alloc(d->opt_elems * sizeof(float), &d->bytes_optimizer)) == NULL) {
        return -1;
    }
    if ((d->norm_scratch = (double*)zero_dev_alloc(GLOBAL_NORM_SCRATCH_DOUBLES * sizeof(double), &d->bytes_buffers)) == NULL ||
        (d->norm_out = (float*)zero_dev_alloc(2 * sizeof(float), &d->bytes_buffers)) == NULL ||
        (d->norm_sum = (double*)zero_dev_alloc(sizeof(double), &d->bytes_buffers)) == NULL ||
        (d->wait_clock = (unsigned long long*)zero_dev_alloc(2 * sizeof(unsigned long long), &d->bytes_buffers)) == NULL ||
        zero_cuda(cudaMallocHost((void**)&d->host_norm, 2 * sizeof(float)), "cudaMallocHost") != 0) {
        return -1;
    }
    d->host_norm[0] = d->host_norm[1] = 0.0f;

    // stage 3: the persistent units in buffers of their own, gathered for the whole run
    for (int u = 0; d->stage == 3 && u < num_units; u++) {
        if (!d->sched.persistent[u]) { continue; }
        d->unit_ptr[u] = (floatX*)zero_dev_alloc(p->units[u].padded * sizeof(floatX), &d->bytes_buffers);
        if (d->unit_ptr[u] == NULL) { return -1; }
        zero_schedule_gathered(&d->sched, u);
    }
    if (zero_dev_pools_init(d) != 0 || zero_dev_step_plan_init(d) != 0) { return -1; }
    if ((d->opt_nvme || d->param_nvme) && zero_dev_swap_init(d) != 0) { return -1; }
    return zero_dev_fill_params(d, in);
}

static void zero_dev_free(void* impl) {
    ZeroDev* d = (ZeroDev*)impl;
    if (d == NULL) { return; }
    if (d->compute != NULL) { cudaStreamSynchronize(d->compute); }
    if (d->copy_out != NULL) { cudaStreamSynchronize(d->copy_out); }
    if (d->copy_in != NULL) { cudaStreamSynchronize(d->copy_in); }
    zero_nccl_free(&d->hpz);  // (sharing the shard group's stream: first)
    zero_nccl_free(&d->rep);
    if (d->use_nccl) { zero_nccl_free(&d->nccl); }
    cudaFree(d->sec); cudaFree(d->qscratch);
    zero_pass_free(&d->pass);
    zero_trace_free(&d->trace);
    zero_dev_pools_free(d->ppool, d->nppool);
    zero_dev_pools_free(d->gpool, d->ngpool);
    for (int u = 0; d->unit_ptr != NULL && u < d->plan.num_units; u++) {
        if (d->sched.persistent != NULL && d->sched.persistent[u]) { cudaFree(d->unit_ptr[u]); }
    }
    for (int u = 0; d->reduced_ev != NULL && u < d->plan.num_units; u++) {
        if (d->reduced_ev[u] != NULL) { cudaEventDestroy(d->reduced_ev[u]); }
    }
    if (!d->offload_param) { cudaFree(d->shard_params); }  // (else one of the h_params buffers)
    cudaFree(d->params); cudaFree(d->grads); cudaFree(d->gshard); cudaFree(d->acc);
    for (int i = 0; i < ZERO_DEV_SLOTS; i++) {
        if (d->slots[i].host != NULL) { cudaFreeHost(d->slots[i].host); }
        if (d->slots[i].done != NULL) { cudaEventDestroy(d->slots[i].done); }
    }
    if (d->host_sumsq != NULL) { cudaFreeHost(d->host_sumsq); }
    free(d->acc_started);
    cudaFree(d->grads32); cudaFree(d->gshard32); cudaFree(d->wide); cudaFree(d->wide_out);
    if (d->update_running) { pthread_join(d->update_thread, NULL); }  // it writes these, and streams the swap file
    zero_dev_swap_free(d);
    if (d->offload) {
        void* pinned[7] = {d->master, d->m, d->v, d->h_params_buf[0], d->h_params_buf[1], d->h_grads_buf[0], d->h_grads_buf[1]};
        for (int i = 0; i < 7; i++) {
            if (pinned[i] != NULL) { cudaFreeHost(pinned[i]); }
        }
        if (d->copy_out != NULL) { cudaStreamDestroy(d->copy_out); }
        if (d->copy_in != NULL) { cudaStreamDestroy(d->copy_in); }
        if (d->reduced_out_ev != NULL) { cudaEventDestroy(d->reduced_out_ev); }
        if (d->upload_ev != NULL) { cudaEventDestroy(d->upload_ev); }
        if (d->copied_ev != NULL) { cudaEventDestroy(d->copied_ev); }
    } else {
        cudaFree(d->master); cudaFree(d->m); cudaFree(d->v);
    }
    cudaFree(d->norm_scratch); cudaFree(d->norm_out); cudaFree(d->norm_sum); cudaFree(d->wait_clock);
    if (d->host_norm != NULL) { cudaFreeHost(d->host_norm); }
    free(d->step.pieces); free(d->step.unit_shard);
    free(d->tensors); free(d->unit_ptr); free(d->unit_buf); free(d->grad_buf); free(d->reduced_ev);
    zero_schedule_free(&d->sched);
    zero_plan_free(&d->plan);
    free(d);
}

// the movers' timeline (zero3/trace.cuh), its start on the compute stream
static int zero_dev_trace_begin(void* impl, double host_start_ms) {
    ZeroDev* d = (ZeroDev*)impl;
    return zero_trace_start(&d->trace, d->compute, host_start_ms);
}
static int zero_dev_trace_end(void* impl, const ZeroTraceSpan** spans, int* n) { return zero_trace_stop(&((ZeroDev*)impl)->trace, spans, n); }

static const ZeroOps zero_dev_ops = {
    .name = "device",
    .begin = zero_dev_begin, .fetch = zero_dev_fetch, .release = zero_dev_release,
    .grad = zero_dev_grad, .reduce = zero_dev_reduce, .end = zero_dev_end,
    .step = zero_dev_step, .flush = zero_dev_flush, .stats = zero_dev_stats,
    .save = zero_dev_save, .load = zero_dev_load,
    .state_shard = zero_dev_state_shard, .state_write = zero_dev_state_write, .state_commit = zero_dev_state_commit,
    .empty_cache = zero_dev_empty_cache,
    .trace_begin = zero_dev_trace_begin, .trace_end = zero_dev_trace_end,
    .free = zero_dev_free,
};

// A device engine behind z (see ZeroInit). On failure nothing is left allocated. Defined
// once per program: zero3/device.cu (zero3/device.h), or a test that includes this whole.
int zero_dev_create(Zero** z, const ZeroInit* in) {
    return zero_create(z, &zero_dev_ops, calloc(1, sizeof(ZeroDev)), zero_dev_init, in);
}

#endif // ZERO3_DEVICE_INIT_CUH
