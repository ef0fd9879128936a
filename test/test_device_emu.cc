/*
 The GPU trainer's device engine (zero3/device.cuh) run on the CPU: its logic, at 1-4
 ranks, without a GPU. Built by the Makefile from a copy of device.cuh whose kernel
 launches go through emu_launch, against test/emu's CUDA runtime (host memory, every call
 done at once) and NCCL (MPI collectives).
 What it checks is what a GPU with one rank cannot: the shard offsets of reduce-scatters
 and all-gathers at N > 1, the pools and their simulation-sized counts, persistence,
 prefetch and the live budget at stage 3, gradient accumulation, the offload hand-offs
 (gradient shards out, updated shards in) and --dpu's one-step delay, the norm and
 clipping on the "GPU", the master gathered for checkpoints, and a resume from the state a
 checkpoint holds. What it cannot check:
 the ordering between streams (everything here runs in call order). Its AdamW launchers
 are computed directly (test/emu/engine); the real kernels are checked, emulated, by
 build/test_kernels2_emu.

 The model is GPT-2's units, tensors and schedules (llmc/trainer.h's gpt2_engine_spec)
 at a tiny size. Each micro-step walks the training schedule as the GPU trainer does,
 and the backward adds a gradient that depends on the parameters fetched, the rank and
 the micro-step. Every rank computes the whole run itself in plain fp32 (AdamW from
 llmc/adamw.h) and compares: the parameters every fetch hands out (bit for bit before
 the first update), the norm, and the master at the end.

 usage: test_device_emu -z stage [-o 1 (offload cpu)] [-p 1 (dpu)] [-a micro-steps]
        [-n steps] [-f prefetch] [-t persistence threshold] [-l max live] [-c clip]
        [-r K (checkpoint after K steps, resumed into a new engine)]
 prints "PASS ..." / "FAIL ..." lines; exit 1 on any failure.
*/
#define EMU_DEFINE_GLOBALS    // test/emu/cuda_runtime.h's globals live here
#include <stdio.h>            // printf
#include <stdlib.h>           // atoi, atof
#include <string.h>           // strcmp
#include <math.h>             // fabs, sin
#include <mpi.h>              // MPI_Init, the ranks
#include <vector>             // the reference's arrays
#include "llmc/trainer.h"     // gpt2_engine_spec: GPT-2's units, tensors and schedules
#include "zero3/device.cuh"   // the device engine (the launch-rewritten copy: see the Makefile)


static int rank_ = 0, world_ = 1, failures = 0;

static void check(const char* what, int ok, const char* fmt, double a, double b) {
    if (!ok) { failures++; }
    if (!ok || rank_ == 0) {
        printf("%s rank %d: %s (", ok ? "PASS" : "FAIL", rank_, what);
        printf(fmt, a, b);
        printf(")\n");
    }
}

// the backward's gradient for element i of unit u: positive and well away from zero (so
// AdamW's m / sqrt(v) is well conditioned and the comparison's tolerance small), depending
// on the parameter fetched, the rank and the micro-step
static float grad_of(float p, int u, size_t i, int rank, int micro) {
    return 0.05f + 0.01f * (float)((i * 7 + (size_t)u * 13 + (size_t)rank * 5 + (size_t)micro * 3) % 17) + 0.1f * p;
}
// the embedding's second contribution (the encoder's backward: no parameters)
static float grad_enc(size_t i, int rank) { return 0.001f * (float)((i + (size_t)rank) % 5); }

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_);
    int stage = 0, offload = 0, dpu = 0, accum = 1, steps = 3, prefetch = 2, resume_at = -1;
    long long persistence = 100, max_live = 1000000000LL;
    float clip = 1.0f;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "-z") == 0) { stage = atoi(argv[i + 1]); }
        else if (strcmp(argv[i], "-o") == 0) { offload = atoi(argv[i + 1]); }
        else if (strcmp(argv[i], "-p") == 0) { dpu = atoi(argv[i + 1]); }
        else if (strcmp(argv[i], "-a") == 0) { accum = atoi(argv[i + 1]); }
        else if (strcmp(argv[i], "-n") == 0) { steps = atoi(argv[i + 1]); }
        else if (strcmp(argv[i], "-f") == 0) { prefetch = atoi(argv[i + 1]); }
        else if (strcmp(argv[i], "-t") == 0) { persistence = atoll(argv[i + 1]); }
        else if (strcmp(argv[i], "-l") == 0) { max_live = atoll(argv[i + 1]); }
        else if (strcmp(argv[i], "-c") == 0) { clip = (float)atof(argv[i + 1]); }
        else if (strcmp(argv[i], "-r") == 0) { resume_at = atoi(argv[i + 1]); }
        else { fprintf(stderr, "test_device_emu: unknown flag %s\n", argv[i]); MPI_Abort(MPI_COMM_WORLD, 2); }
    }

    // GPT-2 at a tiny size: units of 960, 1884 (x2) and 24 elements, odd shards at 3 ranks
    GPT2Config c = {16, 61, 64, 2, 2, 12};
    GPT2EngineSpec sp;
    gpt2_engine_spec(&c, &sp);
    int nu = sp.num_units;
    std::vector<size_t> unit_start(nu + 1, 0);
    for (int u = 0; u < nu; u++) { unit_start[u + 1] = unit_start[u] + sp.unit_numel[u]; }
    size_t total = unit_start[nu];
    std::vector<float> init(total);
    for (size_t i = 0; i < total; i++) { init[i] = 0.1f * (float)sin(0.37 * (double)i + 1.0); }
    std::vector<float> decay(total, 0.0f);  // the weight decay of each element's tensor
    const float lr = 1e-3f, wd = 0.1f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
    for (int k = 0; k < sp.num_tensors; k++) {
        const ZeroTensor* tr = &sp.tensors[k];
        for (size_t j = 0; j < tr->size; j++) { decay[unit_start[tr->unit] + tr->offset + j] = tr->decay ? wd : 0.0f; }
    }

    ZeroConfig zc;
    zero_config_defaults(&zc);
    zc.stage = stage;
    zc.offload_optimizer = offload ? ZERO_OFFLOAD_CPU : ZERO_OFFLOAD_NONE;
    zc.prefetch_depth = prefetch;
    zc.param_persistence_threshold = persistence;
    zc.max_live_parameters = max_live;
    ZeroDev d;
    auto engine_init = [&](ZeroDev* e, const float* params) {
        if (zero_dev_init(e, &zc, sp.unit_numel, nu, sp.tensors, sp.num_tensors, sp.train, sp.train_len, sp.fwd, sp.fwd_len,
                          rank_ == 0 ? params : NULL, NULL, beta1, beta2, eps, dpu, 1) != 0) {
            fprintf(stderr, "FAIL rank %d: zero_dev_init: %s\n", rank_, llmc_errmsg());
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    };
    engine_init(&d, init.data());

    // the reference: P[j], the parameters after j updates; the model sees P[k] at step k,
    // or P[max(k - 1, 0)] with dpu
    std::vector<std::vector<float>> P(1, init);
    std::vector<float> rm(total, 0.0f), rv(total, 0.0f);
    double max_fetch_err = 0.0, max_first_err = 0.0;
    std::vector<float> grad(total);

    // one pass (train or forward) as the GPU trainer walks it; vis: what fetches must give
    auto run_pass = [&](int train, int micro, int last_micro, const std::vector<float>& vis, int first) -> int {
        if (zero_dev_begin(&d, train ? ZERO_PASS_TRAIN : ZERO_PASS_FORWARD) != 0) { return -1; }
        d.last_micro = last_micro;
        int len = train ? sp.train_len : sp.fwd_len;
        const int* sched = train ? sp.train : sp.fwd;
        int fwd_len = sp.fwd_len;  // the training schedule's forward part is the forward schedule
        floatX* emb_grad = NULL;
        for (int k = 0; k < len; k++) {
            int u = sched[k];
            floatX* p = NULL;
            if (zero_dev_fetch(&d, u, &p) != 0) { return -1; }
            for (size_t i = 0; i < sp.unit_numel[u]; i++) {
                double e = fabs((double)p[i] - (double)vis[unit_start[u] + i]);
                if (e > max_fetch_err) { max_fetch_err = e; }
                if (first && e > max_first_err) { max_first_err = e; }
            }
            if (train && k >= fwd_len) {  // the backward's use of u: its gradient
                floatX* g = NULL;
                if (zero_dev_grad(&d, u, &g) != 0) { return -1; }
                for (size_t i = 0; i < sp.unit_numel[u]; i++) { g[i] += grad_of(p[i], u, i, rank_, micro); }
                if (u == 0) { emb_grad = g; }
            }
            if (zero_dev_release(&d, u) != 0) { return -1; }
            if (train && k >= fwd_len && u != 0 && zero_dev_reduce(&d, u) != 0) { return -1; }
        }
        if (train) {  // the encoder's backward: unit 0's gradient again, no fetch, then its reduction
            floatX* g = NULL;
            if (zero_dev_grad(&d, 0, &g) != 0) { return -1; }
            if (g != emb_grad) { llmc_error("unit 0's gradient buffer moved while open"); return -1; }
            for (size_t i = 0; i < sp.unit_numel[0]; i++) { g[i] += grad_enc(i, rank_); }
            if (zero_dev_reduce(&d, 0) != 0) { return -1; }
        }
        return zero_dev_end(&d);
    };

    double max_norm_err = 0.0;
    int floor = 0;  // dpu: the last update applied at once (a checkpoint flushes the pending one)
    for (int step = 0; step < steps; step++) {
        if (step == resume_at) {
            // a checkpoint as the trainer writes one (the pending update applied, then the
            // fp32 master, the moments and the compute copy of this rank), read back into a
            // new engine made from other parameters, which carries on in the old one's place
            if (zero_dev_flush(&d) != 0) { fprintf(stderr, "FAIL rank %d: %s\n", rank_, llmc_errmsg()); MPI_Abort(MPI_COMM_WORLD, 1); }
            floor = step;
            std::vector<float> other(total, 0.25f);
            ZeroDev e;
            engine_init(&e, other.data());
            size_t np = 0, np2 = 0;
            const floatX* ps = zero_dev_param_state(&d, &np);
            floatX* ps2 = zero_dev_param_state(&e, &np2);
            if (np != np2 || e.opt_elems != d.opt_elems) { check("checkpoint sizes agree", 0, "%g vs %g", (double)np, (double)np2); }
            memcpy(e.master, d.master, d.opt_elems * sizeof(float));
            memcpy(e.m, d.m, d.opt_elems * sizeof(float));
            memcpy(e.v, d.v, d.opt_elems * sizeof(float));
            memcpy(ps2, ps, np * sizeof(floatX));
            if (zero_dev_after_load(&e) != 0) { fprintf(stderr, "FAIL rank %d: %s\n", rank_, llmc_errmsg()); MPI_Abort(MPI_COMM_WORLD, 1); }
            zero_dev_free(&d);
            d = e;  // (nothing points into the struct between steps)
        }
        const std::vector<float>& vis = P[dpu ? (step - 1 > floor ? step - 1 : floor) : step];
        // a forward alone first (validation's), then the micro-steps
        if (run_pass(0, 0, 1, vis, step == 0) != 0) { fprintf(stderr, "FAIL rank %d: %s\n", rank_, llmc_errmsg()); MPI_Abort(MPI_COMM_WORLD, 1); }
        long calls0 = d.nccl.calls[ZERO_ALLREDUCE] + d.nccl.calls[ZERO_REDUCE_SCATTER];
        for (int micro = 0; micro < accum; micro++) {
            if (run_pass(1, micro, micro == accum - 1, vis, step == 0) != 0) {
                fprintf(stderr, "FAIL rank %d: step %d: %s\n", rank_, step, llmc_errmsg());
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        }
        // one reduction per unit and step at stages 0-1 (on the last micro-step; none at
        // stage 0 on one rank), per unit and micro-step at stages 2-3
        long reductions = d.nccl.calls[ZERO_ALLREDUCE] + d.nccl.calls[ZERO_REDUCE_SCATTER] - calls0;
        long expect = stage == 0 && world_ == 1 ? 0 : stage <= 1 ? nu : (long)nu * accum;
        if (reductions != expect) { check("reductions per step", 0, "%g, expected %g", (double)reductions, (double)expect); }
        if (zero_dev_step(&d, lr, wd, clip, step + 1, 1234u) != 0) {
            fprintf(stderr, "FAIL rank %d: zero_dev_step: %s\n", rank_, llmc_errmsg());
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        // the reference step: the gradient summed over ranks and micro-steps at vis
        for (int u = 0; u < nu; u++) {
            for (size_t i = 0; i < sp.unit_numel[u]; i++) {
                float s = 0.0f;
                for (int r = 0; r < world_; r++) {
                    for (int micro = 0; micro < accum; micro++) {
                        s += grad_of(vis[unit_start[u] + i], u, i, r, micro) + (u == 0 ? grad_enc(i, r) : 0.0f);
                    }
                }
                grad[unit_start[u] + i] = s;
            }
        }
        double sumsq = 0.0;
        for (size_t i = 0; i < total; i++) { sumsq += (double)grad[i] * grad[i]; }
        float norm = 0.0f;
        float scale = adamw_grad_scale(sumsq, world_, clip, &norm);
        float bc1 = (float)(1.0 - pow((double)beta1, step + 1));
        float bc2 = (float)(1.0 - pow((double)beta2, step + 1));
        std::vector<float> next = P.back();
        for (size_t i = 0; i < total; i++) {
            next[i] = adamw_param_step(next[i], grad[i] * scale, &rm[i], &rv[i], lr, beta1, beta2, eps, decay[i], bc1, bc2);
        }
        P.push_back(next);
        double wait = -1.0;  // (zero_dev_wait_ms synchronizes the compute stream, as the trainer does before reading the norm)
        if (zero_dev_wait_ms(&d, &wait) != 0 || !(wait >= 0.0)) {
            check("zero_dev_wait_ms answers", 0, "%g ms %g", wait, 0.0);
        }
        double ne = fabs((double)zero_dev_norm(&d) - norm) / norm;
        if (ne > max_norm_err) { max_norm_err = ne; }
    }
    // the end of training: a pending --dpu update applied, then a forward sees the last parameters
    if (zero_dev_flush(&d) != 0 || run_pass(0, 0, 1, P.back(), 0) != 0) {
        fprintf(stderr, "FAIL rank %d: the last forward: %s\n", rank_, llmc_errmsg());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }

    // fetches: exact before any update; within fp32 reordering after (sums over ranks and
    // micro-steps in another order; offload's SIMD AdamW within a few ulps of the scalar one)
    check("first step's fetches equal the initial parameters", max_first_err == 0.0, "max err %g, tol %g", max_first_err, 0.0);
    check("every fetch equals the reference parameters", max_fetch_err <= 2e-6, "max err %g, tol %g", max_fetch_err, 2e-6);
    check("norm of the mean gradient", max_norm_err <= 1e-5, "max rel err %g, tol %g", max_norm_err, 1e-5);

    // the master, gathered as a checkpoint does
    std::vector<float> master(total, 0.0f);
    if (zero_dev_master_gather(&d, rank_ == 0 ? master.data() : NULL) != 0) {
        fprintf(stderr, "FAIL rank %d: zero_dev_master_gather: %s\n", rank_, llmc_errmsg());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (rank_ == 0) {
        double e = 0.0;
        for (size_t i = 0; i < total; i++) { e = fmax(e, fabs((double)master[i] - P.back()[i])); }
        check("gathered master equals the reference", e <= 2e-6, "max err %g, tol %g", e, 2e-6);
    }

    // a use out of schedule is refused with a message, not followed
    {
        floatX* p = NULL;
        int bad_unit = sp.fwd[0] == 1 ? 2 : 1;
        int rc = zero_dev_begin(&d, ZERO_PASS_FORWARD) == 0 ? zero_dev_fetch(&d, bad_unit, &p) : 0;
        check("fetch out of schedule refused", rc != 0 && strstr(llmc_errmsg(), "schedule") != NULL, "rc %g %g", (double)rc, 0.0);
    }

    zero_dev_free(&d);
    gpt2_engine_spec_free(&sp);
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank_ == 0) {
        printf("%s: stage %d offload %d dpu %d accum %d ranks %d prefetch %d persistence %lld max_live %lld clip %g resume %d\n",
               all == 0 ? "ok" : "FAILED", stage, offload, dpu, accum, world_, prefetch, persistence, max_live, clip, resume_at);
    }
    MPI_Finalize();
    return all == 0 ? 0 : 1;
}
