// zero3/host_store.c: the host engine's the parameter store (host shards, or the NVMe tier's swap file) and the step (the interface and its notes: zero3/host.h)
#include "zero3/host.h"           // ZeroHost, the engine's prototypes
#include "zero3/host_internal.h"  // the helpers host*.c share
#include "zero3/util.h"     // zero_error, zero_errmsg, zero_now_ms

float* zero_param_shard(ZeroHost* e, int u) {
    ZeroUnit* pu = &e->plan.units[u];
    if (e->stage == 3) { return e->param_ptr[u]; }  // NULL: on NVMe, see zero_param_shard_get/put
    return e->full_params + pu->full_offset + (size_t)e->rank * pu->shard;
}

size_t zero_align4k(size_t bytes) { return (bytes + NVME_ALIGN - 1) / NVME_ALIGN * NVME_ALIGN; }

int zero_param_shard_get(ZeroHost* e, int u, float* dst, size_t n) {
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

int zero_param_shard_put(ZeroHost* e, int u, const float* src) {
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

int zero_refresh_persistent(ZeroHost* e) {
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

int zero_grad_nvme_settle(ZeroHost* e) {
    if (!e->grad_write_pending) { return 0; }
    e->grad_write_pending = 0;
    return nvme_wait_all(&e->nvme);
}

int zero_grad_nvme_add(ZeroHost* e, int u, const float* got) {
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

int zero_nvme_stream(ZeroHost* e, int region, FILE* fp, int to_swap) {
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

size_t zero_max_shard(const ZeroHost* e) {
    size_t m = 0;
    for (int u = 0; u < e->plan.num_units; u++) { m = e->plan.units[u].shard > m ? e->plan.units[u].shard : m; }
    return m;
}

int zero_nvme_write_master(ZeroHost* e) {
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
    return zero_param_flush(e);
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

// The step follows e->step (zero_host_step_plan_init): the gradient gathered where the
// norm and the update read it, the norm summed over the ranks that share it, the update,
// then the updated parameters shared.
int zero_host_step(void* impl, const ZeroStep* st) {
    ZeroHost* e = (ZeroHost*)impl;
    const ZeroHostStepPlan* pl = &e->step;
    if (zero_reduce_drain(e) != 0 || zero_grad_nvme_settle(e) != 0) { return -1; }
    if (pl->collect != NULL && pl->collect(e) != 0) { return -1; }
    if (pl->rep_sum != NULL && zero_allreduce(pl->rep_sum, e->shard_grads, e->plan.shard_total, NULL, NULL) != 0) { return -1; }
    double sumsq = pl->norm_src != NULL ? grad_norm_squared(pl->norm_src, pl->norm_n) : e->grad_sumsq;
    if (pl->norm_sum != NULL && zero_allreduce_scalars(pl->norm_sum, &sumsq, 1) != 0) { return -1; }
    float scale = adamw_grad_scale(sumsq, e->dp_world, st->grad_clip, &e->norm);
    if (st->skip || !isfinite(e->norm)) {  // an overflow: nothing changes, the gradients go
        zero_host_clear_grads(e);
        return 0;
    }
    CpuAdamParams hp = {st->lr, e->beta1, e->beta2, e->eps, 0.0f, scale, st->t};
    double t_update = zero_now_ms(), nvme_wait0 = e->nvme.wait_ms;
    if (pl->update(e, &hp, st->weight_decay) != 0) { return -1; }
    e->update_ms += zero_now_ms() - t_update;
    e->update_nvme_wait_ms += e->nvme.wait_ms - nvme_wait0;
    if (pl->share(e) != 0) { return -1; }
    zero_pass_params_changed(&e->pass);  // hpZ: the slices are of the old parameters
    zero_host_clear_grads(e);
    return 0;
}
