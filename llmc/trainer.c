// The training run's loop (llmc/trainer.h): evaluation between steps, the steps, the end.
#include "llmc/trainer.h" // the interface, its types and the headers its bodies use
#include <stdio.h>            // printf, snprintf
#include <stdlib.h>           // getenv, atoi, free, qsort: --top-k
#include <string.h>           // strlen, memset, memcpy
#include <math.h>             // isfinite, NAN: a step with a non-finite loss or norm is skipped; powf: --temperature
#include <mpi.h>              // the stop signal across ranks, the figures' gathers
#include "llmc/trainer_proc.h"       // die_all, log_line, allreduce_mean, the unit hooks
#include "llmc/trainer_checkpoint.h" // trainer_resume, trainer_checkpoint
#include "llmc/job.h"                // job_doing, the stop signals
#include "zero3/zero.h"              // zero_step, zero_stats, zero_flush; zero_now_ms (zero3/util.h)
#include "zero3/util.h"     // zero_error, zero_errmsg, zero_now_ms
#include "llmc/utils.h"     // llmc_error, llmc_errmsg, the checked wrappers

// draws from probs (over the real vocabulary) with a uniform coin in [0, 1)
static int sample_token(const float* probs, int V, float coin) {
    float cdf = 0.0f;
    for (int i = 0; i < V; i++) {
        cdf += probs[i];
        if (coin < cdf) { return i; }
    }
    return V - 1;  // rounding: the cdf may end a hair below 1
}

static int prob_desc(const void* a, const void* b) {
    float x = *(const float*)a, y = *(const float*)b;
    return (x < y) - (x > y);
}

// --temperature T and --top-k K over probs (V) into q (V): p^(1/T), every token below the
// K-th largest dropped (ties with it kept), renormalized; scratch (V) for the sort
static void sample_shape(const float* probs, int V, float temperature, int top_k, float* q, float* scratch) {
    float cut = 0.0f;
    if (top_k > 0 && top_k < V) {
        memcpy(scratch, probs, (size_t)V * sizeof(float));
        qsort(scratch, (size_t)V, sizeof(float), prob_desc);
        cut = scratch[top_k - 1];
    }
    double sum = 0.0;
    for (int i = 0; i < V; i++) {
        q[i] = probs[i] < cut ? 0.0f : (temperature == 1.0f ? probs[i] : powf(probs[i], 1.0f / temperature));
        sum += q[i];
    }
    for (int i = 0; i < V; i++) { q[i] = sum > 0.0 ? (float)(q[i] / sum) : 0.0f; }
}

// -v: the validation loss (mean over the batches and the ranks), printed by rank 0 and
// logged to main.log
static float trainer_validate(Trainer* t, const TrainerModel* m) {
    dataloader_reset(&t->val);
    size_t BT = (size_t)t->tc.B * t->tc.T;
    double sum = 0.0;
    for (int i = 0; i < t->val_steps; i++) {
        if (dataloader_next_batch(&t->val) != 0) { trainer_fail(t->rank); }
        const float* losses = m->eval_losses(m->self, t->val.inputs, t->val.targets);  // (B, T)
        double batch = 0.0;
        for (size_t p = 0; p < BT; p++) { batch += losses[p]; }
        sum += (float)(batch / BT);
    }
    return allreduce_mean((float)(sum / t->val_steps), t->world, "all-reduce of the validation loss");
}

// -h 1: HellaSwag's acc_norm over --hellaswag-file (llmc/hellaswag.h): each rank scores
// its share of the examples, every rank running the same number of forwards (at stage 3
// each one gathers from all), and rank 0 sums the scores (each from one rank, the others
// 0: exact) and counts the examples whose lowest-loss completion is the label. Returns
// the accuracy on rank 0 (the correct ones in *correct), 0 elsewhere. The test hook
// ZERO3_TEST_HELLASWAG_DUMP=FILE (docs/TESTING.md) appends rank 0's every score there.
static float trainer_hellaswag(Trainer* t, const TrainerModel* m, int step, int* correct) {
    const EvalSet* s = &t->hellaswag;
    int B = t->tc.B, T = t->tc.T;
    int* inputs = (int*)mallocCheck(2 * (size_t)B * T * sizeof(int));
    int* targets = inputs + (size_t)B * T;
    int* ex = (int*)mallocCheck((size_t)B * sizeof(int));
    double* scores = (double*)calloc((size_t)s->completions, sizeof(double));
    if (scores == NULL) { fprintf(stderr, "error: out of memory for HellaSwag's scores\n"); MPI_Abort(MPI_COMM_WORLD, 1); }
    int nb = evalset_num_batches(s, B, t->world);
    for (int k = 0; k < nb; k++) {
        int count = evalset_batch(s, B, T, t->rank, t->world, k, inputs, targets, ex);
        const float* losses = m->eval_losses(m->self, inputs, targets);  // (B, T)
        evalset_score(s, T, ex, count, losses, scores);
    }
    mpiWatched("reduce of the HellaSwag scores", MPI_Reduce(t->rank == 0 ? MPI_IN_PLACE : scores, scores, s->completions,
                                                            MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD));
    *correct = 0;
    const char* dump = getenv("ZERO3_TEST_HELLASWAG_DUMP");
    FILE* fp = t->rank == 0 && dump != NULL ? fopenCheck(dump, "a") : NULL;
    for (int i = 0; t->rank == 0 && i < s->n; i++) {
        int pred = evalset_predict(s, i, scores);
        *correct += pred == s->label[i];
        if (fp == NULL) { continue; }
        fprintf(fp, "%d %d %d %d", step, i, s->label[i], pred);
        for (int j = s->first[i]; j < s->first[i + 1]; j++) { fprintf(fp, " %.9g", scores[j]); }
        fprintf(fp, "\n");
    }
    if (fp != NULL && fclose(fp) != 0) { fprintf(stderr, "warning: %s: cannot write the HellaSwag scores\n", dump); }
    free(inputs); free(ex); free(scores);
    return t->rank == 0 ? (float)*correct / s->n : 0.0f;
}

// -s: a sample of -g tokens from start_token, one forward over the prefix per token. Every
// rank samples the same tokens from the same RNG (at stage 3 a forward needs every rank's
// shards); rank 0 prints them, decoded when the tokenizer has the model's vocabulary.
static void trainer_sample(Trainer* t, const TrainerModel* m, Rng* rng) {
    int gen_max = t->tc.gen_T < t->tc.T ? t->tc.gen_T : t->tc.T, V = t->config.vocab_size;
    int shaped = t->tc.temperature != 1.0f || t->tc.top_k > 0;
    int* tokens = (int*)mallocCheck((size_t)gen_max * sizeof(int));
    float* q = shaped ? (float*)mallocCheck(2 * (size_t)V * sizeof(float)) : NULL;
    tokens[0] = t->start_token;
    for (int i = 0; i < t->prompt_n; i++) { tokens[1 + i] = t->prompt[i]; }  // (it fits: trainer_prompt)
    if (t->rank == 0) { printf("generating:\n---\n"); }
    for (int i = 1; i < gen_max; i++) {
        int next = i <= t->prompt_n ? tokens[i] : -1;
        if (next < 0) {
            const float* p = m->next_probs(m->self, tokens, i);
            if (shaped) { sample_shape(p, V, t->tc.temperature, t->tc.top_k, q, q + V); p = q; }
            next = sample_token(p, V, rng_float(rng));
        }
        tokens[i] = next;
        if (t->rank != 0) { continue; }
        const char* piece = t->have_tokenizer ? tokenizer_decode(&t->tokenizer, (uint32_t)next) : NULL;
        if (piece != NULL) { fputs(piece, stdout); } else { printf("<%d>", next); }
        fflush(stdout);
    }
    if (t->rank == 0) { printf("\n---\n"); }
    free(tokens);
    free(q);
}

// Before the first step: the schedule, resume, the header and the memory table, the
// records, and the counters the report takes its per-step figures from.
static void trainer_loop_begin(Trainer* t, const TrainerModel* m, TrainerLoop* lp) {
    const TrainConfig* tc = &t->tc;
    int rank = t->rank, world = t->world;
    memset(lp, 0, sizeof(*lp));
    if (lr_scheduler_init(&lp->sched, tc->lr_schedule, tc->lr, tc->warmup, t->max_steps, tc->final_lr_frac) != 0) { trainer_fail(rank); }
    rng_init(&lp->sample_rng, tc->seed ^ 0xA5A5A5A5ull);
    lp->skipped = 0;
    lp->start_step = trainer_resume(t, m, &lp->sample_rng, &lp->skipped);
    lp->skipped_before = lp->skipped;
    outlier_init(&lp->loss_z);
    outlier_init(&lp->norm_z);
    const char* nan_env = getenv("ZERO3_TEST_NAN_STEP");
    lp->nan_step = nan_env != NULL ? atoi(nan_env) : -1;
    const char* change_env = getenv("ZERO3_TEST_CHANGE_STEP");
    lp->change_step = change_env != NULL ? atoi(change_env) : -1;

    lp->flops_per_token = gpt2_flops_per_token(&t->config, tc->T);
    if (rank == 0) { trainer_print_header(t, m, lp->flops_per_token); }
    lp->mem_all = (double*)mallocCheck(MEM_FIELDS * world * sizeof(double));
    trainer_memory(m, lp->mine);
    memory_gather(lp->mine, lp->mem_all, rank, world, 1, m->device_in_use != NULL ? "GPU " : "");

    lp->steps = (StepRecord*)mallocCheck((t->max_steps + 1) * sizeof(StepRecord));
    lp->vals = (ValRecord*)mallocCheck((t->max_steps + 2) * sizeof(ValRecord));
    lp->evals = (EvalRecord*)mallocCheck((t->max_steps + 2) * sizeof(EvalRecord));
    zeroCheck(zero_stats(m->zero, &lp->traffic.start));
    tensor_log_init(&lp->tensors, &t->config, m->zero, tc->log_tensors);
    if (tc->profile_ops > 0 && m->profile_begin != NULL) {
        lp->ops = op_profile_new(&t->config, tc->B, tc->T, !strcmp(m->precision, "bf16") ? 2 : 4, !strcmp(tc->attention, "flash"),
                                 m->peak_flops, m->peak_bytes, m->peak_flops < 0 ? "CPU (the model's ops)" : "GPU compute stream");
        if (lp->ops == NULL) { die_all(rank, "--profile-ops: out of memory for the op timer"); }
    }
    kernel_steps_begin(lp->kernel);
    if (!tc->resume) { log_fresh(tc->output_dir, rank); }  // a resumed run appends, as llm.c's does
    lp->t_start = zero_now_ms();
    t->startup_ms = lp->t_start - t->started_ms;
    if (rank == 0) {
        ZeroStats zs;
        zeroCheck(zero_stats(m->zero, &zs));
        printf("start-up: %.1f s to the first step (the engine's build %.1f s, of which the initial parameters %.1f s)\n",
               t->startup_ms / 1e3, zs.init_ms / 1e3, zs.fill_ms / 1e3);
    }
}

// At the boundary of `step`: whether any rank was signalled, validation (-v), samples (-s)
// and the checkpoint (-n) where asked. Returns 1 when the loop ends here: the last step, or
// a signal (after its checkpoint).
static int trainer_boundary(Trainer* t, const TrainerModel* m, TrainerLoop* lp, int step) {
    const TrainConfig* tc = &t->tc;
    int rank = t->rank;
    int last_step = step == t->max_steps;
    // a signal on any rank stops every rank at this step: one int per step
    zero_watch_step(step + 1);
    job_doing("at the boundary of step %d (agreeing whether to stop)", step);
    int stop = job_stop_signal();
    mpiWatched("all-reduce of the stop signal", MPI_Allreduce(MPI_IN_PLACE, &stop, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    if (stop) { job_stop_seen(); }  // taken up: --stop-grace no longer runs
    // --dpu: the last update is still running; the final evaluation, samples and
    // checkpoint see it applied
    if (last_step) { zeroCheck(zero_flush(m->zero)); }
    if (tc->val_every > 0 && (step % tc->val_every == 0 || last_step)) {
        job_doing("validating at step %d", step);
        float val_loss = trainer_validate(t, m);
        if (rank == 0) { printf("val loss %f\n", val_loss); }
        log_line(tc->output_dir, rank, "main.log", "s:%d tel:%.4f\n", step, val_loss);
        lp->vals[lp->nvals++] = (ValRecord){step, val_loss};
    }
    // llm.c's: every -v steps but the first, and at the last
    if (tc->hellaswag && ((tc->val_every > 0 && step > 0 && step % tc->val_every == 0) || last_step)) {
        job_doing("HellaSwag at step %d", step);
        int correct;
        float acc = trainer_hellaswag(t, m, step, &correct);
        if (rank == 0) { printf("HellaSwag: %d/%d = %f\n", correct, t->hellaswag.n, acc); }
        log_line(tc->output_dir, rank, "main.log", "s:%d eval:%.4f\n", step, acc);
        lp->evals[lp->nevals++] = (EvalRecord){step, acc, correct, t->hellaswag.n};
    }
    if (tc->sample_every > 0 && ((step > 0 && step % tc->sample_every == 0) || last_step)) {
        job_doing("sampling at step %d", step);
        trainer_sample(t, m, &lp->sample_rng);
    }
    int saved = 0;
    // -x 0 -n N: the checkpoint of step 0, the initial model (a run of no steps saves it)
    if (tc->checkpoint_every > 0 && (step > lp->start_step || t->max_steps == 0) && (step % tc->checkpoint_every == 0 || last_step)) {
        trainer_checkpoint(t, m, step, lp->skipped, &lp->sample_rng);
        saved = 1;
    }
    if (last_step) { return 1; }
    if (!stop) { return 0; }
    lp->signalled = 1;
    // where a -n checkpoint of this step would be, so that -y 1 continues the same run;
    // a resumed run signalled before its first step has its checkpoint already
    if (tc->output_dir == NULL) {
        if (rank == 0) { printf("received %s at step %d: no checkpoint without -o, exiting\n", job_signal_name(stop), step); }
    } else {
        if (!saved && !(step == lp->start_step && lp->start_step > 0)) { trainer_checkpoint(t, m, step, lp->skipped, &lp->sample_rng); }
        if (rank == 0) { printf("received %s: saved checkpoint at step %d in %s, exiting\n", job_signal_name(stop), step, tc->output_dir); }
    }
    return 1;
}
// The test hook ZERO3_TEST_CHANGE_STEP=S (docs/TESTING.md): after step S's update and a
// forward pass on its batch, every rank changes the states through the engine's calls, as a
// program of its own would:
// wte's master times 1.5 (zero_tensor_set), the final layernorm's unit plus 0.01 in a
// gathered scope whose modifier is the last rank (the others' different changes dropped),
// then zero_empty_cache. The later steps' losses tell whether each engine applied them alike.
static void test_change_states(const TrainerModel* m, Trainer* tr, int rank, int world) {
    Zero* z = m->zero;
    const GPT2Config* c = &tr->config;
    (void)m->eval_losses(m->self, tr->train.inputs, tr->train.targets);  // a forward first: what it made of the parameters is current
    int nt = gpt2_num_tensors(c), t = 0, u = gpt2_num_units(c) - 1;
    TensorRange* r = (TensorRange*)mallocCheck((size_t)nt * sizeof(TensorRange));
    gpt2_tensor_ranges(c, r);
    while (t < nt - 1 && r[t].kind != P_WTE) { t++; }
    float* w = (float*)mallocCheck(r[t].size * sizeof(float));
    zeroCheck(zero_tensor_get(z, ZERO_STATE_MASTER, t, w));
    for (size_t i = 0; i < r[t].size; i++) { w[i] *= 1.5f; }
    zeroCheck(zero_tensor_set(z, ZERO_STATE_MASTER, t, w));
    float* p = NULL;
    zeroCheck(zero_gather_begin(z, &u, 1, world - 1, &p));
    for (size_t i = 0; i < 2 * (size_t)c->channels; i++) { p[i] += rank == world - 1 ? 0.01f : 0.5f; }  // (lnfw, lnfb)
    zeroCheck(zero_gather_end(z));
    double freed = 0.0;
    zeroCheck(zero_empty_cache(z, &freed));
    free(w);
    free(r);
}

// --profile-ops: the engine's movers of the step just timed (zero3/zero.h's zero_trace_*),
// each on its track of the timeline and in the movers' table
static void trainer_movers_traced(Zero* z, OpProfile* p) {
    static const int track[ZERO_NUM_TRACKS] = {
        [ZERO_TRACK_COLLECTIVES] = OP_TRACK_COLLECTIVES, [ZERO_TRACK_COPIES] = OP_TRACK_COPIES, [ZERO_TRACK_HOST] = OP_TRACK_ENGINE_HOST,
    };
    const ZeroTraceSpan* spans = NULL;
    int n = 0;
    zeroCheck(zero_trace_end(z, &spans, &n));
    for (int i = 0; i < n; i++) {
        op_profile_span(p, spans[i].what, spans[i].unit, track[spans[i].track], spans[i].t0_ms, spans[i].t1_ms);
    }
}

// One optimizer step after `step`: the micro-steps of gradient accumulation, the engine's
// step, the step line and main.log. Returns 1 when more than --max-skipped-steps steps in a
// row were skipped.
static int trainer_train_step(Trainer* t, const TrainerModel* m, TrainerLoop* lp, int step) {
    const TrainConfig* tc = &t->tc;
    int rank = t->rank, world = t->world;
    job_doing("training step %d", step + 1);
    if (m->range_push != NULL) { m->range_push("step"); }
    ZeroStats before;
    zeroCheck(zero_stats(m->zero, &before));
    double t0 = zero_now_ms();
    // --profile-ops: the run's last steps, timed op by op (their start waits for the GPU)
    int profiled = lp->ops != NULL && step >= t->max_steps - tc->profile_ops;
    if (profiled) {
        t0 = m->profile_begin(m->self, lp->ops);
        zeroCheck(zero_trace_begin(m->zero, t0));  // the engine's movers too, on their own tracks
    }
    for (int micro = 0; micro < t->grad_accum; micro++) {
        if (!tc->overfit_single_batch || !lp->have_batch) {
            if (dataloader_next_batch(&t->train) != 0) { trainer_fail(rank); }
            lp->have_batch = 1;
        }
        m->train_micro(m->self, t->train.inputs, t->train.targets, micro == t->grad_accum - 1, t->grad_accum);
    }
    // the loss before the update: every rank sees the same mean, so all skip alike
    float my_loss = (float)(m->train_loss(m->self) / t->grad_accum);
    if (step == lp->nan_step && rank == world - 1) { my_loss = NAN; }
    float loss = allreduce_mean(my_loss, world, "all-reduce of the loss");
    float lr = lr_scheduler_get(&lp->sched, step);
    // -sl, -sg (llm.c's): the loss's z-score is known now; the norm's limit goes to the engine,
    // which alone knows the norm before it updates. Every rank sees the same loss and norm.
    double zloss = isfinite(loss) ? outlier_update(&lp->loss_z, loss) : NAN;
    int loss_out = tc->skip_lossz > 0.0f && isfinite(zloss) && zloss > tc->skip_lossz;
    double norm_limit = tc->skip_gradz > 0.0f ? outlier_limit(&lp->norm_z, tc->skip_gradz) : 0.0;
    // AdamW's 1-based step counts only the updates made, as DeepSpeed's does over overflows
    ZeroStep zs = {lr, tc->weight_decay, tc->grad_clip, step + 1 - lp->skipped, tc->seed, !isfinite(loss) || loss_out,
                   (float)norm_limit};
    int log_tensors = tensor_log_due(&lp->tensors, step);
    if (log_tensors) {  // the parameters the update starts from (its time left out of the step's)
        double tb = zero_now_ms();
        tensor_log_before(&lp->tensors, m->zero);
        t0 += zero_now_ms() - tb;
    }
    if (m->range_push != NULL) { m->range_push("optimizer"); }
    if (profiled) { m->op_begin(m->self, "optimizer", -1); }
    zeroCheck(zero_step(m->zero, &zs));
    if (profiled) { m->op_end(m->self); }
    if (m->range_pop != NULL) { m->range_pop(); }
    if (profiled) {  // (waits for the step's ops and movers: their time counts in the step's)
        m->profile_end(m->self);
        trainer_movers_traced(m->zero, lp->ops);
    }
    double ms = zero_now_ms() - t0;
    if (profiled) {
        op_profile_span(lp->ops, "step", -1, OP_TRACK_HOST, 0.0, ms);
        op_profile_step(lp->ops, step, t0, ms);
    }
    if (log_tensors) { tensor_log_after(&lp->tensors, &t->config, m->zero, step, rank, tc->output_dir); }
    if (step == lp->change_step) { test_change_states(m, t, rank, world); }
    ZeroStats after;
    zeroCheck(zero_stats(m->zero, &after));
    if (isfinite(after.norm)) { outlier_update(&lp->norm_z, after.norm); }
    int norm_out = zs.skip_norm_above > 0.0f && isfinite(after.norm) && after.norm > zs.skip_norm_above;
    // the engine skipped the update when either is not finite (zero3/zero.h's ZeroStep), or
    // an outlier; only the first kind counts towards --max-skipped-steps
    int nonfinite = !isfinite(loss) || !isfinite(after.norm);
    int outlier = !nonfinite && (loss_out || norm_out);
    int skip = nonfinite || outlier;
    lp->skipped += skip;
    lp->outliers += outlier;
    lp->skipped_in_a_row = nonfinite ? lp->skipped_in_a_row + 1 : 0;
    double wait = after.wait_ms - before.wait_ms;
    lp->traffic.wait_total += wait;
    if (m->range_pop != NULL) { m->range_pop(); }

    double tps = t->total_batch / (ms / 1e3);
    // MFU per device: this rank's share of the tokens on its device's peak
    double mfu = m->peak_flops > 0 ? lp->flops_per_token * (tps / world) / m->peak_flops : -1.0;
    char extra[128] = "";
    if (m->peak_flops >= 0) {
        if (mfu >= 0) { snprintf(extra, sizeof(extra), " | MFU %.1f%%", 100.0 * mfu); } else { snprintf(extra, sizeof(extra), " | MFU n/a"); }
    }
    double device_bytes = m->device_in_use != NULL ? (double)m->device_in_use(m->self) : 0.0;  // (the step line's, main.jsonl's)
    if (m->device_in_use != NULL) {
        size_t len = strlen(extra);
        snprintf(extra + len, sizeof(extra) - len, " | GPU mem %.0f MiB", device_bytes / 1048576.0);
    }
    if (rank == 0) {
        char why[96] = "";
        if (nonfinite) { snprintf(why, sizeof(why), " | skipped (non-finite loss/norm)"); }
        else if (loss_out) { snprintf(why, sizeof(why), " | skipped (loss z-score %.2f > -sl %g)", zloss, tc->skip_lossz); }
        else if (norm_out) { snprintf(why, sizeof(why), " | skipped (norm above %.4f: z-score > -sg %g)", zs.skip_norm_above, tc->skip_gradz); }
        // elapsed since this run's first step; the ETA at this run's mean step time so far
        double elapsed = (zero_now_ms() - lp->t_start) / 1e3, eta = elapsed / (lp->nsteps + 1) * (t->max_steps - step - 1);
        printf("step %4d/%d | loss %.6f | lr %.2e | norm %.4f | %.1f ms | %.0f tok/s%s | comm wait %.1f ms | %.0f s, ETA %.0f s%s\n",
               step + 1, t->max_steps, loss, lr, after.norm, ms, tps, extra, wait, elapsed, eta, why);
    }
    // llm.c's main.log line, and the whole step as a JSON line (a killed run keeps its history)
    log_line(tc->output_dir, rank, "main.log", "s:%d trl:%.4f lr:%.6f norm:%.2f\n", step, loss, lr, after.norm);
    log_line(tc->output_dir, rank, "main.jsonl", "{\"step\": %d, \"tokens\": %.0f, \"loss\": %.9g, \"lr\": %.9g, \"norm\": %.9g, "
             "\"ms\": %.3f, \"tokens_per_s\": %.1f, \"mfu\": %.6f, \"comm_wait_ms\": %.3f, \"skipped\": %s, "
             "\"skipped_outlier\": %s, \"rss_bytes\": %.0f, \"device_bytes\": %.0f}\n", step, (double)(step + 1) * t->total_batch,
             loss, lr, after.norm, ms, tps, mfu, wait,
             skip ? "true" : "false", outlier ? "true" : "false", kernel_rss_now(), device_bytes);
    lp->steps[lp->nsteps++] = (StepRecord){step, loss, ms, tps, lr, after.norm, wait, mfu, skip, outlier, profiled};
    return lp->skipped_in_a_row > tc->max_skipped_steps;
}

// --profile-ops, after the last step (rank 0): the table, its rows in main.jsonl (lines of
// their own, told apart by "op"), the timeline in -o's ops_trace.json
static void trainer_ops_report(const Trainer* t, const TrainerLoop* lp) {
    const TrainConfig* tc = &t->tc;
    if (lp->ops == NULL || t->rank != 0) { return; }
    if (op_profile_steps(lp->ops) == 0) {
        printf("--profile-ops %d: no step of this run was timed (it stopped before its last %d steps)\n", tc->profile_ops,
               tc->profile_ops);
        return;
    }
    op_profile_print(lp->ops, stdout);
    OpRow rows[128];
    int n = op_profile_rows(lp->ops, rows, 128), last = lp->nsteps > 0 ? lp->steps[lp->nsteps - 1].step : 0;
    for (int i = 0; i < n; i++) {
        const OpRow* r = &rows[i];
        log_line(tc->output_dir, t->rank, "main.jsonl", "{\"step\": %d, \"op\": \"%s\", \"calls\": %.3f, \"ms\": %.6f, "
                 "\"share\": %.6f, \"flops\": %.0f, \"bytes\": %.0f, \"floor_ms\": %.6f}\n", last, r->name, r->calls, r->ms,
                 r->share, r->flops, r->bytes, r->floor_ms);
    }
    if (tc->output_dir == NULL) {
        printf("--profile-ops: no -o, so no timeline (-o DIR writes DIR/ops_trace.json)\n");
        return;
    }
    char path[4200];
    snprintf(path, sizeof(path), "%s/ops_trace.json", tc->output_dir);
    if (op_profile_write_trace(lp->ops, path) != 0) {
        fprintf(stderr, "warning: --profile-ops: %s\n", llmc_errmsg());  // (the table and rows are out: the run goes on)
    } else {
        printf("--profile-ops: the timeline is %s (Chrome's trace format: ui.perfetto.dev opens it)\n", path);
    }
}

// After the last step: the memory peaks over the whole run (gathered again: the working set
// grows during the steps), the kernel's figures, the traffic between and inside nodes
// summed over the ranks, and the report from rank 0.
static void trainer_loop_report(Trainer* t, const TrainerModel* m, TrainerLoop* lp) {
    const TrainConfig* tc = &t->tc;
    int rank = t->rank, world = t->world;
    lp->traffic.steps = lp->nsteps;
    job_doing("writing the report and the memory figures");
    trainer_memory(m, lp->mine);
    memory_gather(lp->mine, lp->mem_all, rank, world, 0, "");
    kernel_steps_end(lp->kernel, lp->nsteps);
    double* kernel_all = (double*)mallocCheck(KERNEL_FIELDS * world * sizeof(double));
    mpiWatched("gather of the kernel's figures", MPI_Gather(lp->kernel, KERNEL_FIELDS, MPI_DOUBLE, kernel_all, KERNEL_FIELDS,
                                                             MPI_DOUBLE, 0, MPI_COMM_WORLD));
    {   // what crossed between nodes and what stayed inside them, summed over the ranks
        ZeroStats now;
        zeroCheck(zero_stats(m->zero, &now));
        double mine_net[2][ZERO_NUM_LINKS][ZERO_NUM_COLLECTIVES];
        for (int l = 0; l < ZERO_NUM_LINKS; l++) {
            for (int k = 0; k < ZERO_NUM_COLLECTIVES; k++) {
                mine_net[0][l][k] = now.link_bytes[l][k];
                mine_net[1][l][k] = now.link_bytes[l][k] - lp->traffic.start.link_bytes[l][k];
            }
        }
        mpiWatched("sum of the network figures", MPI_Reduce(mine_net, lp->traffic.net, 2 * ZERO_NUM_LINKS * ZERO_NUM_COLLECTIVES,
                                                             MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD));
    }
    trainer_ops_report(t, lp);
    if (rank == 0 && tc->report != NULL &&
        trainer_report(t, m, lp->steps, lp->nsteps, lp->vals, lp->nvals, lp->evals, lp->nevals, lp->mem_all, kernel_all, &lp->traffic,
                       lp->flops_per_token, lp->ops) != 0) {
        fprintf(stderr, "error: %s\n", llmc_errmsg());
        trainer_abort();
    }
    free(kernel_all);
}

void trainer_run(Trainer* t, const TrainerModel* m) {
    const TrainConfig* tc = &t->tc;
    TrainerLoop lp;
    trainer_loop_begin(t, m, &lp);
    for (int step = lp.start_step; step <= t->max_steps; step++) {
        if (trainer_boundary(t, m, &lp, step)) { break; }
        if (trainer_train_step(t, m, &lp, step)) { break; }
    }
    int stopped = lp.skipped_in_a_row > tc->max_skipped_steps;
    // a run that trained nothing did not do what it was asked: not a success (a signal's
    // stop is, and -y 1 goes on from its checkpoint)
    int none_trained = !stopped && !lp.signalled && lp.nsteps > 0 && lp.skipped - lp.skipped_before == lp.nsteps;
    trainer_loop_report(t, m, &lp);
    int nsteps = lp.nsteps, skipped_in_a_row = lp.skipped_in_a_row, start_step = lp.start_step;
    int last = nsteps > 0 ? lp.steps[nsteps - 1].step + 1 : start_step;
    free(lp.steps); free(lp.vals); free(lp.evals); free(lp.mem_all);
    op_profile_free(lp.ops);
    tensor_log_free(&lp.tensors);
    if (stopped) {  // every rank saw the same loss and norm: all stop here together
        zeroCheck(zero_flush(m->zero));
        char msg[4400];
        snprintf(msg, sizeof(msg), "stopping at step %d: %d consecutive step%s had a non-finite loss or gradient norm and "
                 "were skipped, more than --max-skipped-steps %d; none of them changed the model%s%s%s", last, skipped_in_a_row,
                 skipped_in_a_row == 1 ? "" : "s",
                 tc->max_skipped_steps, tc->output_dir != NULL ? " (the checkpoints in " : "",
                 tc->output_dir != NULL ? tc->output_dir : "", tc->output_dir != NULL ? " are those of good steps)" : "");
        die_all(t->rank, msg);
    }
    if (none_trained) {
        zeroCheck(zero_flush(m->zero));
        char msg[256], which[96];
        if (nsteps == 1) { snprintf(which, sizeof(which), "the one step of this run (step %d)", last); }
        else { snprintf(which, sizeof(which), "every one of this run's %d steps (steps %d-%d)", nsteps, start_step + 1, last); }
        snprintf(msg, sizeof(msg), "%s had a non-finite loss or gradient norm and was skipped: nothing was trained", which);
        die_all(t->rank, msg);
    }
}
