// zero3/dev_estimate.c: the device engine's memory, counted without a GPU (the interface and its notes: zero3/dev_estimate.h)
#include "zero3/dev_estimate.h"   // this module's types and prototypes
#include <string.h>               // memset
#include "zero3/pass.h"           // ZeroPass, ZeroMover, zero_pass_walk: the pools' walk
#include "zero3/swap.h"           // zero_swap_placement, zero_swap_size: the NVMe tiers' own sizes
#include <stdlib.h>               // calloc, free
#include "zero3/util.h"           // zero_error

// the index of the pool of `elems` in elems[0..*n), added at the end if missing; -1 with
// zero_error when the list is full
static int zero_dev_est_pool(size_t* elems, int* n, size_t size) {
    for (int i = 0; i < *n; i++) { if (elems[i] == size) { return i; } }
    if (*n == ZERO_DEV_EST_MAX_POOLS) { return zero_error("zero device: more than %d distinct unit sizes", ZERO_DEV_EST_MAX_POOLS); }
    elems[*n] = size;
    return (*n)++;
}

// the counting mover: moves nothing, holds the gather buffers of each size that the pass
// driver has the engine take, and keeps the most
typedef struct {
    const ZeroPlan* p;
    const size_t* elems;
    int* count;
    int n;
    int held[ZERO_DEV_EST_MAX_POOLS];
} ZeroDevCounter;

static int zero_dev_counter_find(const ZeroDevCounter* c, int u) {
    for (int i = 0; i < c->n; i++) { if (c->elems[i] == c->p->units[u].padded) { return i; } }
    return -1;
}

static int zero_dev_counter_gather(void* be, int u, int how) {
    (void)how;
    ZeroDevCounter* c = (ZeroDevCounter*)be;
    int i = zero_dev_counter_find(c, u);
    if (i < 0) { return zero_error("zero device: unit %d has no pool", u); }
    if (++c->held[i] > c->count[i]) { c->count[i] = c->held[i]; }
    return 0;
}

static int zero_dev_counter_free(void* be, int u) {
    ZeroDevCounter* c = (ZeroDevCounter*)be;
    int i = zero_dev_counter_find(c, u);
    if (i >= 0) { c->held[i]--; }
    return 0;
}

static int zero_dev_counter_grad(void* be, int u, void** out) { (void)be; (void)u; *out = NULL; return 0; }

static const ZeroMover zero_dev_counter_mover = {
    .gather_start = zero_dev_counter_gather, .gather_wait = zero_mover_nothing,
    .gather_free = zero_dev_counter_free, .params = zero_mover_no_params,
    .grad_buf = zero_dev_counter_grad, .reduce_start = zero_mover_nothing,
    .reduce_complete = zero_mover_nothing, .poll = NULL,
};

int zero_dev_pool_counts(const ZeroPlan* p, ZeroSchedule* s, int stage, size_t* elems, int* count, int* npools) {
    *npools = 0;
    if (stage != 3) { return 0; }
    for (int u = 0; u < p->num_units; u++) {
        if (!s->persistent[u] && zero_dev_est_pool(elems, npools, p->units[u].padded) < 0) { return -1; }
    }
    ZeroDevCounter c;
    memset(&c, 0, sizeof(c));
    c.p = p;
    c.elems = elems;
    c.count = count;
    c.n = *npools;
    for (int i = 0; i < c.n; i++) { count[i] = 0; }
    ZeroPass walk;
    if (zero_pass_init(&walk, s, &zero_dev_counter_mover, &c, stage, 0) != 0) { return -1; }
    int rc = zero_pass_walk(&walk);
    zero_pass_free(&walk);
    if (rc != 0) { return -1; }
    for (int i = 0; i < c.n; i++) {
        if (count[i] == 0) { count[i] = 1; }  // a size the walk never gathered still gets its buffer
    }
    return 0;
}

int zero_dev_grad_pool_counts(const ZeroPlan* p, int stage, size_t* elems, int* count, int* npools) {
    *npools = 0;
    if (stage < 2) { return 0; }
    int units_of[ZERO_DEV_EST_MAX_POOLS] = {0};
    for (int u = 0; u < p->num_units; u++) {
        int i = zero_dev_est_pool(elems, npools, p->units[u].padded);
        if (i < 0) { return -1; }
        units_of[i]++;
    }
    for (int i = 0; i < *npools; i++) {
        count[i] = units_of[i] < 2 ? units_of[i] : 2;
        if (units_of[i] > 1 && elems[i] == p->units[0].padded) { count[i]++; }
    }
    return 0;
}

int zero_dev_param_stages(const ZeroPlan* p, const ZeroConfig* cfg) {
    return cfg->param_buffer_count < p->num_units ? cfg->param_buffer_count : p->num_units;
}

int zero_dev_tier_valid(int stage, ZeroOffload opt, ZeroOffload param) {
    if (stage < 0 || stage > 3 || (unsigned)opt > ZERO_OFFLOAD_NVME || (unsigned)param > ZERO_OFFLOAD_NVME) { return 0; }
    if (opt != ZERO_OFFLOAD_NONE && stage < 1) { return 0; }
    if ((param != ZERO_OFFLOAD_NONE || opt == ZERO_OFFLOAD_NVME) && stage != 3) { return 0; }
    return param == ZERO_OFFLOAD_NONE || opt != ZERO_OFFLOAD_NONE;
}

// the GPU's part (see the top of the header); e->pools already counted
static void zero_dev_est_gpu(const ZeroPlan* p, const ZeroSchedule* s, const ZeroConfig* cfg, int world, double X,
                             int comm32, ZeroDevEstimate* e) {
    const int stage = cfg->stage, qg = stage == 3 && cfg->quantized_gradients, free_mode = e->shard_free;
    const double P = (double)p->padded_total, S = (double)p->shard_total;
    double Lmax = 0, Smax = 0;
    for (int u = 0; u < p->num_units; u++) {
        if ((double)p->units[u].padded > Lmax) { Lmax = (double)p->units[u].padded; }
        if ((double)p->units[u].shard > Smax) { Smax = (double)p->units[u].shard; }
    }
    e->gpu_params = stage < 3 ? X * P : (cfg->offload_param != ZERO_OFFLOAD_NONE ? 0.0 : X * S);
    if (stage == 3 && cfg->hpz_partition_size > 1) { e->gpu_params += X * (double)(p->padded_total / (size_t)cfg->hpz_partition_size); }
    e->gpu_grads = stage < 2 ? X * P : (free_mode ? 0.0 : 4.0 * S);
    if (stage == 1) { e->gpu_grads += comm32 ? 4.0 * S : X * S; }
    if (stage == 0 && comm32) { e->gpu_grads += 4.0 * P; }
    e->gpu_comm = comm32 && stage >= 1 ? 4.0 * Lmax : 0.0;
    if ((comm32 || qg) && stage >= 2 && !free_mode) { e->gpu_comm += 4.0 * Smax; }
    e->gpu_optimizer = cfg->offload_optimizer != ZERO_OFFLOAD_NONE ? 0.0 : 12.0 * (stage == 0 ? P : S);
    for (int u = 0; stage == 3 && u < p->num_units; u++) {
        if (s->persistent[u]) { e->gpu_units += X * (double)p->units[u].padded; }
    }
    for (int i = 0; i < e->npools; i++) { e->gpu_units += X * (double)e->pool_elems[i] * e->pool_count[i]; }
    // a gradient buffer's reduce-scatter output: floatX, or none where the reductions go
    // through the fp32 shard; in the shard-free mode every buffer has one, fp32 for those
    double rs = free_mode ? (comm32 || qg ? 4.0 : X) : (comm32 || qg ? 0.0 : X);
    for (int i = 0; i < e->ngpools; i++) {
        double el = (double)e->gpool_elems[i];
        e->gpu_grad_pools += e->gpool_count[i] * (X * el + rs * (double)(e->gpool_elems[i] / (size_t)world));
    }
    e->gpu = e->gpu_params + e->gpu_grads + e->gpu_optimizer + e->gpu_units + e->gpu_grad_pools + e->gpu_comm;
    e->gpu_init = 4.0 * Lmax;
}

// the host's and the swap file's part (see the top of the header): what zero_dev_init
// and zero_dev_swap_init allocate, the swap module's buffers and file by zero_swap_size
static int zero_dev_est_host(const ZeroPlan* p, const ZeroSchedule* s, const ZeroConfig* cfg, double X, int comm32,
                             int dpu, int* on_host, ZeroDevEstimate* e) {
    const int stage = cfg->stage, opt_nvme = cfg->offload_optimizer == ZERO_OFFLOAD_NVME;
    const int param_nvme = cfg->offload_param == ZERO_OFFLOAD_NVME;
    const double S = (double)p->shard_total, copies = dpu ? 2.0 : 1.0, f = sizeof(float);
    size_t smax = 0, smax_nvme = 0, file_bytes = 0, cached = 0;
    for (int u = 0; u < p->num_units; u++) { smax = p->units[u].shard > smax ? p->units[u].shard : smax; }
    if (param_nvme) {
        cached = zero_swap_placement(p, s->persistent, (double)cfg->max_in_cpu, (size_t)X, on_host, &file_bytes);
        for (int u = 0; u < p->num_units; u++) {
            if (!on_host[u] && p->units[u].shard > smax_nvme) { smax_nvme = p->units[u].shard; }
        }
    }
    if (cfg->offload_optimizer == ZERO_OFFLOAD_CPU) {
        e->host_optimizer = 12.0 * S;
        e->host_grads = copies * S * (stage == 1 && !comm32 && !e->shard_free ? X : f);
    }
    // the compute copy the CPU Adam writes (the parameter shards themselves with offload to
    // the CPU), or with the parameters on NVMe their cached part
    if (cfg->offload_optimizer != ZERO_OFFLOAD_NONE) { e->host_params = param_nvme ? X * (double)cached : copies * X * S; }
    if (e->shard_free) { e->host_staging += ZERO_DEV_EST_GRAD_SLOTS * f * (double)smax; }
    if (param_nvme) { e->host_staging += zero_dev_param_stages(p, cfg) * (double)zero_swap_align(smax_nvme * (size_t)X); }
    if (opt_nvme || param_nvme) {
        ZeroSwapOpen o;
        memset(&o, 0, sizeof(o));
        o.plan = p;
        o.optimizer = opt_nvme;
        o.sub_group_size = cfg->sub_group_size;
        o.buffer_count = cfg->buffer_count;
        o.on_host = param_nvme ? on_host : NULL;
        o.param_elem_bytes = (size_t)X;
        size_t host_bytes = 0, swap_bytes = 0;
        zero_swap_size(&o, &host_bytes, &swap_bytes);
        e->host_staging += (double)host_bytes;
        e->nvme = (double)swap_bytes;
    }
    e->host = e->host_optimizer + e->host_grads + e->host_params + e->host_staging;
    return 0;
}

int zero_dev_estimate(const ZeroModel* model, const ZeroConfig* cfg, int world, size_t x, int dpu, ZeroDevEstimate* out) {
    ZeroPlan p;
    ZeroSchedule s;
    int rc = -1, stage = cfg->stage, comm32;
    int* on_host = NULL;
    memset(out, 0, sizeof(*out));
    memset(&s, 0, sizeof(s));
    if (world < 1) { return zero_error("zero device estimate: %d ranks", world); }
    if (x != 2 && x != 4) { return zero_error("zero device estimate: %zu bytes per parameter (2 or 4)", x); }
    if (!zero_dev_tier_valid(stage, cfg->offload_optimizer, cfg->offload_param)) {
        return zero_error("zero device estimate: stage %d with optimizer %s and parameters %s is not a tier of the device engine",
                          stage, zero_offload_name(cfg->offload_optimizer), zero_offload_name(cfg->offload_param));
    }
    if (dpu && cfg->offload_optimizer != ZERO_OFFLOAD_CPU) { return zero_error("zero device estimate: --dpu needs optimizer offload cpu"); }
    if (cfg->mics_shard_size > 0 && cfg->mics_shard_size < world) { world = cfg->mics_shard_size; }  // the shard group
    comm32 = cfg->comm_dtype == ZERO_COMM_FP32 && x == 2 && (world > 1 || stage >= 1);
    out->shard_free = stage == 3 && (cfg->offload_param != ZERO_OFFLOAD_NONE || cfg->offload_optimizer == ZERO_OFFLOAD_NVME);
    if (zero_plan_init(&p, model->unit_numel, model->num_units, world, 0, x) != 0) { return -1; }
    if (zero_schedule_init(&s, model, &p, cfg) != 0) { goto done; }
    for (int u = 0; s.gathers && u < s.num_units; u++) {  // gathered at init, as the engine does
        if (s.persistent[u]) { zero_schedule_gathered(&s, u); }
    }
    if (zero_dev_pool_counts(&p, &s, stage, out->pool_elems, out->pool_count, &out->npools) != 0 ||
        zero_dev_grad_pool_counts(&p, stage, out->gpool_elems, out->gpool_count, &out->ngpools) != 0) {
        goto done;
    }
    on_host = (int*)calloc((size_t)p.num_units, sizeof(int));
    if (on_host == NULL) { zero_error("zero device estimate: out of memory"); goto done; }
    zero_dev_est_gpu(&p, &s, cfg, world, (double)x, comm32, out);
    if (zero_dev_est_host(&p, &s, cfg, (double)x, comm32, dpu, on_host, out) != 0) { goto done; }
    rc = 0;
done:
    free(on_host);
    zero_schedule_free(&s);
    zero_plan_free(&p);
    return rc;
}
