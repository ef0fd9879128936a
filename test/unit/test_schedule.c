/*
 The use schedule (zero3/schedule.h), the one place where both engines' decisions are
 made, and the pass driver that acts on them (zero3/pass.h): the reuse rule,
 persistence, the window ahead (prefetch depth, live budget, prefetch bucket), the window
 behind (reduce bucket), the use checks, the pool sizes, hpZ's slices.
 The engines themselves are tested end to end (test_zero.sh, test_device_emu.sh); here
 each decision is checked against what the documentation says it is, on schedules small
 enough to work out by hand.
*/
#include <string.h>              // strstr
#include <criterion/criterion.h> // Test, cr_assert*
#include "zero3/schedule.h"      // the code under test
#include "zero3/pass.h"          // ... and its driver
#include "zero3/util.h"     // zero_error, zero_errmsg, zero_now_ms
#include "zero3/config.h"   // ZeroConfig, zero_config_defaults
#include "zero3/dev_estimate.h" // zero_dev_pool_counts, zero_dev_grad_pool_counts: the device engine's pools

// A model of 4 units: 0 the embedding (used by the first and the last layers, like
// GPT-2's wte), 1 and 2 two blocks of the same size, 3 a small final norm.
static const size_t NUMEL[4] = {1000, 400, 400, 10};
// forward: 0 1 2 3 0; training: the forward then 0 3 2 1 (GPT-2's gpt2_schedule at L = 2)
static const int FWD[5] = {0, 1, 2, 3, 0};
static const int TRAIN[9] = {0, 1, 2, 3, 0, 0, 3, 2, 1};

typedef struct { ZeroPlan plan; ZeroSchedule s; } Fixture;

// the schedule of the model above at `stage` with cfg's knobs over one rank
static void fixture(Fixture* f, ZeroConfig* cfg) {
    ZeroModel m;
    memset(&m, 0, sizeof(m));
    m.num_units = 4;
    m.unit_numel = NUMEL;
    m.uses[ZERO_PASS_TRAIN] = TRAIN;
    m.num_uses[ZERO_PASS_TRAIN] = 9;
    m.uses[ZERO_PASS_FORWARD] = FWD;
    m.num_uses[ZERO_PASS_FORWARD] = 5;
    cr_assert_eq(zero_plan_init(&f->plan, NUMEL, 4, 1, 0, sizeof(float)), 0, "%s", zero_errmsg());
    cr_assert_eq(zero_schedule_init(&f->s, &m, &f->plan, cfg), 0, "%s", zero_errmsg());
    for (int u = 0; u < 4; u++) {  // the persistent units are gathered at init, as the engines do
        if (f->s.persistent[u]) { zero_schedule_gathered(&f->s, u); }
    }
}

static void fixture_free(Fixture* f) {
    zero_schedule_free(&f->s);
    zero_plan_free(&f->plan);
}

static ZeroConfig stage3(void) {
    ZeroConfig c;
    zero_config_defaults(&c);
    c.stage = 3;
    c.param_persistence_threshold = 100;  // unit 3 (10 elements) is persistent, the others not
    return c;
}

Test(schedule, reuse_rule_keeps_what_is_used_again_soon) {
    ZeroConfig c = stage3();
    Fixture f;
    fixture(&f, &c);
    // forward: unit 0 is used again at the classifier with 400 + 400 + 10 elements fetched
    // in between: kept under the default reuse distance (1e9)
    cr_assert_eq(f.s.keep[ZERO_PASS_FORWARD][0], 1);
    cr_assert_eq(f.s.keep[ZERO_PASS_FORWARD][1], 0);  // unit 1 is not used again in a forward
    // training: the classifier's forward and backward uses are adjacent (distance 0)
    cr_assert_eq(f.s.keep[ZERO_PASS_TRAIN][4], 1);
    fixture_free(&f);

    c.max_reuse_distance = 809;  // one element short of 400 + 400 + 10
    fixture(&f, &c);
    cr_assert_eq(f.s.keep[ZERO_PASS_FORWARD][0], 0);
    cr_assert_eq(f.s.keep[ZERO_PASS_TRAIN][4], 1, "distance 0 is within any budget");
    fixture_free(&f);

    c.max_reuse_distance = 1000000;
    c.max_live_parameters = 1399;  // unit 0 with the largest unit in between (400) needs 1400
    fixture(&f, &c);
    cr_assert_eq(f.s.keep[ZERO_PASS_FORWARD][0], 0, "the live budget also decides keeping");
    fixture_free(&f);
}

Test(schedule, persistent_units_only_at_stage_3) {
    ZeroConfig c = stage3();
    Fixture f;
    fixture(&f, &c);
    cr_assert(f.s.persistent[3] && !f.s.persistent[0] && !f.s.persistent[1]);
    cr_assert_eq(f.s.live, 10.0, "gathered from the start: in the live budget");
    // a persistent unit is never freed at its release
    cr_assert_eq(zero_schedule_begin(&f.s, ZERO_PASS_FORWARD, 1), 0);
    for (int i = 0; i < 3; i++) { f.s.pos++; }
    cr_assert_eq(zero_schedule_release(&f.s, 3), 0);
    fixture_free(&f);

    c.stage = 2;
    fixture(&f, &c);
    for (int u = 0; u < 4; u++) { cr_assert_eq(f.s.persistent[u], 0); }
    cr_assert_eq(zero_schedule_begin(&f.s, ZERO_PASS_FORWARD, 1), 0);
    cr_assert_eq(zero_schedule_release(&f.s, 0), 0, "before stage 3 nothing is ever freed");
    fixture_free(&f);
}

Test(schedule, prefetch_window_depth_budget_bucket) {
    ZeroConfig c = stage3();
    c.prefetch_depth = 2;
    Fixture f;
    fixture(&f, &c);
    int ahead[64];
    cr_assert_eq(zero_schedule_begin(&f.s, ZERO_PASS_FORWARD, 1), 0);
    // the first two uses' units, in order, both counted in flight
    cr_assert_eq(zero_schedule_prefetch(&f.s, 0, ahead), 2);
    cr_assert(ahead[0] == 0 && ahead[1] == 1);
    cr_assert_eq(f.s.in_flight, 1400.0);
    // already in flight or gathered: not started again
    zero_schedule_gathered(&f.s, 0);
    cr_assert_eq(zero_schedule_prefetch(&f.s, 1, ahead), 1);
    cr_assert_eq(ahead[0], 2, "unit 1 is in flight, so the window moves on to unit 2");
    fixture_free(&f);

    // a prefetch bucket smaller than two units: one gather in flight at a time
    c.prefetch_bucket_size = 1200;
    fixture(&f, &c);
    cr_assert_eq(zero_schedule_begin(&f.s, ZERO_PASS_FORWARD, 1), 0);
    cr_assert_eq(zero_schedule_prefetch(&f.s, 0, ahead), 1);
    cr_assert_eq(ahead[0], 0);
    zero_schedule_gathered(&f.s, 0);
    cr_assert_eq(zero_schedule_prefetch(&f.s, 1, ahead), 2, "nothing in flight: 400 + 400 fit the bucket");
    fixture_free(&f);

    // a unit larger than the bucket still starts when nothing else is in flight
    c.prefetch_bucket_size = 10;
    fixture(&f, &c);
    cr_assert_eq(zero_schedule_begin(&f.s, ZERO_PASS_FORWARD, 1), 0);
    cr_assert_eq(zero_schedule_prefetch(&f.s, 0, ahead), 1);
    fixture_free(&f);

    // the live budget stops the window, gathered and in flight together
    c.prefetch_bucket_size = 50000000;
    c.max_live_parameters = 1399;
    fixture(&f, &c);
    cr_assert_eq(zero_schedule_begin(&f.s, ZERO_PASS_FORWARD, 1), 0);
    cr_assert_eq(zero_schedule_prefetch(&f.s, 0, ahead), 1, "1000 + 400 > 1399");
    fixture_free(&f);

    // no prefetch, or not stage 3: never a gather ahead
    c = stage3();
    c.prefetch_depth = 0;
    fixture(&f, &c);
    cr_assert_eq(zero_schedule_begin(&f.s, ZERO_PASS_FORWARD, 1), 0);
    cr_assert_eq(zero_schedule_prefetch(&f.s, 0, ahead), 0);
    fixture_free(&f);
    c.prefetch_depth = 2;
    c.stage = 1;
    fixture(&f, &c);
    cr_assert_eq(zero_schedule_begin(&f.s, ZERO_PASS_FORWARD, 1), 0);
    cr_assert_eq(zero_schedule_prefetch(&f.s, 0, ahead), 0);
    fixture_free(&f);
}

Test(schedule, reduce_window_is_first_in_first_out) {
    ZeroConfig c;
    zero_config_defaults(&c);
    c.stage = 2;
    c.reduce_bucket_size = 960;  // padded sizes at one rank of fp32 (256-byte shards): 1024, 448, 448, 64
    Fixture f;
    fixture(&f, &c);
    cr_assert_eq(zero_schedule_reduce_full(&f.s, 1), 0, "an empty window always takes one");
    zero_schedule_reduce_started(&f.s, 1);
    cr_assert_eq(zero_schedule_reduce_full(&f.s, 2), 0, "448 + 448 <= 960");
    zero_schedule_reduce_started(&f.s, 2);
    cr_assert_eq(zero_schedule_reduce_full(&f.s, 3), 0, "896 + 64 <= 960");
    zero_schedule_reduce_started(&f.s, 3);
    cr_assert_eq(zero_schedule_reduce_full(&f.s, 0), 1);
    cr_assert_eq(zero_schedule_reduce_oldest(&f.s), 1);
    cr_assert_eq(zero_schedule_reduce_oldest(&f.s), 2);
    cr_assert_eq(zero_schedule_reduce_oldest(&f.s), 3);
    cr_assert_eq(zero_schedule_reduce_full(&f.s, 0), 0, "empty again: even a unit above the bucket starts");
    cr_assert_eq(zero_schedule_reduce_oldest(&f.s), -1);
    fixture_free(&f);
}

Test(schedule, use_checks_name_the_unit) {
    ZeroConfig c = stage3();
    Fixture f;
    fixture(&f, &c);
    cr_assert_neq(zero_schedule_at(&f.s, 0, "fetch"), 0, "outside a pass");
    cr_assert(strstr(zero_errmsg(), "outside a pass") != NULL, "%s", zero_errmsg());
    cr_assert_eq(zero_schedule_begin(&f.s, ZERO_PASS_FORWARD, 1), 0);
    cr_assert_neq(zero_schedule_begin(&f.s, ZERO_PASS_TRAIN, 1), 0, "a pass inside a pass");
    cr_assert_neq(zero_schedule_at(&f.s, 1, "fetch"), 0);
    cr_assert(strstr(zero_errmsg(), "fetch of unit 1 at use 0") != NULL && strstr(zero_errmsg(), "schedule has unit 0") != NULL,
              "%s", zero_errmsg());
    cr_assert_lt(zero_schedule_release(&f.s, 2), 0);
    cr_assert_neq(zero_schedule_grad(&f.s, 0), 0, "no gradient in a forward pass");
    cr_assert_neq(zero_schedule_end(&f.s), 0);
    cr_assert(strstr(zero_errmsg(), "after 0 of its 5 uses") != NULL, "%s", zero_errmsg());
    fixture_free(&f);

    fixture(&f, &c);
    cr_assert_eq(zero_schedule_begin(&f.s, ZERO_PASS_TRAIN, 1), 0);
    for (int i = 0; i < 9; i++) { cr_assert_geq(zero_schedule_release(&f.s, TRAIN[i]), 0, "use %d", i); }
    cr_assert_neq(zero_schedule_reduce(&f.s, 1), 0, "a reduce without its gradient");
    cr_assert(strstr(zero_errmsg(), "without its gradient") != NULL, "%s", zero_errmsg());
    cr_assert_eq(zero_schedule_grad(&f.s, 1), 0);
    cr_assert_neq(zero_schedule_end(&f.s), 0, "a gradient left open");
    cr_assert(strstr(zero_errmsg(), "unit 1's gradient not reduced") != NULL, "%s", zero_errmsg());
    cr_assert_eq(zero_schedule_reduce(&f.s, 1), 0);
    cr_assert_neq(zero_schedule_grad(&f.s, 1), 0, "a second gradient of a unit reduced in this pass");
    cr_assert(strstr(zero_errmsg(), "again after its reduce") != NULL, "%s", zero_errmsg());
    cr_assert_neq(zero_schedule_reduce(&f.s, 1), 0, "a second reduce");
    cr_assert_eq(zero_schedule_end(&f.s), 0, "%s", zero_errmsg());
    cr_assert_eq(zero_schedule_begin(&f.s, ZERO_PASS_TRAIN, 1), 0);
    cr_assert_eq(zero_schedule_grad(&f.s, 1), 0, "the next pass opens it again");
    fixture_free(&f);
}

// ----------------------------------------------------------------------------
// the pass driver (zero3/pass.h) over a mover that records what it is told

typedef struct {
    int held[2048], most[2048];  // gathered buffers by padded size: now, and the most at once
    int how[4][8], nhow[4];      // each unit's gathers (ZERO_GATHER_*), in order
    char log[256];               // reductions: "s<unit>" started, "c<unit>" completed
    int fail_gather;             // gather_start fails
} Rec;

static void rec_log(Rec* r, char what, int u) {
    size_t n = strlen(r->log);
    if (n + 3 < sizeof(r->log)) { r->log[n] = what; r->log[n + 1] = (char)('0' + u); r->log[n + 2] = '\0'; }
}

static const size_t* rec_padded;  // the fixture's padded unit sizes
static int rec_gather(void* be, int u, int how) {
    Rec* r = (Rec*)be;
    if (r->fail_gather) { return -1; }
    size_t e = rec_padded[u];
    if (++r->held[e] > r->most[e]) { r->most[e] = r->held[e]; }
    if (r->nhow[u] < 8) { r->how[u][r->nhow[u]++] = how; }
    return 0;
}
static int rec_wait(void* be, int u) { (void)be; (void)u; return 0; }
static int rec_free(void* be, int u) { ((Rec*)be)->held[rec_padded[u]]--; return 0; }
static void* rec_params(void* be, int u) { (void)u; return be; }
static int rec_grad(void* be, int u, void** out) { (void)u; *out = be; return 0; }
static int rec_reduce_start(void* be, int u) { rec_log((Rec*)be, 's', u); return 0; }
static int rec_reduce_complete(void* be, int u) { rec_log((Rec*)be, 'c', u); return 0; }
static const ZeroMover REC_MOVER = {
    .gather_start = rec_gather, .gather_wait = rec_wait, .gather_free = rec_free, .params = rec_params,
    .grad_buf = rec_grad, .reduce_start = rec_reduce_start, .reduce_complete = rec_reduce_complete, .poll = NULL,
};

// a driver over f's schedule moving through r
static void rec_pass(ZeroPass* p, Fixture* f, Rec* r, int stage, int hpz) {
    memset(r, 0, sizeof(*r));
    rec_padded = f->s.padded;
    cr_assert_eq(zero_pass_init(p, &f->s, &REC_MOVER, r, stage, hpz), 0, "%s", zero_errmsg());
}

// ... that has walked both passes once
static void rec_walk(ZeroPass* p, Fixture* f, Rec* r, int stage, int hpz) {
    rec_pass(p, f, r, stage, hpz);
    cr_assert_eq(zero_pass_walk(p), 0, "%s", zero_errmsg());
}

// The two blocks (400 elements each, padded to 448) are the only units of their size that are not
// persistent. Without prefetch and without reuse one is gathered at a time; prefetching
// gathers the next while the current is in use, and keeping them from the forward to the
// backward (reuse within the default distance) holds both. (The device engine sizes its
// pools so.)
Test(pass, walk_counts_the_buffers_a_size_needs) {
    ZeroConfig c = stage3();
    for (int depth = 0; depth <= 3; depth++) {
        for (long long reuse = 0; reuse <= 1000000000LL; reuse += 1000000000LL) {
            c.prefetch_depth = depth;
            c.max_reuse_distance = reuse;
            Fixture f;
            fixture(&f, &c);
            ZeroPass p;
            Rec r;
            rec_walk(&p, &f, &r, 3, 0);
            cr_assert_eq(r.most[448], depth == 0 && reuse == 0 ? 1 : 2, "depth %d reuse %lld: %d", depth, reuse, r.most[448]);
            cr_assert_eq(r.most[1024], 1, "the embedding: one buffer");
            cr_assert_eq(r.most[64], 0, "the final norm is persistent: never gathered in a pass");
            // the walk leaves nothing gathered but the persistent unit
            cr_assert(f.s.state[0] == ZERO_UNIT_NOT_LIVE && f.s.state[1] == ZERO_UNIT_NOT_LIVE && f.s.state[3] == ZERO_UNIT_LIVE);
            cr_assert(f.s.live == 10.0 && f.s.in_flight == 0.0 && r.held[448] == 0 && r.held[1024] == 0);
            // the device engine's gather pools (zero3/dev_estimate.h, walked again from the
            // schedule this walk left): the sizes not persistent, in unit order, as many
            // buffers of each as this recorder counted
            size_t elems[ZERO_DEV_EST_MAX_POOLS];
            int count[ZERO_DEV_EST_MAX_POOLS], n = -1;
            cr_assert_eq(zero_dev_pool_counts(&f.plan, &f.s, 3, elems, count, &n), 0, "%s", zero_errmsg());
            cr_assert(n == 2 && elems[0] == 1024 && elems[1] == 448, "%d pools: %zu %zu", n, elems[0], elems[1]);
            cr_assert(count[0] == r.most[1024] && count[1] == r.most[448], "depth %d reuse %lld: %d %d, the recorder %d %d",
                      depth, reuse, count[0], count[1], r.most[1024], r.most[448]);
            cr_assert(f.s.state[0] == ZERO_UNIT_NOT_LIVE && f.s.state[3] == ZERO_UNIT_LIVE && f.s.live == 10.0);
            zero_pass_free(&p);
            fixture_free(&f);
        }
    }
    // a live budget under two blocks and the persistent norm (810): never two blocks at once
    c.prefetch_depth = 3;
    c.max_reuse_distance = 0;
    c.max_live_parameters = 800;
    Fixture f;
    fixture(&f, &c);
    ZeroPass p;
    Rec r;
    rec_walk(&p, &f, &r, 3, 0);
    cr_assert_eq(r.most[448], 1);
    // a mover's failure stops the pass
    zero_pass_free(&p);
    rec_pass(&p, &f, &r, 3, 0);
    r.fail_gather = 1;
    cr_assert_neq(zero_pass_walk(&p), 0);
    zero_pass_free(&p);
    fixture_free(&f);
}

// The device engine's pools as zero3/dev_estimate.h counts them (the engine's own rule;
// its gather pools against the recording mover: walk_counts_the_buffers_a_size_needs):
// the gradient pools have 2 buffers for a size several units have, 1 for one, +1 for the
// embedding's size among several; below stage 3 no gather pools, below 2 no gradient pools.
Test(pass, device_gradient_pools) {
    ZeroConfig c = stage3();
    Fixture f;
    fixture(&f, &c);
    size_t elems[ZERO_DEV_EST_MAX_POOLS];
    int count[ZERO_DEV_EST_MAX_POOLS], n = -1;
    cr_assert_eq(zero_dev_pool_counts(&f.plan, &f.s, 2, elems, count, &n), 0);
    cr_assert_eq(n, 0, "no gather pools below stage 3");
    cr_assert_eq(zero_dev_grad_pool_counts(&f.plan, 3, elems, count, &n), 0, "%s", zero_errmsg());
    cr_assert_eq(n, 3);
    cr_assert(elems[0] == 1024 && count[0] == 1, "the embedding's size alone: one buffer (%zu: %d)", elems[0], count[0]);
    cr_assert(elems[1] == 448 && count[1] == 2, "two blocks: two buffers (%zu: %d)", elems[1], count[1]);
    cr_assert(elems[2] == 64 && count[2] == 1, "the norm: one buffer (%zu: %d)", elems[2], count[2]);
    cr_assert_eq(zero_dev_grad_pool_counts(&f.plan, 1, elems, count, &n), 0);
    cr_assert_eq(n, 0, "no gradient pools below stage 2");
    fixture_free(&f);
    // the embedding's size shared with the blocks: 2 + 1 buffers
    static const size_t same[4] = {400, 400, 400, 10};
    ZeroPlan p;
    cr_assert_eq(zero_plan_init(&p, same, 4, 1, 0, sizeof(float)), 0);
    cr_assert_eq(zero_dev_grad_pool_counts(&p, 2, elems, count, &n), 0);
    cr_assert(n == 2 && elems[0] == 448 && count[0] == 3 && count[1] == 1, "%d: %zu x %d", n, elems[0], count[0]);
    zero_plan_free(&p);
}

// hpZ: a unit's first gather after an update reads the shards and keeps this rank's slice;
// its later gathers read the slices; an update makes them stale
Test(pass, hpz_gathers_from_slices_until_the_parameters_change) {
    ZeroConfig c = stage3();
    c.prefetch_depth = 0;
    c.max_reuse_distance = 0;  // the backward gathers the blocks again
    Fixture f;
    fixture(&f, &c);
    ZeroPass p;
    Rec r;
    rec_walk(&p, &f, &r, 3, 1);
    // unit 1: the training pass's forward and backward, then the forward pass
    cr_assert_eq(r.nhow[1], 3);
    cr_assert_eq(r.how[1][0], ZERO_GATHER_SHARDS_KEEP);
    cr_assert_eq(r.how[1][1], ZERO_GATHER_SLICES);
    cr_assert_eq(r.how[1][2], ZERO_GATHER_SLICES);
    zero_pass_params_changed(&p);
    cr_assert_eq(zero_pass_walk(&p), 0, "%s", zero_errmsg());
    cr_assert_eq(r.how[1][3], ZERO_GATHER_SHARDS_KEEP, "stale slices are not read");
    cr_assert_eq(r.how[1][4], ZERO_GATHER_SLICES);
    zero_pass_free(&p);
    rec_walk(&p, &f, &r, 3, 0);  // without hpZ every gather reads the shards
    cr_assert(r.how[1][0] == ZERO_GATHER_SHARDS && r.how[1][1] == ZERO_GATHER_SHARDS);
    zero_pass_free(&p);
    fixture_free(&f);
}

// The hints (ZeroMover.upcoming): the units the window will gather next, in the order it
// will, as many as the mover takes. This mover takes up to `take` units at once (as an
// engine has buffers) and a gather consumes its unit's hint.
typedef struct {
    Rec rec;
    int take, out[4], nout, most;  // hinted, not yet gathered; the most at once
    int order[64], norder;         // every hint taken, in order
    int gathers, hits, wasted;     // gathers; of them, found hinted; hinted but read from hpZ's slices
} Hints;

static int hints_find(const Hints* h, int u) {
    for (int i = 0; i < h->nout; i++) {
        if (h->out[i] == u) { return i; }
    }
    return -1;
}
static int hints_upcoming(void* be, int u) {
    Hints* h = (Hints*)be;
    if (hints_find(h, u) >= 0) { return 1; }
    if (h->nout >= h->take) { return 0; }
    h->out[h->nout++] = u;
    if (h->nout > h->most) { h->most = h->nout; }
    if (h->norder < 64) { h->order[h->norder++] = u; }
    return 1;
}
static int hints_gather(void* be, int u, int how) {
    Hints* h = (Hints*)be;
    int i = hints_find(h, u);
    h->gathers++;
    if (i >= 0) {
        h->hits++;
        h->wasted += how == ZERO_GATHER_SLICES;
        h->out[i] = h->out[--h->nout];
    }
    return rec_gather(&h->rec, u, how);
}
static int hints_free(void* be, int u) { return rec_free(&((Hints*)be)->rec, u); }
static const ZeroMover HINTS_MOVER = {
    .gather_start = hints_gather, .gather_wait = rec_wait, .gather_free = hints_free, .params = rec_params,
    .grad_buf = rec_grad, .reduce_start = rec_reduce_start, .reduce_complete = rec_reduce_complete, .poll = NULL,
    .upcoming = hints_upcoming,
};

Test(pass, hints_run_ahead_while_the_mover_takes_them) {
    ZeroConfig c = stage3();
    c.prefetch_depth = 0;      // no window: each gather at its use, each hinted first
    c.max_reuse_distance = 0;  // the backward gathers the blocks again
    for (int take = 0; take <= 3; take++) {
        Fixture f;
        fixture(&f, &c);
        ZeroPass p;
        Hints h;
        memset(&h, 0, sizeof(h));
        h.take = take;
        rec_padded = f.s.padded;
        cr_assert_eq(zero_pass_init(&p, &f.s, &HINTS_MOVER, &h, 3, 0), 0, "%s", zero_errmsg());
        cr_assert_eq(zero_pass_walk(&p), 0, "%s", zero_errmsg());
        // training 0 1 2 _ 0 0 _ 2 1 (gathered: 0 1 2 0 2 1, the second 0 kept from the first),
        // forward 0 1 2 _ 0 (all gathered)
        cr_assert_eq(h.gathers, 10, "take %d: %d gathers", take, h.gathers);
        cr_assert_eq(h.hits, take > 0 ? h.gathers : 0, "take %d: %d of %d gathers hinted", take, h.hits, h.gathers);
        cr_assert_eq(h.most, take, "take %d: %d at once", take, h.most);
        cr_assert_eq(h.nout, 0, "take %d: a hint never gathered", take);
        if (take == 1) {  // one at a time: the hints are the gathers, in order
            static const int want[10] = {0, 1, 2, 0, 2, 1, 0, 1, 2, 0};
            cr_assert_eq(h.norder, 10);
            for (int i = 0; i < 10; i++) { cr_assert_eq(h.order[i], want[i], "hint %d: %d", i, h.order[i]); }
        }
        zero_pass_free(&p);
        fixture_free(&f);
    }
    // hpZ: the gathers from the slices read no shards, so they are never hinted
    Fixture f;
    fixture(&f, &c);
    ZeroPass p;
    Hints h;
    memset(&h, 0, sizeof(h));
    h.take = 3;
    rec_padded = f.s.padded;
    cr_assert_eq(zero_pass_init(&p, &f.s, &HINTS_MOVER, &h, 3, 1), 0, "%s", zero_errmsg());
    cr_assert_eq(zero_pass_walk(&p), 0, "%s", zero_errmsg());
    cr_assert(h.wasted == 0 && h.nout == 0 && h.hits == 3, "hpZ: %d hinted slice gathers, %d left, %d hits", h.wasted, h.nout, h.hits);
    zero_pass_free(&p);
    fixture_free(&f);
}

// The window behind: with a bucket of one unit each reduction completes the oldest before
// it starts; the pass's end completes the rest (drain_at_end) or leaves them to the
// engine's ordering. Stages 0-1 reduce only on the last micro-step, and not at all when
// the gradient is local (reduce_local).
Test(pass, reductions_follow_the_window_behind) {
    ZeroConfig c;
    zero_config_defaults(&c);
    c.stage = 2;
    c.reduce_bucket_size = 1;
    Fixture f;
    fixture(&f, &c);
    ZeroPass p;
    Rec r;
    rec_pass(&p, &f, &r, 2, 0);
    p.drain_at_end = 1;
    cr_assert_eq(zero_pass_walk(&p), 0, "%s", zero_errmsg());
    // the backward's last uses: 3, 2, 1, then the embedding (0) at the end
    cr_assert_str_eq(r.log, "s3c3s2c2s1c1s0c0");
    zero_pass_free(&p);
    rec_walk(&p, &f, &r, 2, 0);
    cr_assert_str_eq(r.log, "s3c3s2c2s1c1s0", "without drain_at_end the last is left to the engine");
    cr_assert_eq(f.s.red_count, 0, "and forgotten by the window");
    zero_pass_free(&p);
    fixture_free(&f);

    c.stage = 0;
    c.reduce_bucket_size = 500000000LL;
    fixture(&f, &c);
    rec_walk(&p, &f, &r, 0, 0);
    cr_assert_str_eq(r.log, "s3s2s1s0", "stage 0: every unit on the last micro-step, none waited for");
    r.log[0] = '\0';
    void* out = NULL;
    cr_assert_eq(zero_pass_begin(&p, ZERO_PASS_TRAIN, 0), 0);  // not the last micro-step
    for (int i = 0; i < 9; i++) {
        int u = TRAIN[i];
        cr_assert_eq(zero_pass_fetch(&p, u, &out), 0, "%s", zero_errmsg());
        cr_assert_eq(zero_pass_grad(&p, u, &out), 0, "%s", zero_errmsg());
        cr_assert_eq(zero_pass_release(&p, u), 0, "%s", zero_errmsg());
        int later = 0;
        for (int j = i + 1; j < 9; j++) { later |= TRAIN[j] == u; }
        if (!later) { cr_assert_eq(zero_pass_reduce(&p, u), 0, "%s", zero_errmsg()); }
    }
    cr_assert_eq(zero_pass_end(&p), 0, "%s", zero_errmsg());
    cr_assert_str_eq(r.log, "", "stage 0 accumulates locally until the last micro-step");
    p.reduce_local = 1;
    cr_assert_eq(zero_pass_walk(&p), 0, "%s", zero_errmsg());
    cr_assert_str_eq(r.log, "", "one rank: nothing to reduce");
    zero_pass_free(&p);
    fixture_free(&f);
}
