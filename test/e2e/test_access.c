/*
 The engine's tensor calls (zero3/zero.h: zero_tensor_get, zero_tensor_local,
 zero_state_shard's phases) in the CPU trainer's own model, at whatever stage, world size
 and tier the trainer's flags say.

   mpirun -np N build/test_access <the trainer's flags>      (ACCESS_OUT=DIR: where to write)

 One step, made by hand as the training loop makes it (llm.c's TESTING idiom: the trainer
 is included, its main() left out): a batch's forward and backward, then the optimizer
 step. Along it, on every rank:
   - before any backward, and again after the step, a gradient read is refused (its phase:
     between the last micro-step's backward and the step), with the message saying so;
   - after the backward, every tensor's whole mean gradient (zero_tensor_get), and each
     rank's own part of it (zero_tensor_local) equal, bit for bit, to the same elements of
     the whole; a forward pass between the backward and the step leaves the gradient as
     it was, bit for bit, and a read during that pass is refused;
   - after the step, the master, m and v of every tensor, whole and local alike;
   - a tensor and a state that do not exist are refused.
 Rank 0 writes DIR/grad.bin (before the step), DIR/master.bin, DIR/m.bin, DIR/v.bin (after
 it): every tensor's whole fp32 values in the model's tensor order, which DIR/tensors.txt
 lists (a name and a size a line), and test/e2e/test_access.sh compares across stages,
 world sizes and tiers.
 Prints "PASS ..." / "FAIL ..." lines (rank 0) and exits 1 if any check failed.
*/
#define TESTING
#include "train_gpt2_zero3.c"
#include "zero3/util.h"     // zero_errmsg
#include "zero3/engine.h"   // zero_engine_state: the host engine's gathered units (a white-box check)

static int passed = 0, failed = 0;

// one check, the same on every rank: any rank failing fails it
static void check(int rank, int ok, const char* what) {
    int all = ok;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (all) { passed++; } else { failed++; }
    if (rank == 0) { printf("%s %s\n", all ? "PASS" : "FAIL", what); }
}

// a call that must be refused with a message holding `needle`
static int refused(int rc, const char* needle) {
    if (rc == 0) { return 0; }
    if (strstr(zero_errmsg(), needle) == NULL) { fprintf(stderr, "unexpected message: %s\n", zero_errmsg()); return 0; }
    return 1;
}

// Every tensor's `what`, whole, into all (the model's tensor order, total elements); each
// rank's local part checked against it bit for bit. 1 when both calls succeeded and agree.
static int read_all(Zero* z, const TensorRange* r, int nt, int what, float* all) {
    int ok = 1;
    size_t at = 0;
    for (int t = 0; t < nt; t++) {
        size_t b = 0, n = 0;
        if (zero_tensor_get(z, what, t, all + at) != 0) { fprintf(stderr, "get: %s\n", zero_errmsg()); return 0; }
        if (zero_tensor_local(z, what, t, &b, &n, NULL) != 0) { fprintf(stderr, "local: %s\n", zero_errmsg()); return 0; }
        float* mine = (float*)mallocCheck((n > 0 ? n : 1) * sizeof(float));
        if (zero_tensor_local(z, what, t, &b, &n, mine) != 0) { fprintf(stderr, "local: %s\n", zero_errmsg()); ok = 0; }
        else if (b + n > r[t].size || (n > 0 && memcmp(mine, all + at + b, n * sizeof(float)) != 0)) { ok = 0; }
        free(mine);
        at += r[t].size;
    }
    return ok;
}

// the index of tensor `kind` of layer (-1: not in a block)
static int find(const TensorRange* r, int nt, const char* kind, int layer) {
    for (int t = 0; t < nt; t++) {
        if (!strcmp(gpt2_param_names[r[t].kind], kind) && r[t].layer == layer) { return t; }
    }
    fprintf(stderr, "no tensor %s.%d\n", kind, layer);
    MPI_Abort(MPI_COMM_WORLD, 1);
    return -1;
}

// Sets tensor t's `what` to in (local: this rank's part of in only, as zero_tensor_local
// names it), then reads it back: 1 when it reads as set, to rel (0: bit for bit)
static int set_get(Zero* z, int what, int t, const float* in, size_t n, int local, double rel) {
    float* got = (float*)mallocCheck(n * sizeof(float));
    size_t b = 0, k = 0;
    int ok = zero_tensor_local(z, what, t, &b, &k, NULL) == 0;
    if (ok && local) { ok = zero_tensor_set_local(z, what, t, in + b) == 0; }
    else if (ok) { ok = zero_tensor_set(z, what, t, in) == 0; }
    if (!ok) { fprintf(stderr, "set: %s\n", zero_errmsg()); }
    if (ok) { ok = zero_tensor_get(z, what, t, got) == 0; }
    for (size_t i = 0; ok && i < n; i++) { ok = fabs((double)got[i] - in[i]) <= rel * fabs((double)in[i]); }
    free(got);
    return ok;
}

// the mean loss over the ranks of a forward pass on the batch (validation's)
static double forward_loss(GPT2* m, const int* inputs, const int* targets) {
    zeroCheck(zero_begin(m->zero, ZERO_PASS_FORWARD, 1));
    gpt2_forward(m, inputs, targets, m->B, m->T);
    zeroCheck(zero_end(m->zero));
    double loss = m->mean_loss;
    MPI_Allreduce(MPI_IN_PLACE, &loss, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    int world = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    return loss / world;
}

static void write_all(int rank, const char* dir, const char* name, const float* all, size_t total) {
    if (rank != 0 || dir == NULL) { return; }
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s.bin", dir, name);
    FILE* fp = fopenCheck(path, "wb");
    fwriteCheck(all, sizeof(float), total, fp);
    fclose(fp);
}

int main(int argc, char** argv) {
    Trainer t;
    trainer_start(&t, &argc, &argv, "test_access", 0);
    const TrainConfig* tc = &t.tc;
    const char* dir = getenv("ACCESS_OUT");
    trainer_model(&t);
    GPT2 model;
    gpt2_setup(&t, &model);
    Zero* z = model.zero;
    int nt = gpt2_num_tensors(&t.config);
    TensorRange* r = (TensorRange*)mallocCheck((size_t)nt * sizeof(TensorRange));
    gpt2_tensor_ranges(&t.config, r);
    size_t total = 0;
    for (int i = 0; i < nt; i++) { total += r[i].size; }
    if (t.rank == 0 && dir != NULL) {  // the table: each tensor's name and size, in order
        char path[1024];
        snprintf(path, sizeof(path), "%s/tensors.txt", dir);
        FILE* fp = fopenCheck(path, "w");
        for (int i = 0; i < nt; i++) {
            if (r[i].layer >= 0) { fprintf(fp, "%s.%d %zu\n", gpt2_param_names[r[i].kind], r[i].layer, r[i].size); }
            else { fprintf(fp, "%s %zu\n", gpt2_param_names[r[i].kind], r[i].size); }
        }
        fclose(fp);
    }
    float* all = (float*)mallocCheck(total * sizeof(float));
    float* again = (float*)mallocCheck(total * sizeof(float));

    check(t.rank, refused(zero_tensor_get(z, ZERO_STATE_GRAD, 0, all), "outside its phase"), "a gradient read before any backward is refused");
    if (dataloader_next_batch(&t.train) != 0) { MPI_Abort(MPI_COMM_WORLD, 1); }
    zeroCheck(zero_begin(z, ZERO_PASS_TRAIN, 1));
    check(t.rank, refused(zero_tensor_get(z, ZERO_STATE_MASTER, 0, all), "during a pass"), "a read inside a training pass is refused");
    gpt2_forward(&model, t.train.inputs, t.train.targets, model.B, model.T);
    gpt2_backward(&model, t.train.inputs, t.train.targets, model.B, model.T, 1.0f);
    zeroCheck(zero_end(z));

    check(t.rank, read_all(z, r, nt, ZERO_STATE_GRAD, all), "every tensor's mean gradient, whole and each rank's part alike");
    write_all(t.rank, dir, "grad", all, total);
    // a forward pass (validation's) between the backward and the step: refused inside it, the gradient kept
    zeroCheck(zero_begin(z, ZERO_PASS_FORWARD, 1));
    check(t.rank, refused(zero_tensor_get(z, ZERO_STATE_GRAD, 0, again), "during a pass"), "a gradient read inside a forward pass is refused");
    gpt2_forward(&model, t.train.inputs, t.train.targets, model.B, model.T);
    zeroCheck(zero_end(z));
    check(t.rank, read_all(z, r, nt, ZERO_STATE_GRAD, again) && memcmp(all, again, total * sizeof(float)) == 0,
          "the gradient after a forward pass, bit for bit as before it");

    // the gradient of qkvw.0 halved (the mean given; the ranks keep the sum: a round trip
    // through x * N / N, exact for N a power of 2, within an ulp otherwise), seen by the step
    int tq = find(r, nt, "qkvw", 0);
    size_t aq = 0;
    for (int i = 0; i < tq; i++) { aq += r[i].size; }
    float* want = (float*)mallocCheck(total * sizeof(float));
    for (size_t i = 0; i < r[tq].size; i++) { want[i] = 0.5f * all[aq + i]; }
    check(t.rank, set_get(z, ZERO_STATE_GRAD, tq, want, r[tq].size, 0, 2.4e-7), "qkvw.0's gradient halved, read back (zero_tensor_set)");
    check(t.rank, read_all(z, r, nt, ZERO_STATE_GRAD, again), "the gradient after the change, whole and parts alike");
    write_all(t.rank, dir, "grad_set", again, total);

    ZeroStep zs = {1e-3f, 0.1f, 1.0f, 1, tc->seed, 0, 0.0f};
    zeroCheck(zero_step(z, &zs));
    check(t.rank, refused(zero_tensor_get(z, ZERO_STATE_GRAD, 0, all), "outside its phase"), "a gradient read after the step is refused");
    const char* names[3] = {"master", "m", "v"};
    for (int what = ZERO_STATE_MASTER; what <= ZERO_STATE_V; what++) {
        char msg[64];
        snprintf(msg, sizeof(msg), "every tensor's %s, whole and each rank's part alike", names[what]);
        check(t.rank, read_all(z, r, nt, what, all), msg);
        write_all(t.rank, dir, names[what], all, total);
    }
    // after the step: the master of wte (gathered at each use at stage 3) and of lnfw (small:
    // persistent) changed, as a whole and by each rank's part; m and v of fcw.1 zeroed
    // (reset, by each rank's part); read back bit for bit, and seen by the next forward
    double before = forward_loss(&model, t.train.inputs, t.train.targets);
    {  // a forward pass at stage 3 (validation's, sampling's) ends with only the persistent units gathered
        const ZeroHost* e = (const ZeroHost*)zero_engine_state(z);
        int kept = 0;
        for (int u = 0; e->stage == 3 && u < e->plan.num_units; u++) { kept += !e->sched.persistent[u] && e->unit_buf[u] != NULL; }
        check(t.rank, kept == 0, "a forward pass releases what it gathered (stage 3: only the persistent units stay)");
    }
    const char* kinds[2] = {"wte", "lnfw"};
    for (int k = 0; k < 2; k++) {
        int tm = find(r, nt, kinds[k], -1);
        float* p = (float*)mallocCheck(r[tm].size * sizeof(float));
        zeroCheck(zero_tensor_get(z, ZERO_STATE_MASTER, tm, p));
        for (size_t i = 0; i < r[tm].size; i++) { p[i] += 0.01f * (float)((i % 7) + 1); }
        char msg[96];
        snprintf(msg, sizeof(msg), "%s's master changed %s, read back bit for bit", kinds[k], k ? "by parts (set_local)" : "whole (set)");
        check(t.rank, set_get(z, ZERO_STATE_MASTER, tm, p, r[tm].size, k, 0.0), msg);
        free(p);
    }
    int tf = find(r, nt, "fcw", 1);
    float* zeros = (float*)calloc(r[tf].size, sizeof(float));
    check(t.rank, set_get(z, ZERO_STATE_M, tf, zeros, r[tf].size, 1, 0.0) && set_get(z, ZERO_STATE_V, tf, zeros, r[tf].size, 1, 0.0),
          "fcw.1's m and v zeroed by parts, read back");
    free(zeros);
    double after = forward_loss(&model, t.train.inputs, t.train.targets);
    check(t.rank, after != before, "the next forward sees the change (its loss moved)");
    // gathered scopes over the final layernorm's unit and block 0's: read only (every rank
    // changes its copy: nothing kept), then with the last rank as the modifier (every rank
    // changes its copy differently: the last rank's kept, on every rank)
    int tw = find(r, nt, "lnfw", -1), units[2] = {r[tw].unit, r[find(r, nt, "qkvw", 0)].unit};
    size_t un[2] = {0, 0};
    for (int i = 0; i < nt; i++) { for (int k = 0; k < 2; k++) { if (r[i].unit == units[k]) { un[k] += r[i].size; } } }
    float* lnf = (float*)mallocCheck(r[tw].size * sizeof(float));
    float* got = (float*)mallocCheck(r[tw].size * sizeof(float));
    zeroCheck(zero_tensor_get(z, ZERO_STATE_MASTER, tw, lnf));
    {   // a unit named twice: refused, no scope left open and nothing left of it (the scopes below open)
        int twice[2] = {units[0], units[0]};
        float* q[2];
        check(t.rank, refused(zero_gather_begin(z, twice, 2, -1, q), "named twice"), "a unit named twice in a gathered scope is refused");
    }
    for (int modifier = -1; modifier < t.world; modifier += t.world) {  // -1, then world - 1
        float* p[2];
        zeroCheck(zero_gather_begin(z, units, 2, modifier, p));
        int ok = memcmp(p[0] + r[tw].offset, lnf, r[tw].size * sizeof(float)) == 0;
        if (modifier < 0) { check(t.rank, refused(zero_begin(z, ZERO_PASS_FORWARD, 1), "inside a gathered scope"), "a pass inside a gathered scope is refused"); }
        float d = t.rank == modifier ? 0.002f : 0.005f * (float)(t.rank + 1);  // (the same change at any world size)
        for (size_t i = 0; i < un[0]; i++) { p[0][i] += d; }
        zeroCheck(zero_gather_end(z));
        zeroCheck(zero_tensor_get(z, ZERO_STATE_MASTER, tw, got));
        for (size_t i = 0; i < r[tw].size && ok; i++) {
            float want = modifier < 0 ? lnf[i] : lnf[i] + 0.002f;
            ok = got[i] == want;
        }
        check(t.rank, ok, modifier < 0 ? "a read-only gathered scope: the whole unit handed out, changes left behind"
                                       : "a gathered scope's modifier rank's changes kept on every rank, the others' not");
    }
    free(lnf);
    free(got);
    double scoped = forward_loss(&model, t.train.inputs, t.train.targets);
    // the cache emptied (the pools; at stage 3 the persistent units' copies too), twice:
    // the second frees nothing; the next forward gathers what it needs again, its loss bit
    // for bit the same
    double freed = -1.0, freed2 = -1.0;
    zeroCheck(zero_empty_cache(z, &freed));
    zeroCheck(zero_empty_cache(z, &freed2));
    check(t.rank, (tc->zero.stage < 3 ? freed >= 0.0 : freed > 0.0) && freed2 == 0.0,
          "zero_empty_cache frees what is kept (at stage 3 some), then nothing");
    check(t.rank, forward_loss(&model, t.train.inputs, t.train.targets) == scoped, "the forward after it: the same loss, bit for bit");
    write_all(t.rank, dir, "loss", (float[]){(float)before, (float)after, (float)scoped}, 3);
    for (int what = ZERO_STATE_MASTER; what <= ZERO_STATE_V; what++) {
        char name[32];
        snprintf(name, sizeof(name), "%s_set", names[what]);
        zeroCheck(read_all(z, r, nt, what, all) ? 0 : -1);
        write_all(t.rank, dir, name, all, total);
    }
    free(want);
    check(t.rank, refused(zero_tensor_get(z, ZERO_STATE_MASTER, nt, all), "no tensor"), "a tensor past the table is refused");
    check(t.rank, refused(zero_tensor_get(z, ZERO_NUM_STATES, 0, all), "no state"), "a state that does not exist is refused");
    check(t.rank, refused(zero_tensor_set(z, ZERO_NUM_STATES, 0, all), "no state"), "a change of a state that does not exist is refused");
    check(t.rank, refused(zero_tensor_set_local(z, -1, 0, all), "no state"), "... and by parts");
    check(t.rank, refused(zero_tensor_set_local(z, ZERO_STATE_MASTER, -1, all), "no tensor"), "a change of a tensor that does not exist is refused");

    if (t.rank == 0) { printf("%d passed, %d failed\n", passed, failed); }
    free(all);
    free(again);
    free(r);
    gpt2_free(&model);
    trainer_finish(&t);
    return failed > 0;
}
