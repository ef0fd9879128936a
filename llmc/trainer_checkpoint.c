// A training run's checkpoints and resume (llmc/trainer_checkpoint.h).
#include "llmc/trainer_checkpoint.h" // the interface, its types and the headers its bodies use
#include <stdio.h>            // printf, snprintf
#include <stdlib.h>           // free
#include <string.h>           // memset, strlen
#include <math.h>             // isfinite
#include <limits.h>           // LLONG_MAX: no non-finite parameter on a rank
#include <mpi.h>              // the finiteness check across ranks
#include "llmc/checkpoint.h"  // checkpoint_save, checkpoint_find_valid, checkpoint_resume, checkpoint_prune
#include "zero3/zero.h"       // zero_state_shard
#include "llmc/trainer_proc.h"  // die_all, trainer_fail, zeroCheck, mpiWatched
#include "llmc/utils.h"  // llmc_errmsg, mallocCheck
#include "llmc/job.h"  // job_doing

// this rank's checkpoint header at `step`: where the run is, and what the data position
// means (a resume checks these)
static CheckpointHeader trainer_checkpoint_header(const Trainer* t, int step) {
    const TrainConfig* tc = &t->tc;
    CheckpointHeader h;
    memset(&h, 0, sizeof(h));
    h.magic = CHECKPOINT_MAGIC;
    h.version = CHECKPOINT_VERSION;
    h.rank = t->rank;
    h.world_size = t->world;
    h.step = step;
    h.num_params = gpt2_num_params(&t->config);
    h.B = tc->B;
    h.T = tc->T;
    h.shuffle = tc->shuffle && !tc->overfit_single_batch;
    h.grad_accum = t->grad_accum;
    h.seed = tc->seed;
    return h;
}

// The model of -e must be the checkpoint's. The state files hold the parameter count
// only, which another head count keeps (and so may another shape): the checkpoint's model
// file holds the whole shape in its header. Stops every rank naming what differs.
static void trainer_resume_check_model(const Trainer* t, int step) {
    char path[4200], diff[512] = "", msg[8192];
    snprintf(path, sizeof(path), "%s/model_%08d.bin", t->tc.output_dir, step);
    GPT2Source saved;
    if (gpt2_source_open(&saved, path) != 0) { die_all(t->rank, llmc_errmsg()); }
    gpt2_source_close(&saved);
    const GPT2Config *a = &saved.config, *b = &t->config;
    const struct { const char* what; int saved, now; } f[] = {
        {"layers", a->num_layers, b->num_layers}, {"heads", a->num_heads, b->num_heads},
        {"channels", a->channels, b->channels}, {"vocabulary", a->vocab_size, b->vocab_size},
        {"padded vocabulary", a->padded_vocab_size, b->padded_vocab_size},
        {"maximum sequence length", a->max_seq_len, b->max_seq_len},
    };
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
        if (f[i].saved == f[i].now) { continue; }
        size_t n = strlen(diff);
        snprintf(diff + n, sizeof(diff) - n, "%s%s %d, -e's %d", n ? "; " : "", f[i].what, f[i].saved, f[i].now);
    }
    if (diff[0] == '\0') { return; }
    snprintf(msg, sizeof(msg), "-y 1: the checkpoint at step %d in %.1000s is of another model than -e %.1000s (%s: %s); "
             "resume with the -e of the run that wrote it, or with -e set to that file", step, t->tc.output_dir, t->tc.model,
             path, diff);
    die_all(t->rank, msg);
}

int trainer_resume(Trainer* t, const TrainerModel* m, Rng* sample_rng, int* skipped) {
    const TrainConfig* tc = &t->tc;
    if (!tc->resume) { return 0; }
    job_doing("resuming from %s (checking its checkpoints)", tc->output_dir);
    int latest = checkpoint_find_valid(tc->output_dir, t->rank, t->world, tc->allow_unverified);
    if (latest == -1) {
        if (t->rank == 0) { printf("no checkpoint in %s: starting from step 0\n", tc->output_dir); }
        return 0;
    }
    if (latest < 0) {
        char msg[4300];
        snprintf(msg, sizeof(msg), "-y 1: no checkpoint in %s passes its checks (see above); move the damaged ones away to "
                 "start from step 0", tc->output_dir);
        die_all(t->rank, msg);
    }
    trainer_resume_check_model(t, latest);
    CheckpointHeader want = trainer_checkpoint_header(t, latest), got;
    memset(&got, 0, sizeof(got));
    // -a 1 trains on the first batch at every step: the loader stays at its start, where the
    // uninterrupted run took it (the saved position is the batch after it)
    if (checkpoint_resume(tc->output_dir, latest, &want, tc->zero.stage, &t->config, m->zero, &got) != 0 ||
        (!tc->overfit_single_batch && dataloader_set_state(&t->train, &got.loader) != 0)) {
        trainer_fail(t->rank);
    }
    sample_rng->state = got.sample_rng;
    *skipped = got.skipped;
    if (t->rank == 0) { printf("resumed from %s at step %d (saved by %d ranks)\n", tc->output_dir, latest, got.world_size); }
    return latest;
}

int trainer_params_finite(const Trainer* t, const TrainerModel* m, char* msg, size_t len) {
    const GPT2Config* c = &t->config;
    size_t largest = 0, begin, n;
    for (int u = 0; u < gpt2_num_units(c); u++) {
        zeroCheck(zero_state_shard(m->zero, ZERO_STATE_MASTER, u, &begin, &n, NULL));
        if (n > largest) { largest = n; }
    }
    float* buf = (float*)mallocCheck((largest > 0 ? largest : 1) * sizeof(float));
    long long bad = LLONG_MAX;  // this rank's first non-finite parameter, in unit order
    float value = 0.0f;
    for (int u = 0; u < gpt2_num_units(c) && bad == LLONG_MAX; u++) {
        zeroCheck(zero_state_shard(m->zero, ZERO_STATE_MASTER, u, &begin, &n, buf));
        for (size_t i = 0; i < n; i++) {
            if (!isfinite(buf[i])) { bad = (long long)(gpt2_unit_offset(c, u) + begin + i); value = buf[i]; break; }
        }
    }
    free(buf);
    long long first = bad;
    mpiWatched("all-reduce of the checkpoint's finiteness check", MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_LONG_LONG, MPI_MIN, MPI_COMM_WORLD));
    if (first == LLONG_MAX) { return 1; }
    int owner = bad == first ? t->rank : t->world;  // the rank holding it sends its value
    mpiWatched("all-reduce of the checkpoint's finiteness check", MPI_Allreduce(MPI_IN_PLACE, &owner, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    mpiWatched("broadcast of the checkpoint's finiteness check", MPI_Bcast(&value, 1, MPI_FLOAT, owner, MPI_COMM_WORLD));
    int u = 0;
    while (u + 1 < gpt2_num_units(c) && gpt2_unit_offset(c, u + 1) <= (size_t)first) { u++; }
    size_t at = (size_t)first - gpt2_unit_offset(c, u);
    Gpt2Part part[NUM_BLOCK_TENSORS];
    gpt2_unit_parts(c, u, at, at + 1, part);
    char layer[32] = "";
    if (part[0].layer >= 0) { snprintf(layer, sizeof(layer), " of layer %d", part[0].layer); }
    snprintf(msg, len, "parameter %s%s element %zu (%lld of %zu in unit order) is %f", gpt2_param_names[part[0].kind], layer,
             part[0].elem, first, gpt2_num_params(c), value);
    return 0;
}

void trainer_checkpoint(Trainer* t, const TrainerModel* m, int step, int skipped, const Rng* sample_rng) {
    const TrainConfig* tc = &t->tc;
    job_doing("saving the checkpoint of step %d in %s", step, tc->output_dir);
    char why[160], msg[4400];
    if (!trainer_params_finite(t, m, why, sizeof(why))) {
        snprintf(msg, sizeof(msg), "refusing to write the checkpoint of step %d: %s, not finite; the checkpoints already in "
                 "%s are kept", step, why, tc->output_dir);
        die_all(t->rank, msg);
    }
    CheckpointHeader h = trainer_checkpoint_header(t, step);
    h.skipped = skipped;
    h.sample_rng = sample_rng->state;
    dataloader_get_state(&t->train, &h.loader);
    int version = tc->save_bf16 ? GPT2_MODEL_VERSION_BF16 : GPT2_MODEL_VERSION_FP32;
    // a failure is every rank's (checkpoint_agree), with one message naming the rank
    if (checkpoint_save(tc->output_dir, &h, m->zero, &t->config, version) != 0) { die_all(t->rank, llmc_errmsg()); }
    if (t->rank == 0) { printf("saved checkpoint at step %d in %s\n", step, tc->output_dir); }
    // only now, the new one complete, may older ones go (the ranks verify those kept together)
    if (checkpoint_prune(tc->output_dir, tc->keep_checkpoints, tc->major_checkpoint_every, step, tc->allow_unverified, t->rank, t->world) != 0) {
        fprintf(stderr, "warning: %s\n", llmc_errmsg());
    }
}
