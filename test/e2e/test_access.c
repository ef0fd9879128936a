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
    check(t.rank, refused(zero_tensor_get(z, ZERO_STATE_MASTER, nt, all), "no tensor"), "a tensor past the table is refused");
    check(t.rank, refused(zero_tensor_get(z, ZERO_NUM_STATES, 0, all), "no state"), "a state that does not exist is refused");

    if (t.rank == 0) { printf("%d passed, %d failed\n", passed, failed); }
    free(all);
    free(again);
    free(r);
    gpt2_free(&model);
    trainer_finish(&t);
    return failed > 0;
}
