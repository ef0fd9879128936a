// zero3/host_store.c: the host engine's parameter store (host shards, or the NVMe tier's swap file, zero3/swap.h) and the step (the interface and its notes: zero3/host.h)
#include "zero3/host.h"           // ZeroHost, the engine's prototypes
#include "zero3/host_internal.h"  // the helpers host*.c share
#include "zero3/util.h"     // zero_error, zero_errmsg, zero_now_ms

float* zero_param_shard(ZeroHost* e, int u) {
    ZeroUnit* pu = &e->plan.units[u];
    if (e->stage == 3) { return e->param_ptr[u]; }  // NULL: on NVMe, see zero_param_shard_get/put
    return e->full_params + pu->full_offset + (size_t)e->rank * pu->shard;
}

int zero_param_shard_get(ZeroHost* e, int u, float* dst, size_t n) {
    const float* p = zero_param_shard(e, u);
    if (p == NULL) { return zero_swap_param_read(&e->swap, u, dst, n); }
    memcpy(dst, p, n * sizeof(float));
    return 0;
}

// where the step writes unit u's updated shard: the host copy, or the swap's staging of
// an NVMe unit (the previous staged unit is written back first). The optimizer walks the
// shard in order, so each NVMe unit is staged once per step.
static float* zero_param_out(ZeroHost* e, int u) {
    float* p = zero_param_shard(e, u);
    return p != NULL ? p : (float*)zero_swap_param_out(&e->swap, u);
}

int zero_param_shard_put(ZeroHost* e, int u, const float* src) {
    float* p = zero_param_shard(e, u);
    if (p == NULL) { return zero_swap_param_write(&e->swap, u, src); }
    memcpy(p, src, e->plan.units[u].shard * sizeof(float));
    return 0;
}

void zero_host_clear_grads(ZeroHost* e) {
    e->grads_final = 0;
    if (e->full_grads != NULL) { memset(e->full_grads, 0, e->plan.padded_total * sizeof(float)); }
    if (e->shard_grads != NULL) { memset(e->shard_grads, 0, e->plan.shard_total * sizeof(float)); }
    zero_swap_grad_clear(&e->swap);  // the gradient region: the next adds overwrite it
}

// persistent unit u gets this rank's shard and every other rank's (into a new copy, where
// zero_host_empty_cache freed it)
static int zero_refresh_unit(ZeroHost* e, int u) {
    ZeroUnit* pu = &e->plan.units[u];
    if (e->unit_buf[u] == NULL && (e->unit_buf[u] = (float*)zero_buf_get(e, pu->padded, 1)) == NULL) { return -1; }
    memcpy(e->unit_buf[u] + (size_t)e->rank * pu->shard, zero_param_shard(e, u), pu->shard * sizeof(float));
    return zero_allgather(&e->comm, e->unit_buf[u], pu->shard, NULL);
}

int zero_refresh_persistent(ZeroHost* e) {
    for (int u = 0; u < e->plan.num_units; u++) {
        if (e->sched.persistent[u] && zero_refresh_unit(e, u) != 0) { return -1; }
    }
    e->cache_emptied = 0;
    return 0;
}

// the swap's step writes the compute copy here (zero3/swap.h's ZeroSwapOut, ZeroSwapFlush)
static void* zero_host_swap_out(void* ctx, int u) { return zero_param_out((ZeroHost*)ctx, u); }
static int zero_host_swap_flush(void* ctx) { return zero_swap_param_flush(&((ZeroHost*)ctx)->swap); }

// The optimizer on NVMe: the swap's pipelined step over the sub-groups, the updated fp32
// shards into the parameter store. Deferred (the host.h note): the persistent units now,
// since zero_refresh_persistent shares them next, the rest as the forward needs them.
static int zero_nvme_step(ZeroHost* e, CpuAdamParams* hp, float weight_decay) {
    double out0 = e->swap.c.out_bytes;
    int rc;
    if (!e->defer_update) {
        rc = zero_swap_step(&e->swap, hp, weight_decay, zero_host_swap_out, CPU_ADAM_FP32, zero_host_swap_flush, e);
    } else {
        const int* pers = e->sched.persistent;
        rc = zero_swap_step_begin(&e->swap, hp, weight_decay, zero_host_swap_out, CPU_ADAM_FP32, zero_host_swap_flush, e, pers);
        for (int u = 0; u < e->plan.num_units && rc == 0; u++) {
            if (pers[u]) { rc = zero_swap_step_through(&e->swap, u); }
        }
    }
    e->moved[ZERO_MOVE_H2D] += e->swap.c.out_bytes - out0;
    return rc;
}

int zero_host_update_through(ZeroHost* e, int u) {
    if (!zero_swap_step_pending(&e->swap)) { return 0; }
    ZeroSwapCounters c0 = zero_swap_counters(&e->swap);
    int rc = zero_swap_step_through(&e->swap, u);
    ZeroSwapCounters c1 = zero_swap_counters(&e->swap);
    e->update_ms += c1.step_ms - c0.step_ms;
    e->update_nvme_wait_ms += c1.step_wait_ms - c0.step_wait_ms;
    e->moved[ZERO_MOVE_H2D] += c1.out_bytes - c0.out_bytes;
    return rc;
}

size_t zero_max_shard(const ZeroHost* e) {
    size_t m = 0;
    for (int u = 0; u < e->plan.num_units; u++) { m = e->plan.units[u].shard > m ? e->plan.units[u].shard : m; }
    return m;
}

// Where P is the parameter store (zero3/swap_param.c's [Note: the parameters in the
// master]), the NVMe units' shards are in it already: only the units held in memory are
// written there, each as a range of P.
int zero_nvme_write_master(ZeroHost* e) {
    ZeroSwap* s = &e->swap;
    float* shard = (float*)malloc(zero_max_shard(e) * sizeof(float) + 64);
    if (shard == NULL) { return zero_error("zero: out of memory for a parameter shard"); }
    int rc = s->in_master ? 0 : zero_swap_master_begin(s);
    for (int u = 0; u < e->plan.num_units && rc == 0; u++) {
        size_t n = e->plan.units[u].shard;
        if (s->in_master && zero_swap_param_on_nvme(s, u)) { continue; }
        rc = zero_param_shard_get(e, u, shard, n) != 0 ? -1 : 0;
        if (rc == 0) { rc = s->in_master ? zero_swap_state_write(s, ZERO_SWAP_P, u, 0, n, shard) : zero_swap_master_unit(s, u, shard); }
    }
    if (rc == 0 && !s->in_master) { rc = zero_swap_master_end(s); }
    free(shard);
    return rc;
}

// stage 1 at one rank reduced nothing: the full gradient is the shard (and, with the
// optimizer offloaded, the host's copy of it, which a reduction would have filled)
static int zero_host_collect_local(ZeroHost* e) {
    memcpy(e->shard_grads, e->full_grads, e->plan.shard_total * sizeof(float));
    if (e->host_grads != NULL) {
        memcpy(e->host_grads, e->shard_grads, e->plan.shard_total * sizeof(float));
        e->moved[ZERO_MOVE_D2H] += e->plan.shard_total * sizeof(float);
    }
    return 0;
}

// Every path updates with the SIMD CPU Adam (zero3/cpu_adam.h), in place: on the CPU
// trainer the "device" is host memory too. zero3/adamw.h's scalar adamw_update stays as
// the tests' reference.
static int zero_host_update_in_place(ZeroHost* e, CpuAdamParams* hp, float weight_decay) {
    for (int i = 0; i < e->step.npieces; i++) {
        const ZeroHostPiece* pc = &e->step.pieces[i];
        hp->weight_decay = pc->decay ? weight_decay : 0.0f;
        if (cpu_adam_step(pc->master, pc->grad, CPU_ADAM_FP32, pc->m, pc->v, pc->n, hp, NULL, CPU_ADAM_FP32) != 0) { return -1; }
    }
    return 0;
}

// offload cpu: AdamW on the host shards; the updated parameters go straight to the
// device's shard (the copy back), which zero_param_out finds (or stages) per unit
static int zero_host_update_offload(ZeroHost* e, CpuAdamParams* hp, float weight_decay) {
    for (int i = 0; i < e->step.npieces; i++) {
        const ZeroHostPiece* pc = &e->step.pieces[i];
        hp->weight_decay = pc->decay ? weight_decay : 0.0f;
        float* out = zero_param_out(e, pc->unit);
        if (out == NULL || cpu_adam_step(pc->master, pc->grad, CPU_ADAM_FP32, pc->m, pc->v, pc->n, hp,
                                         out + pc->unit_lo, CPU_ADAM_FP32) != 0) { return -1; }
        e->moved[ZERO_MOVE_H2D] += pc->n * sizeof(float);
    }
    return zero_swap_param_flush(&e->swap);
}

// stage 0: every rank updated the whole model alike, nothing to share
static int zero_host_share_none(ZeroHost* e) {
    (void)e;
    return 0;
}

// stages 1-2: every rank's updated shards into every rank's full buffer
static int zero_host_share_allgather(ZeroHost* e) {
    for (int u = 0; u < e->plan.num_units; u++) {
        ZeroUnit* pu = &e->plan.units[u];
        if (zero_allgather(&e->comm, e->full_params + pu->full_offset, pu->shard, &e->unit_req[u]) != 0) { return -1; }
    }
    for (int u = 0; u < e->plan.num_units; u++) {
        if (zero_comm_wait(&e->comm, &e->unit_req[u]) != 0) { return -1; }
    }
    return 0;
}

// the update's pieces: each tensor whole (stage 0), or each segment of this rank's shard
// read from the shard arrays (the host ones with the optimizer offloaded to the CPU)
static int zero_host_pieces_init(ZeroHost* e) {
    ZeroHostStepPlan* pl = &e->step;
    int n = e->stage == 0 ? e->num_tensors : e->nsegs;
    pl->pieces = (ZeroHostPiece*)calloc(n > 0 ? (size_t)n : 1, sizeof(ZeroHostPiece));
    if (pl->pieces == NULL) { return zero_error("zero: out of memory for the step's pieces"); }
    pl->npieces = n;
    int off_cpu = e->offload_opt == ZERO_OFFLOAD_CPU;
    for (int i = 0; i < n; i++) {
        ZeroHostPiece* pc = &pl->pieces[i];
        if (e->stage == 0) {
            ZeroTensor tr = e->tensors[i];
            size_t off = e->plan.units[tr.unit].full_offset + tr.offset;
            *pc = (ZeroHostPiece){e->full_params + off, e->full_grads + off, e->m + off, e->v + off, tr.size, tr.unit, 0, tr.decay};
            continue;
        }
        ZeroSegment sg = e->segs[i];
        float* master = off_cpu ? e->host_master + sg.begin : zero_param_shard(e, sg.unit) + sg.unit_lo;
        const float* grad = (off_cpu ? e->host_grads : e->shard_grads) + sg.begin;
        *pc = (ZeroHostPiece){master, grad, e->m + sg.begin, e->v + sg.begin, sg.end - sg.begin, sg.unit, sg.unit_lo, sg.decay};
    }
    return 0;
}

int zero_host_step_plan_init(ZeroHost* e) {
    ZeroHostStepPlan* pl = &e->step;
    memset(pl, 0, sizeof(*pl));
    pl->collect = e->stage == 1 && e->world == 1 ? zero_host_collect_local : NULL;
    // MiCS: each group reduced its own ranks' gradients; the second hop sums them over
    // the groups (the ranks holding the same shards), once per step
    pl->rep_sum = e->stage >= 1 && e->rep.world > 1 ? &e->rep : NULL;
    if (e->stage == 0) {  // replicated: no communication
        pl->norm_src = e->full_grads;
        pl->norm_n = e->plan.padded_total;
    } else {
        pl->norm_src = e->host_grads != NULL ? e->host_grads : e->shard_grads;  // NULL: on NVMe, grad_sumsq
        pl->norm_n = e->plan.shard_total;
        pl->norm_sum = &e->comm;
    }
    pl->update = e->offload_opt == ZERO_OFFLOAD_NVME ? zero_nvme_step
               : e->offload_opt == ZERO_OFFLOAD_CPU ? zero_host_update_offload : zero_host_update_in_place;
    pl->share = e->stage == 3 ? zero_refresh_persistent : e->stage >= 1 ? zero_host_share_allgather : zero_host_share_none;
    return e->offload_opt == ZERO_OFFLOAD_NVME ? 0 : zero_host_pieces_init(e);
}

int zero_host_grads_finish(ZeroHost* e) {
    const ZeroHostStepPlan* pl = &e->step;
    if (e->grads_final) { return 0; }
    if (zero_reduce_drain(e) != 0 || zero_swap_grad_settle(&e->swap) != 0) { return -1; }
    if (pl->collect != NULL && pl->collect(e) != 0) { return -1; }
    if (pl->rep_sum != NULL && zero_allreduce(pl->rep_sum, e->shard_grads, e->plan.shard_total, NULL, NULL) != 0) { return -1; }
    e->grads_final = 1;
    return 0;
}

// The step follows e->step (zero_host_step_plan_init): the gradient gathered where the
// norm and the update read it, the norm summed over the ranks that share it, the update,
// then the updated parameters shared.
int zero_host_step(void* impl, const ZeroStep* st) {
    ZeroHost* e = (ZeroHost*)impl;
    const ZeroHostStepPlan* pl = &e->step;
    if (zero_host_update_through(e, -1) != 0) { return -1; }  // a step without a backward since the last
    if (zero_host_grads_finish(e) != 0) { return -1; }
    double sumsq = pl->norm_src != NULL ? grad_norm_squared(pl->norm_src, pl->norm_n) : zero_swap_grad_sumsq(&e->swap);
    if (pl->norm_sum != NULL && zero_allreduce_scalars(pl->norm_sum, &sumsq, 1) != 0) { return -1; }
    float scale = adamw_grad_scale(sumsq, e->dp_world, st->grad_clip, &e->norm);
    // an overflow, or an outlier (skip_norm_above): nothing changes, the gradients go
    if (st->skip || !isfinite(e->norm) || (st->skip_norm_above > 0.0f && e->norm > st->skip_norm_above)) {
        zero_host_clear_grads(e);
        return 0;
    }
    CpuAdamParams hp = {st->lr, e->beta1, e->beta2, e->eps, 0.0f, scale, st->t};
    double t_update = zero_now_ms(), nvme_wait0 = zero_swap_counters(&e->swap).wait_ms;
    if (pl->update(e, &hp, st->weight_decay) != 0) { return -1; }
    e->update_ms += zero_now_ms() - t_update;
    e->update_nvme_wait_ms += zero_swap_counters(&e->swap).wait_ms - nvme_wait0;
    if (pl->share(e) != 0) { return -1; }
    zero_pass_params_changed(&e->pass);  // hpZ: the slices are of the old parameters
    zero_host_clear_grads(e);
    return 0;
}

// ----------------------------------------------------------------------------
// changing a state (zero_tensor_set)

int zero_host_state_write(void* impl, int what, int u, size_t begin, size_t n, const float* in) {
    ZeroHost* e = (ZeroHost*)impl;
    const ZeroUnit* pu = &e->plan.units[u];
    if (zero_host_update_through(e, -1) != 0) { return -1; }  // (a deferred update first: it would overwrite)
    // the part of [begin, begin + n) in this rank's shard: k elements from `at` in the shard, src in `in`
    size_t at = 0, end = 0;
    if (zero_plan_shard_range(&e->plan, u, e->rank, begin, begin + n, &at, &end) < 0) { return -1; }
    size_t k = end - at;
    const float* src = k > 0 ? in + ((size_t)e->rank * pu->shard + at - begin) : in;
    int whole = e->stage == 0 || (what == ZERO_STATE_MASTER && e->stage < 3);  // every rank holds the unit
    int rc = 0;
    if (what == ZERO_STATE_GRAD) {  // the mean in, the sum over the ranks kept
        float* sum = (float*)malloc((whole ? n : k) * sizeof(float) + 1);
        if (sum == NULL) { return zero_error("zero: out of memory for a gradient's change"); }
        const float* from = whole ? in : src;
        for (size_t i = 0; i < (whole ? n : k); i++) { sum[i] = from[i] * (float)e->dp_world; }
        if (whole) {
            memcpy(e->full_grads + pu->full_offset + begin, sum, n * sizeof(float));
        } else if (e->shard_grads == NULL) {
            rc = zero_swap_state_write(&e->swap, ZERO_SWAP_G, u, at, k, sum);
        } else {
            memcpy(e->shard_grads + pu->shard_offset + at, sum, k * sizeof(float));
            if (e->host_grads != NULL) { memcpy(e->host_grads + pu->shard_offset + at, sum, k * sizeof(float)); }
        }
        free(sum);
        return rc;
    }
    if (what != ZERO_STATE_MASTER) {  // m or v: the arrays, or the swap file's regions
        if (e->offload_opt == ZERO_OFFLOAD_NVME) { return zero_swap_state_write(&e->swap, what == ZERO_STATE_M ? ZERO_SWAP_M : ZERO_SWAP_V, u, at, k, src); }
        float* dst = what == ZERO_STATE_M ? e->m : e->v;
        if (whole) { memcpy(dst + pu->full_offset + begin, in, n * sizeof(float)); }
        else { memcpy(dst + pu->shard_offset + at, src, k * sizeof(float)); }
        return 0;
    }
    // the master: the parameters the model computes with, and AdamW's copy where it has one
    if (whole) {
        memcpy(e->full_params + pu->full_offset + begin, in, n * sizeof(float));
    } else if (k > 0) {  // stage 3: the shard, wherever it lives
        float* shard = (float*)malloc(pu->shard * sizeof(float));
        if (shard == NULL) { return zero_error("zero: out of memory for a parameter shard"); }
        rc = zero_param_shard_get(e, u, shard, pu->shard);
        if (rc == 0) { memcpy(shard + at, src, k * sizeof(float)); rc = zero_param_shard_put(e, u, shard); }
        free(shard);
    }
    if (rc == 0 && e->host_master != NULL) { memcpy(e->host_master + pu->shard_offset + at, src, k * sizeof(float)); }
    if (rc == 0 && e->offload_opt == ZERO_OFFLOAD_NVME) { rc = zero_swap_state_write(&e->swap, ZERO_SWAP_P, u, at, k, src); }
    return rc;
}

int zero_host_state_commit(void* impl, int what, int u) {
    ZeroHost* e = (ZeroHost*)impl;
    const ZeroUnit* pu = &e->plan.units[u];
    if (e->stage == 0) {  // every rank holds every state whole: each rank's range to the others (set_local wrote its own)
        float* arr = what == ZERO_STATE_MASTER ? e->full_params : what == ZERO_STATE_M ? e->m : what == ZERO_STATE_V ? e->v : e->full_grads;
        return zero_allgather(&e->comm, arr + pu->full_offset, pu->shard, NULL);
    }
    if (what != ZERO_STATE_MASTER) { return 0; }
    if (e->stage < 3) { return zero_allgather(&e->comm, e->full_params + pu->full_offset, pu->shard, NULL); }
    zero_pass_params_changed(&e->pass);  // hpZ: the slices are of the old parameters
    return e->sched.persistent[u] ? zero_refresh_unit(e, u) : 0;  // (the others: gathered at their next use)
}
