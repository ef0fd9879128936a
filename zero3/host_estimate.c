// zero3/host_estimate.c: the host engine's the memory estimator (the pool walked over the schedule) (the interface and its notes: zero3/host.h)
#include "zero3/host.h"           // ZeroHost, the engine's prototypes
#include "zero3/host_internal.h"  // the helpers host*.c share

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
