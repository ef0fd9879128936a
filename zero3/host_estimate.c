// zero3/host_estimate.c: the host engine's memory estimate, its pool counted through the pass driver (the interface and its notes: zero3/host.h)
#include "zero3/host.h"           // ZeroHost, the engine's prototypes
#include "zero3/host_internal.h"  // the helpers host*.c share
#include "zero3/util.h"     // zero_error, zero_errmsg, zero_now_ms

// the pool by size, as zero_buf_get/put hold it: a size's allocation is the most held at once
typedef struct { size_t* elems; int* held; int* most; int n; } ZeroPoolWalk;

// the estimate's mover (zero3/pass.h): moves nothing, counts the buffers the host engine's
// mover would take from its pool and give back, in the same calls
typedef struct {
    ZeroPoolWalk w;
    const ZeroPlan* plan;
    int stage;
    const size_t* red_stage;   // (num_units) a unit's reduction's staging (zero_red_stage)
    unsigned char* grad_held;  // (num_units) stages 2-3: the unit's gradient buffer is taken
} ZeroCount;

static void zero_pool_walk(ZeroPoolWalk* w, size_t elems, int delta) {
    int i = 0;
    while (i < w->n && w->elems[i] != elems) { i++; }
    if (i == w->n) { w->elems[i] = elems; w->held[i] = w->most[i] = 0; w->n++; }
    w->held[i] += delta;
    if (w->held[i] > w->most[i]) { w->most[i] = w->held[i]; }
}

static int zero_count_gather_start(void* be, int u, int how) {
    (void)how;
    ZeroCount* c = (ZeroCount*)be;
    zero_pool_walk(&c->w, c->plan->units[u].padded, 1);
    return 0;
}

static int zero_count_gather_free(void* be, int u) {
    ZeroCount* c = (ZeroCount*)be;
    zero_pool_walk(&c->w, c->plan->units[u].padded, -1);
    return 0;
}

static int zero_count_grad_buf(void* be, int u, void** out) {
    ZeroCount* c = (ZeroCount*)be;
    *out = NULL;
    if (c->stage >= 2 && !c->grad_held[u]) { zero_pool_walk(&c->w, c->plan->units[u].padded, 1); c->grad_held[u] = 1; }
    return 0;
}

static int zero_count_reduce_start(void* be, int u) {
    ZeroCount* c = (ZeroCount*)be;
    if (c->red_stage[u] > 0) { zero_pool_walk(&c->w, c->red_stage[u], 1); }
    if (c->stage >= 2) { zero_pool_walk(&c->w, c->plan->units[u].shard, 1); }  // red_recv
    return 0;
}

static int zero_count_reduce_complete(void* be, int u) {
    ZeroCount* c = (ZeroCount*)be;
    if (c->red_stage[u] > 0) { zero_pool_walk(&c->w, c->red_stage[u], -1); }
    if (c->stage >= 2) {
        zero_pool_walk(&c->w, c->plan->units[u].shard, -1);    // red_recv
        zero_pool_walk(&c->w, c->plan->units[u].padded, -1);   // grad_buf
        c->grad_held[u] = 0;
    }
    return 0;
}

static const ZeroMover zero_count_mover = {
    .gather_start = zero_count_gather_start, .gather_wait = zero_mover_nothing,
    .gather_free = zero_count_gather_free, .params = zero_mover_no_params,
    .grad_buf = zero_count_grad_buf, .reduce_start = zero_count_reduce_start,
    .reduce_complete = zero_count_reduce_complete, .poll = NULL,
};

// the pool's buffers counted over zero_pass_walk, as the host engine would take them;
// world: the shard group's ranks (one rank reduces nothing at stages 0-1)
static int zero_host_walk(ZeroSchedule* s, ZeroCount* c, int world) {
    ZeroPass dp;
    if (zero_pass_init(&dp, s, &zero_count_mover, c, c->stage, 0) != 0) { return -1; }
    dp.reduce_local = world == 1;
    dp.drain_at_end = 1;  // as the host engine's
    for (int u = 0; s->gathers && u < s->num_units; u++) {  // gathered at init
        if (s->persistent[u]) { zero_pool_walk(&c->w, c->plan->units[u].padded, 1); zero_schedule_gathered(s, u); }
    }
    int rc = zero_pass_walk(&dp);
    zero_pass_free(&dp);
    return rc;
}

int zero_host_estimate(const ZeroModel* model, const ZeroConfig* cfg, int world, ZeroHostEstimate* out) {
    // every declaration before the first goto: the header is also compiled as C++
    ZeroPlan p;
    ZeroSchedule s;
    int rc = -1, stage = cfg->stage, nu = model->num_units, nvme_opt = cfg->offload_optimizer == ZERO_OFFLOAD_NVME;
    ZeroCount c;
    ZeroPoolWalk* w = &c.w;
    size_t* red_stage = NULL;
    int* on_host = NULL;
    size_t max_padded = 0, file_bytes = 0;
    const double f = sizeof(float);
    double params, grads, opt_elems, moments, cpu;
    memset(out, 0, sizeof(*out));
    memset(&s, 0, sizeof(s));
    memset(&c, 0, sizeof(c));
    c.plan = &p;
    c.stage = stage;
    // MiCS: the states are sharded over the shard group, not the world
    if (cfg->mics_shard_size > 0 && cfg->mics_shard_size < world) { world = cfg->mics_shard_size; }
    if (zero_plan_init(&p, model->unit_numel, model->num_units, world, 0, sizeof(float)) != 0) { return -1; }
    if (zero_schedule_init(&s, model, &p, cfg) != 0) { goto done; }
    for (int u = 0; u < nu; u++) {
        max_padded = p.units[u].padded > max_padded ? p.units[u].padded : max_padded;
    }
    w->elems = (size_t*)calloc(3 * (size_t)nu, sizeof(size_t));   // sizes: a unit's padded, shard and staging
    w->held = (int*)calloc(3 * (size_t)nu, sizeof(int));
    w->most = (int*)calloc(3 * (size_t)nu, sizeof(int));
    on_host = (int*)calloc((size_t)nu, sizeof(int));
    red_stage = (size_t*)calloc((size_t)nu, sizeof(size_t));
    c.grad_held = (unsigned char*)calloc((size_t)nu, 1);
    if (w->elems == NULL || w->held == NULL || w->most == NULL || on_host == NULL || red_stage == NULL || c.grad_held == NULL) {
        zero_error("zero estimate: out of memory");
        goto done;
    }
    for (int u = 0; u < nu && zero_red_staged(cfg); u++) { red_stage[u] = zero_rs_stage_elems(world, p.units[u].shard); }
    c.red_stage = red_stage;
    params = stage < 3 ? (double)p.padded_total : (double)zero_param_placement(&p, &s, cfg, on_host, &file_bytes);
    grads = (stage < 2 ? (double)p.padded_total : 0.0) + (stage >= 1 && !nvme_opt ? (double)p.shard_total : 0.0);
    opt_elems = stage == 0 ? (double)p.padded_total : (double)p.shard_total;
    moments = nvme_opt ? 0.0 : 2.0 * opt_elems;
    cpu = cfg->offload_optimizer == ZERO_OFFLOAD_CPU ? 2.0 * (double)p.shard_total : 0.0;  // gradients, master
    if (stage == 3 && cfg->hpz_partition_size > 1) { params += (double)p.padded_total / cfg->hpz_partition_size; }  // hpZ's slices
    // (the reductions' staging is in the walk, as on a flat span; the scratch of the
    // hierarchical hops across nodes, which take none of it, and of qwZ and qgZ is not counted)
    out->states = (params + grads + moments + cpu) * f;
    if (zero_host_walk(&s, &c, world) != 0) { goto done; }
    for (int i = 0; i < w->n; i++) {
        out->buffers += (double)w->most[i] * (double)w->elems[i] * f;
        for (int k = 0; k < ZERO_EST_POOL_SIZES; k++) {  // insert among the largest sizes
            if (w->most[i] == 0 || w->elems[i] <= out->pool_elems[k]) { continue; }
            for (int j = ZERO_EST_POOL_SIZES - 1; j > k; j--) { out->pool_elems[j] = out->pool_elems[j - 1]; out->pool_count[j] = out->pool_count[j - 1]; }
            out->pool_elems[k] = w->elems[i];
            out->pool_count[k] = w->most[i];
            break;
        }
    }
    ZeroSwapOpen o = zero_host_swap_open(&p, cfg, 0, NULL, 0, stage == 3 ? on_host : NULL);
    if (nvme_opt || file_bytes > 0) {  // the swap file and its host buffers, as zero_swap_open makes them
        size_t host_bytes = 0, swap_bytes = 0;
        zero_swap_size(&o, &host_bytes, &swap_bytes);
        out->host_buffers += (double)host_bytes;
        out->swap += (double)swap_bytes;
    }
    out->host_buffers += (double)zero_ahead_count(&p, on_host, cfg, file_bytes) * (double)zero_swap_param_span_max(&o);  // the parameters' reads ahead
    out->unit = (double)max_padded * f;
    rc = 0;
done:
    free(w->elems); free(w->held); free(w->most); free(on_host); free(red_stage); free(c.grad_held);
    zero_schedule_free(&s);
    zero_plan_free(&p);
    return rc;
}
