/*
 The GPU trainer's device engine (zero3/device.cuh) run on the CPU: its logic, at 1-4
 ranks, without a GPU, through the engine interface (zero3/zero.h) as the trainer calls
 it. Built by the Makefile from a copy of device.cuh whose kernel launches go through
 emu_launch, against test/emu's CUDA runtime (streams run out of order by a seeded
 scheduler, every access race-checked: see test/emu/emu_device.h) and NCCL (MPI
 collectives as stream operations).
 What it checks is what a GPU with one rank cannot: the shard offsets of reduce-scatters
 and all-gathers at N > 1, the pools and their simulation-sized counts, persistence,
 prefetch and the live budget at stage 3, gradient accumulation, the offload hand-offs
 (gradient shards out, updated shards in) and --dpu's one-step delay, the norm and
 clipping on the "GPU", the master gathered for checkpoints, and a resume from the state a
 checkpoint holds (zero_save into a file, zero_load into a new engine), and, through the
 emulator's race checker, the engine's events between its compute, NCCL and copy streams
 (the test's own "kernels" are work on the compute stream). Its AdamW
 launchers are computed directly (test/emu/adamw_host.cuh, included below in place of
 zero3/adamw.cuh); the real kernels are checked, emulated, by build/test_kernels2_emu.
 Every unit's parameters and gradient are handed out on 256 bytes (zero3/plan.h), whatever
 the stage and world size: cuBLASLt then sees a tensor at the same alignment at every stage.

 The model is GPT-2's units, tensors and schedules (llmc/trainer.h's gpt2_engine_model)
 at a tiny size. Each micro-step walks the training schedule as the GPU trainer does,
 and the backward adds a gradient that depends on the parameters fetched, the rank and
 the micro-step. Every rank computes the whole run itself in plain fp32 (AdamW from
 zero3/adamw.h) and compares: the parameters every fetch hands out (bit for bit before
 the first update), the norm, and the master at the end. And at every step, the reduced
 gradients the engine holds before its update (this rank's shards, or the whole gradient
 at stage 0; on the GPU, in the host's accumulators, or in the swap file's gradient
 region) against the sum over ranks and micro-steps of what each rank's backward left
 in its gradient buffers at each reduction, summed exactly (in double).

 Built twice: in fp32 (build/test_device_emu, -DENABLE_FP32) and in bf16
 (build/test_device_emu_bf16), whose gradients are bf16 and which can reduce them in bf16
 or in fp32 (-m). Sums of a few bf16 values of the sizes here are exact in fp32, so with
 fp32 reductions the reduced gradients must equal the exact sum bit for bit, whatever the
 number of ranks and the order of the sums; bf16 reductions round (NCCL after every hop of
 its ring), within world x 2^-8 of the sum of magnitudes.

 Beyond one node (stage 3): -R n takes n consecutive ranks as a node; MiCS (-M S) and hpZ
 (-H P) must match plain ZeRO-3 as closely as ever (the reference is the same), and keep
 their traffic where they promise (checked on the engine's link counters); qwZ (-W 1) and
 qgZ (-G 1) within bounds derived from the int8 blocks' error (a scale per 256 values, so
 off by at most max|x| / 254 per value and hop: see the tolerances below), and shown to be
 inexact (so quantised), with qgZ's inter-node bytes in the ratio its two hops send.

 usage: test_device_emu -z stage [-o 1 (offload cpu) | 2 (and the parameters: stage 3) | 3 (both to NVMe, under
        $TMPDIR: every shard in the swap file) | 4 (the optimizer to NVMe, the parameters to the CPU)]
        [-p 1 (dpu)] [-a micro-steps]
        [-n steps] [-f prefetch] [-t persistence threshold] [-l max live] [-c clip]
        [-r K (checkpoint after K steps, resumed into a new engine)]
        [-m fp32|bf16 (--communication-data-type; default the model's)] [-k 0 (the host never
        synchronizes between steps: no norm read, no check of the reduced gradients)]
        [-R ranks per node] [-M mics shard size] [-H hpz partition size] [-W 1 (qwZ)] [-G 1 (qgZ)]
        [-L layers (default 2; more: staging rings that wrap inside a pass)]
 prints "PASS ..." / "FAIL ..." lines; exit 1 on any failure.
*/
#define EMU_DEFINE_GLOBALS    // test/emu/cuda_runtime.h's globals live here
#include <stdio.h>            // printf
#include <stdlib.h>           // atoi, atof
#include <string.h>           // strcmp
#include <math.h>             // fabs, sin
#include <stdint.h>           // uintptr_t: where the units are handed out
#include <mpi.h>              // MPI_Init, the ranks
#include <vector>             // the reference's arrays
#include "llmc/trainer.h"     // gpt2_engine_model: GPT-2's units, tensors and schedules
// The stand-in for zero3/adamw.cuh, first: it defines that header's guard, so device.cuh's
// own include of zero3/adamw.cuh adds nothing and the engine calls these launchers.
#include "adamw_host.cuh"     // test/emu/adamw_host.cuh
#include "zero3/device.cuh"   // the device engine (the launch-rewritten copy: see the Makefile)


static int rank_ = 0, world_ = 1, failures = 0;

// tolerances of the checks against the fp32 reference. bf16: the compute copy rounds the
// master to 8 significant bits (the parameters here are at most 0.1: 2e-4), the gradients
// the backward adds are rounded to bf16 in their buffers (2^-9 relative), which moves the
// norm by up to 2^-8 and, through AdamW's m / sqrt(v), the master by a few lr * 2^-8
#if defined(ENABLE_FP32)
static const double TOL_FIRST = 0.0, TOL_FETCH = 2e-6, TOL_NORM = 1e-5, TOL_MASTER = 2e-6;
#else
static const double TOL_FIRST = 2.44140625e-4, TOL_FETCH = 4e-4, TOL_NORM = 2e-3, TOL_MASTER = 1e-5;  // 2^-12: half a bf16 ulp under 0.125
#endif

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

// the engine's ZeroFillFn over a whole model the test holds on every rank (unit order)
struct WholeModel { const float* params; const size_t* unit_start; };
static int fill_from_whole(void* ctx, int u, size_t begin, size_t n, float* out) {
    const WholeModel* w = (const WholeModel*)ctx;
    memcpy(out, w->params + w->unit_start[u] + begin, n * sizeof(float));
    return 0;
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_);
    int stage = 0, offload = 0, dpu = 0, accum = 1, steps = 3, prefetch = 2, resume_at = -1, host_sync = 1;
    ZeroCommDtype comm = ZERO_COMM_MODEL;
    long long persistence = 100, max_live = 1000000000LL;
    int per_node = 0, mics = -1, hpz = 1, qw = 0, qg = 0, layers = 2, param_buffers = 0;
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
        else if (strcmp(argv[i], "-k") == 0) { host_sync = atoi(argv[i + 1]); }
        else if (strcmp(argv[i], "-R") == 0) { per_node = atoi(argv[i + 1]); }
        else if (strcmp(argv[i], "-M") == 0) { mics = atoi(argv[i + 1]); }
        else if (strcmp(argv[i], "-H") == 0) { hpz = atoi(argv[i + 1]); }
        else if (strcmp(argv[i], "-W") == 0) { qw = atoi(argv[i + 1]); }
        else if (strcmp(argv[i], "-G") == 0) { qg = atoi(argv[i + 1]); }
        else if (strcmp(argv[i], "-m") == 0) {
            if (zero_parse_comm_dtype("-m", argv[i + 1], &comm) != 0) { fprintf(stderr, "%s\n", zero_errmsg()); MPI_Abort(MPI_COMM_WORLD, 2); }
        }
        else if (strcmp(argv[i], "-L") == 0) { layers = atoi(argv[i + 1]); }
        else if (strcmp(argv[i], "-B") == 0) { param_buffers = atoi(argv[i + 1]); }
        else { fprintf(stderr, "test_device_emu: unknown flag %s\n", argv[i]); MPI_Abort(MPI_COMM_WORLD, 2); }
    }

    // GPT-2 at a tiny size: units of 960, 1884 (x2, or x -L) and 24 elements, odd shards at 3 ranks
    GPT2Config c = {16, 61, 64, layers, 2, 12};
    ZeroModel sp;
    gpt2_engine_model(&c, &sp);
    int nu = sp.num_units;
    const int* train_uses = sp.uses[ZERO_PASS_TRAIN];
    const int* fwd_uses = sp.uses[ZERO_PASS_FORWARD];
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

    // the model's stream, created as the trainer creates its own (blocking)
    cudaStream_t compute;
    cudaStreamCreate(&compute);

    ZeroConfig zc;
    zero_config_defaults(&zc);
    zc.stage = stage;
    zc.offload_optimizer = offload >= 3 ? ZERO_OFFLOAD_NVME : offload ? ZERO_OFFLOAD_CPU : ZERO_OFFLOAD_NONE;
    zc.offload_param = offload == 3 ? ZERO_OFFLOAD_NVME : offload == 2 || offload == 4 ? ZERO_OFFLOAD_CPU : ZERO_OFFLOAD_NONE;
    if (offload >= 3) {  // every parameter shard in the swap file (the persistent units' stay cached)
        snprintf(zc.nvme_path, sizeof(zc.nvme_path), "%s", getenv("TMPDIR") != NULL ? getenv("TMPDIR") : "/tmp");
        zc.max_in_cpu = 0;
        if (param_buffers > 0) { zc.param_buffer_count = param_buffers; }
    }
    zc.prefetch_depth = prefetch;
    zc.param_persistence_threshold = persistence;
    zc.max_live_parameters = max_live;
    zc.comm_dtype = comm;
    zc.ranks_per_node = per_node;
    zc.mics_shard_size = mics;
    zc.hpz_partition_size = hpz;
    zc.quantized_weights = qw;
    zc.quantized_gradients = qg;
    // The tolerances with quantised collectives. qwZ: a fetched value is off by at most
    // max|x| / 254 of its block (the parameters here stay under 0.106 in magnitude), plus
    // fp32's rounding of the product. Its gradients (0.1 x the parameter) move by 4e-5
    // against the reference's and qgZ's reduced sums by up to ~1% (below): through AdamW
    // (m / sqrt(v), lr 1e-3) the master by well under 1e-4 over these few steps, the norm
    // by under 1%. A wrong block or scale is off by the values themselves (~0.05 to 0.1).
    double tol_first = TOL_FIRST, tol_fetch = TOL_FETCH, tol_norm = TOL_NORM, tol_master = TOL_MASTER;
    // (bf16: the dequantised value rounded to bf16 once more, another TOL_FIRST)
    if (qw) { tol_first += TOL_FIRST + 0.106 / 254.0 * (1.0 + 1e-6); tol_fetch += TOL_FIRST + 0.106 / 254.0 * (1.0 + 1e-6); }
    if (qw || qg) { tol_fetch += 1e-4; tol_norm = 1e-2; tol_master = 1e-4; }
    Zero* z = NULL;
    auto engine_init = [&](Zero** e, const float* params) {
        ZeroInit in;
        memset(&in, 0, sizeof(in));
        in.cfg = &zc;
        in.model = &sp;
        WholeModel whole = {params, unit_start.data()};  // each rank's engine takes its shards of it
        in.fill = fill_from_whole;
        in.fill_ctx = &whole;
        in.beta1 = beta1; in.beta2 = beta2; in.eps = eps;
        in.comm = MPI_COMM_WORLD;
        in.stream = compute;
        in.dpu = dpu;
        in.threads = 1;
        in.param_bytes = sizeof(floatX);
        if (zero_dev_create(e, &in) != 0) {
            fprintf(stderr, "FAIL rank %d: zero_dev_create: %s\n", rank_, zero_errmsg());
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    };
    auto fail = [&](const char* what) {
        fprintf(stderr, "FAIL rank %d: %s: %s\n", rank_, what, zero_errmsg());
        MPI_Abort(MPI_COMM_WORLD, 1);
    };
    // an engine object of one precision (zero3/device.cu is built once per floatX) refuses
    // a trainer of the other, naming both, before it touches the GPU or the ranks
    {
        ZeroInit in;
        memset(&in, 0, sizeof(in));
        in.cfg = &zc;
        in.model = &sp;
        in.comm = MPI_COMM_WORLD;
        in.stream = compute;
        in.param_bytes = sizeof(floatX) == 2 ? 4 : 2;
        Zero* wrong = NULL;
        int rc = zero_dev_create(&wrong, &in);
        check("a trainer of the other precision refused, naming it", rc != 0 && wrong == NULL &&
              strstr(zero_errmsg(), "the trainer's are") != NULL && strstr(zero_errmsg(), PRECISION_MODE) != NULL,
              "rc %g %g", (double)rc, 0.0);
    }
    engine_init(&z, init.data());

    // the reference: P[j], the parameters after j updates; the model sees P[k] at step k,
    // or P[max(k - 1, 0)] with dpu
    std::vector<std::vector<float>> P(1, init);
    std::vector<float> rm(total, 0.0f), rv(total, 0.0f);
    double max_fetch_err = 0.0, max_first_err = 0.0;
    // units handed out off a 256-byte boundary (parameters or gradients): cuBLASLt would see
    // their tensors at other alignments than at another stage (zero3/plan.h)
    long off_boundary = 0, handed_out = 0;
    std::vector<float> grad(total);
    // what this rank's gradient buffers held at each reduction, summed over the step's
    // micro-steps in double (exact), unit-major like the parameters; and the magnitudes
    std::vector<double> red_mine(2 * total, 0.0);
    // (work on the compute stream: it reads the gradient buffer on the "GPU")
    auto note_reduced = [&](int u, const floatX* g) {
        size_t numel = sp.unit_numel[u], at = unit_start[u];
        emu_stream_work(compute, "the test's note of a reduction's input", [=, &red_mine]() {
            for (size_t i = 0; i < numel; i++) {
                red_mine[at + i] += (double)to_float(g[i]);
                red_mine[total + at + i] += fabs((double)to_float(g[i]));
            }
        });
    };

    // one pass (train or forward) as the GPU trainer walks it; vis: what fetches must give
    auto run_pass = [&](int train, int micro, int last_micro, const std::vector<float>& vis, int first) -> int {
        if (zero_begin(z, train ? ZERO_PASS_TRAIN : ZERO_PASS_FORWARD, last_micro) != 0) { return -1; }
        int len = sp.num_uses[train ? ZERO_PASS_TRAIN : ZERO_PASS_FORWARD];
        const int* sched = train ? train_uses : fwd_uses;
        int fwd_len = sp.num_uses[ZERO_PASS_FORWARD];  // the training schedule's forward part is the forward schedule
        floatX* emb_grad = NULL;
        for (int k = 0; k < len; k++) {
            int u = sched[k];
            void* pv = NULL;
            if (zero_fetch(z, u, &pv) != 0) { return -1; }
            off_boundary += (uintptr_t)pv % 256 != 0;
            handed_out++;
            // the layer's "kernels": work on the compute stream, as the trainer's are
            const floatX* p = (const floatX*)pv;
            const float* want = vis.data() + unit_start[u];
            size_t numel = sp.unit_numel[u];
            emu_stream_work(compute, "the test's forward of a unit", [=, &max_fetch_err, &max_first_err]() {
                for (size_t i = 0; i < numel; i++) {
                    double e = fabs((double)p[i] - (double)want[i]);
                    if (e > max_fetch_err) { max_fetch_err = e; }
                    if (first && e > max_first_err) { max_first_err = e; }
                }
            });
            floatX* g = NULL;
            if (train && k >= fwd_len) {  // the backward's use of u: its gradient
                void* gv = NULL;
                if (zero_grad(z, u, &gv) != 0) { return -1; }
                off_boundary += (uintptr_t)gv % 256 != 0;
                handed_out++;
                g = (floatX*)gv;
                int r = rank_;
                emu_stream_work(compute, "the test's backward of a unit", [=]() {
                    for (size_t i = 0; i < numel; i++) { g[i] = (floatX)(to_float(g[i]) + grad_of(p[i], u, i, r, micro)); }
                });
                if (u == 0) { emb_grad = g; }
            }
            if (zero_release(z, u) != 0) { return -1; }
            if (train && k >= fwd_len && u != 0) {
                if (stage >= 2 || last_micro) { note_reduced(u, g); }  // what this reduction reduces
                if (zero_reduce(z, u) != 0) { return -1; }
            }
        }
        if (train) {  // the encoder's backward: unit 0's gradient again, no fetch, then its reduction
            void* gv = NULL;
            if (zero_grad(z, 0, &gv) != 0) { return -1; }
            floatX* g = (floatX*)gv;
            if (g != emb_grad) { zero_error("unit 0's gradient buffer moved while open"); return -1; }
            size_t numel = sp.unit_numel[0];
            int r = rank_;
            emu_stream_work(compute, "the test's encoder backward", [=]() {
                for (size_t i = 0; i < numel; i++) { g[i] = (floatX)(to_float(g[i]) + grad_enc(i, r)); }
            });
            if (stage >= 2 || last_micro) { note_reduced(0, g); }
            if (zero_reduce(z, 0) != 0) { return -1; }
        }
        return zero_end(z);
    };
    // The reduced gradients the engine holds before its step against the exact sum over ranks
    // of red_mine: this rank's shard of each unit at stages 1-3 (fp32 or bf16 shards, fp32
    // accumulators), the whole gradient at stage 0. Returns the largest error; *tol_out the
    // bound it must stay within: 0 where every partial sum is exact in the type reduced in
    // (bf16 values reduced in fp32), fp32's rounding of each sum and accumulation where the
    // gradients are fp32, bf16's after each of up to world hops otherwise.
    double max_red_err = 0.0, max_red_excess = 0.0;
    int red_checked = 0;  // (-k 0 never checks them)
    auto check_reduced = [&](void) {
        const ZeroDev* d = (const ZeroDev*)zero_engine_state(z);
        if (cudaDeviceSynchronize() != cudaSuccess) { fail("cudaDeviceSynchronize"); }  // (the notes taken)
        // parameter offload: the shards sent are added into the host's accumulators first
        if (d->grads_host && zero_dev_slots_drain((ZeroDev*)d) != 0) { fail("zero_dev_slots_drain"); }
        // the optimizer on NVMe: the sums are in the swap file's gradient region (read once
        // --dpu's update of the step before, which streams the same file, is over)
        std::vector<float> gfile(d->opt_nvme ? d->plan.shard_total : 0);
        if (d->opt_nvme && zero_dev_update_join((ZeroDev*)d) != 0) { fail("zero_dev_update_join"); }
        for (int u = 0; d->opt_nvme && u < nu; u++) {
            const ZeroUnit* pu = &d->plan.units[u];
            if (zero_swap_state_read((ZeroSwap*)&d->swap, ZERO_SWAP_G, u, 0, pu->shard, gfile.data() + pu->shard_offset) != 0) {
                fail("reading the swap file's gradient region");
            }
        }
        red_checked = 1;
        std::vector<double> all(red_mine.size());
        MPI_Allreduce(red_mine.data(), all.data(), (int)all.size(), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        // (the engine's buffers read on the "GPU", after the synchronisation above)
        emu_stream_work(compute, "the test's check of the reduced gradients", [&]() {
            int exact = sizeof(floatX) == 2 && comm == ZERO_COMM_FP32 && !qg;  // what was asked, whatever the engine did
            double rel = sizeof(floatX) == 4 ? (double)(world_ * accum + 1) * 5.96e-8 : (double)world_ / 256.0;
            for (int u = 0; u < nu; u++) {
                const ZeroUnit* pu = &d->plan.units[u];
                // qgZ: each hop's senders each off by max|x| / 254 of their block; at most
                // world + 1 senders over the two hops, each block's max at most the unit's
                // largest sum of magnitudes (sm)
                double sm = 0.0;
                for (size_t i = 0; qg && i < pu->numel; i++) { sm = fmax(sm, all[total + unit_start[u] + i]); }
                double qtol = qg ? (double)(world_ + 1) * sm / 254.0 : 0.0;
                size_t lo = stage == 0 ? 0 : (size_t)d->rank * pu->shard, hi = stage == 0 ? pu->numel : lo + pu->shard;
                for (size_t i = lo; i < hi && i < pu->numel; i++) {
                    double got;
                    size_t sh = pu->shard_offset + (i - lo), full = pu->full_offset + i;
                    if (stage >= 2) { got = d->opt_nvme ? gfile[sh] : d->grads_host ? ((const float*)d->h_grads)[sh] : d->acc[sh]; }
                    else if (stage == 1) { got = d->comm32 ? (double)d->gshard32[sh] : (double)to_float(d->gshard[sh]); }
                    else { got = d->comm32 ? (double)d->grads32[full] : (double)to_float(d->grads[full]); }
                    double want = all[unit_start[u] + i], tol = exact ? 0.0 : rel * all[total + unit_start[u] + i] + qtol;
                    double e = fabs(got - want);
                    if (e > max_red_err) { max_red_err = e; }
                    if (e - tol > max_red_excess) { max_red_excess = e - tol; }
                }
            }
        });
        cudaStreamSynchronize(compute);
        std::fill(red_mine.begin(), red_mine.end(), 0.0);
    };
    // the reductions the device engine has issued so far (its NCCL calls)
    auto reductions_so_far = [&]() -> long {
        const ZeroDev* d = (const ZeroDev*)zero_engine_state(z);
        return d->nccl.calls[ZERO_ALLREDUCE] + d->nccl.calls[ZERO_REDUCE_SCATTER];
    };

    // the tensor the last step's gradient is changed in: unit 1's largest
    int th = 0;
    for (int k = 0; k < sp.num_tensors; k++) {
        if (sp.tensors[k].unit == 1 && (sp.tensors[th].unit != 1 || sp.tensors[k].size > sp.tensors[th].size)) { th = k; }
    }
    double max_norm_err = 0.0;
    int floor = 0;  // dpu: the last update applied at once (a checkpoint flushes the pending one)
    for (int step = 0; step < steps; step++) {
        if (step == resume_at) {
            // a checkpoint as the trainer writes one (the engine's zero_save: the pending
            // update applied, then the fp32 master, the moments and the compute copy of this
            // rank), read back into a new engine made from other parameters, which carries on
            // in the old one's place
            FILE* fp = tmpfile();
            if (fp == NULL || zero_save(z, fp) != 0) { fail("zero_save"); }
            floor = step;
            std::vector<float> other(total, 0.25f);
            Zero* e = NULL;
            engine_init(&e, other.data());
            rewind(fp);
            if (zero_load(e, fp) != 0) { fail("zero_load"); }
            check("the state read back to its end", fgetc(fp) == EOF, "%g %g", 0.0, 0.0);
            fclose(fp);
            zero_free(&z);
            z = e;
        }
        const std::vector<float>& vis = P[dpu ? (step - 1 > floor ? step - 1 : floor) : step];
        // a forward alone first (validation's), then the micro-steps
        if (run_pass(0, 0, 1, vis, step == 0) != 0) { fail("a forward pass"); }
        long calls0 = reductions_so_far();
        for (int micro = 0; micro < accum; micro++) {
            if (run_pass(1, micro, micro == accum - 1, vis, step == 0) != 0) { fail("a training pass"); }
        }
        // one reduction per unit and step at stages 0-1 (on the last micro-step; none at
        // stage 0 on one rank), per unit and micro-step at stages 2-3
        // (-k 0: the engine's own events alone order the steps, so none is checked here)
        if (host_sync) { check_reduced(); }
        long reductions = reductions_so_far() - calls0;
        long expect = stage == 0 && world_ == 1 ? 0 : stage <= 1 ? nu : (long)nu * accum;
        if (reductions != expect) { check("reductions per step", 0, "%g, expected %g", (double)reductions, (double)expect); }
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
        // the last step: tensor th's mean gradient read (zero_tensor_get) against the
        // reference's, then halved (zero_tensor_set) and read back; the step then uses the
        // halved one, and so does the reference (halving is exact in fp32 and bf16)
        if (step == steps - 1 && !qg) {
            const ZeroTensor* tr = &sp.tensors[th];
            size_t at = unit_start[tr->unit] + tr->offset;
            std::vector<float> g(tr->size), got(tr->size);
            if (zero_tensor_get(z, ZERO_STATE_GRAD, th, g.data()) != 0) { fail("zero_tensor_get of the gradient"); }
            double e = 0.0, top = 0.0;
            for (size_t j = 0; j < tr->size; j++) {
                double want = (double)grad[at + j] / world_;
                e = fmax(e, fabs((double)g[j] - want));
                top = fmax(top, fabs(want));
            }
            // fp32: the sums' order; bf16: each rank's gradient rounded, and a rounding per hop
            // of the reductions unless they are fp32
            double tol = (sizeof(floatX) == 2 ? (world_ + 1) / 128.0 : 1e-5) * top;
            check("the mean gradient (zero_tensor_get) equals the reference's", e <= tol, "max err %g, tol %g", e, tol);
            for (size_t j = 0; j < tr->size; j++) { g[j] = 0.5f * g[j]; grad[at + j] *= 0.5f; }
            if (zero_tensor_set(z, ZERO_STATE_GRAD, th, g.data()) != 0 || zero_tensor_get(z, ZERO_STATE_GRAD, th, got.data()) != 0) {
                fail("zero_tensor_set of the gradient");
            }
            e = 0.0;  // (x * N / N: exact for N a power of 2, within an ulp otherwise)
            for (size_t j = 0; j < tr->size; j++) { e = fmax(e, fabs((double)got[j] - g[j]) - 2.4e-7 * fabs((double)g[j])); }
            check("the gradient set (zero_tensor_set) reads back", e <= 0.0, "excess %g %g", e, 0.0);
        }
        ZeroStep st = {lr, wd, clip, step + 1, 1234u, 0};
        if (zero_step(z, &st) != 0) { fail("zero_step"); }
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
        if (host_sync) {
            ZeroStats zs;  // (synchronizes the compute stream, as the trainer's read of the norm does)
            if (zero_stats(z, &zs) != 0 || !(zs.wait_ms >= 0.0)) {
                check("zero_stats answers", 0, "%g ms %g", zs.wait_ms, 0.0);
            }
            double ne = fabs((double)zs.norm - norm) / norm;
            if (ne > max_norm_err) { max_norm_err = ne; }
        }
    }
    // the end of training: a pending --dpu update applied, then a forward sees the last parameters
    if (zero_flush(z) != 0 || run_pass(0, 0, 1, P.back(), 0) != 0) { fail("the last forward"); }
    cudaStreamSynchronize(compute);  // the fetch checks ran

    // fetches: exact before any update; within fp32 reordering after (sums over ranks and
    // micro-steps in another order; offload's SIMD AdamW within a few ulps of the scalar one)
    check("first step's fetches equal the initial parameters", max_first_err <= tol_first, "max err %g, tol %g", max_first_err, tol_first);
    check("every fetch equals the reference parameters", max_fetch_err <= tol_fetch, "max err %g, tol %g", max_fetch_err, tol_fetch);
    check("every unit's parameters and gradient handed out on 256 bytes", off_boundary == 0, "%g of %g off a boundary",
          (double)off_boundary, (double)handed_out);
    check("norm of the mean gradient", max_norm_err <= tol_norm, "max rel err %g, tol %g", max_norm_err, tol_norm);
    // the quantised modes did quantise (exact values would pass the bounds above too)
    if (qw && world_ > 1 && sizeof(floatX) == 4) {
        check("qwZ: the first fetches are not exact (int8 blocks)", max_first_err > 0.0, "max err %g %g", max_first_err, 0.0);
    }
    if (qg && world_ > 1 && host_sync) {
        check("qgZ: the reduced gradients are not exact (int8 blocks)", max_red_err > 0.0, "max err %g %g", max_red_err, 0.0);
    }
    // where the traffic went (the engine's counters by link, this rank's)
    if (stage == 3 && per_node > 0 && world_ > per_node) {
        ZeroStats zs;
        if (zero_stats(z, &zs) != 0) { fail("zero_stats"); }
        const ZeroDev* d = (const ZeroDev*)zero_engine_state(z);
        const double* in = zs.link_bytes[ZERO_LINK_INTER];
        const double* on = zs.link_bytes[ZERO_LINK_INTRA];
        check("the report's layout: nodes and ranks per node", zs.links_known && zs.nodes == world_ / per_node &&
              zs.ranks_per_node == per_node, "%g nodes, %g per node", (double)zs.nodes, (double)zs.ranks_per_node);
        if (mics == per_node) {  // groups are the nodes: only the replicas' all-reduce crosses
            check("MiCS (a group a node): no gather or reduce-scatter crosses nodes, the replicas' all-reduce does",
                  in[ZERO_ALLGATHER] == 0.0 && in[ZERO_REDUCE_SCATTER] == 0.0 && in[ZERO_ALLREDUCE] > 0.0,
                  "inter all-gather %g, all-reduce %g", in[ZERO_ALLGATHER], in[ZERO_ALLREDUCE]);
        }
        if (hpz > 1) {  // the backward's gathers from the slices, inside the secondary group
            check("hpZ: gathers from the slices, inside the secondary group", d->hpz.calls[ZERO_ALLGATHER] > 0 &&
                  (per_node % hpz != 0 || d->hpz.link_bytes[ZERO_LINK_INTER][ZERO_ALLGATHER] == 0.0),
                  "%g calls, %g bytes across nodes", (double)d->hpz.calls[ZERO_ALLGATHER], d->hpz.link_bytes[ZERO_LINK_INTER][ZERO_ALLGATHER]);
        }
        if (qg && mics < 0 && world_ % per_node == 0 && per_node > 1) {
            // two hops: (n - 1) x M blocks inside the node, then M - 1 across
            double M = world_ / per_node, n = per_node;
            check("qgZ's hops: inter-node bytes / intra-node = (M - 1) / ((n - 1) M)",
                  on[ZERO_REDUCE_SCATTER] > 0.0 && in[ZERO_REDUCE_SCATTER] * (n - 1) * M == on[ZERO_REDUCE_SCATTER] * (M - 1),
                  "inter %g, intra %g", in[ZERO_REDUCE_SCATTER], on[ZERO_REDUCE_SCATTER]);
        }
    }
    if (red_checked) {
        char what[160];
        snprintf(what, sizeof(what), "reduced gradients = the exact sum over ranks (%s reductions of %s gradients)",
                 comm == ZERO_COMM_FP32 || sizeof(floatX) == 4 ? "fp32" : "bf16", PRECISION_MODE);
        check(what, max_red_excess <= 0.0, "max err %g, %g past its bound", max_red_err, max_red_excess);
        // bf16 reductions of several ranks round: the check above can tell them from fp32 ones
        if (sizeof(floatX) == 2 && comm != ZERO_COMM_FP32 && world_ > 1) {
            check("bf16 reductions are not exact (what fp32 ones fix)", max_red_err > 0.0, "max err %g %g", max_red_err, 0.0);
        }
    }

    // the master, each rank's range of every unit as a checkpoint reads it: together the
    // ranges cover every element once (counted), each equal to the reference
    {
        double e = 0.0;
        std::vector<int> seen(total, 0);
        std::vector<float> range;
        for (int u = 0; u < nu; u++) {
            size_t begin = 0, n = 0;
            if (zero_state_shard(z, ZERO_STATE_MASTER, u, &begin, &n, NULL) != 0) { fail("zero_state_shard"); }
            range.assign(n > 0 ? n : 1, 0.0f);
            if (zero_state_shard(z, ZERO_STATE_MASTER, u, &begin, &n, range.data()) != 0) { fail("zero_state_shard"); }
            if (n > 0 && begin + n > sp.unit_numel[u]) { e = INFINITY; continue; }  // padding handed out as the model's
            for (size_t i = 0; i < n; i++) {
                seen[unit_start[u] + begin + i]++;
                e = fmax(e, fabs((double)range[i] - P.back()[unit_start[u] + begin + i]));
            }
        }
        MPI_Allreduce(MPI_IN_PLACE, seen.data(), (int)total, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(MPI_IN_PLACE, &e, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        size_t once = 0;
        int groups = world_ / ((const ZeroDev*)zero_engine_state(z))->world;  // MiCS: each group holds the whole model
        for (size_t i = 0; i < total; i++) { once += seen[i] == groups; }
        check("the ranks' ranges of the master cover the model once (per MiCS group)", once == total, "%g of %g", (double)once, (double)total);
        check("every rank's range of the master equals the reference", e <= tol_master, "max err %g, tol %g", e, tol_master);
    }

    // offload: the gradient shards go out and the updated shards come in on streams of their
    // own, so that a step's downloads never queue behind the last step's uploads (a matter of
    // time, which the emulator does not model: checked on the streams themselves)
    if (offload) {
        const ZeroDev* d = (const ZeroDev*)zero_engine_state(z);
        int apart = d->copy_out != NULL && d->copy_in != NULL && d->copy_out != d->copy_in && d->copy_out != d->compute &&
                    d->copy_in != d->compute && d->copy_out != d->nccl.stream && d->copy_in != d->nccl.stream;
        check("gradient downloads and parameter uploads on a copy stream each", apart, "%g %g", 0.0, 0.0);
    }

    // NVTX ranges (a profiler's timeline): the movers' named with their units, every range
    // this thread opened closed; stage 3 gathers, stages 2-3 reduce-scatter, offload copies out and runs the
    // CPU Adam (the emulator's NVTX keeps the names)
    {
        auto seen = [](const char* prefix) {
            std::lock_guard<std::mutex> g(emu_nvtx_lock);  // (--dpu's thread may be ranging)
            for (const std::string& n : emu_nvtx_names) {
                if (n.compare(0, strlen(prefix), prefix) == 0) { return 1; }
            }
            return 0;
        };
        int ok = emu_nvtx_depth == 0 && (stage < 3 || (seen("zero gather 1") && seen("zero gather wait "))) &&
                 (stage < 2 || seen("zero reduce-scatter 1")) && (!offload || (seen("zero cpu adam") && seen("zero upload"))) &&
                 (offload != 3 || persistence != 0 || seen("zero nvme read"));
        check("NVTX ranges: the movers' named with their units, all closed", ok, "depth %g %g", (double)emu_nvtx_depth, 0.0);
    }

    // the parameters on NVMe: gathers find their shard read ahead (the pass driver's
    // hints), with at most all but one of the offload_param.buffer_count buffers holding
    // reads ahead; without a window ahead (-f 0) the hints run that far ahead at a pass's
    // start (more units than buffers here)
    if (offload == 3 && persistence == 0) {
        const ZeroDev* d = (const ZeroDev*)zero_engine_state(z);
        long used = d->reads_ahead_used;
        int most = d->npstage - 1, peak = d->reads_ahead_peak;
        check("parameters on NVMe: gathers find their shard read ahead", most > 0 ? used > 0 : used == 0, "%g reads ahead used, %g buffers",
              (double)used, (double)d->npstage);
        check("parameters on NVMe: reads ahead at once, as buffer_count allows", prefetch == 0 || most == 0 ? peak == most : peak >= 1 && peak <= most,
              "%g at most, %g allowed", (double)peak, (double)most);
    }

    // the tensor calls' changes: the master of the first tensor set whole (zero_tensor_set)
    // and of the last (a persistent unit's) by parts (zero_tensor_set_local), read back bit
    // for bit, and a forward fetches them on every rank (floatX: rounded to nearest, within
    // half a bf16 ulp, beyond the fetches' own tolerance); m of tensor 1 zeroed by parts
    {
        std::vector<float> vis = P.back();
        int ok = 1, last = sp.num_tensors - 1;
        for (int k : {0, last}) {
            const ZeroTensor* tr = &sp.tensors[k];
            size_t at = unit_start[tr->unit] + tr->offset, b = 0, n = 0;
            std::vector<float> p(tr->size), got(tr->size);
            for (size_t j = 0; j < tr->size; j++) { p[j] = vis[at + j] + 0.01f * (float)((j % 7) + 1); vis[at + j] = p[j]; }
            int rc = k == 0 ? zero_tensor_set(z, ZERO_STATE_MASTER, k, p.data())
                            : zero_tensor_local(z, ZERO_STATE_MASTER, k, &b, &n, NULL) != 0 ? -1
                            : zero_tensor_set_local(z, ZERO_STATE_MASTER, k, p.data() + b);
            if (rc != 0 || zero_tensor_get(z, ZERO_STATE_MASTER, k, got.data()) != 0) { fail("zero_tensor_set of the master"); }
            ok = ok && memcmp(p.data(), got.data(), tr->size * sizeof(float)) == 0;
        }
        check("the master set whole and by parts reads back bit for bit", ok, "%g %g", 0.0, 0.0);
        double top = 0.0;
        for (float x : vis) { top = fmax(top, fabs((double)x)); }
        // (offload's SIMD AdamW: a few ulps from the reference; qwZ: a block's error is of its
        // largest magnitude, now up to top rather than the 0.106 tol_fetch allows for)
        double tol = (sizeof(floatX) == 2 ? top / 256.0 : 0.0) + tol_fetch + (qw ? top / 254.0 : 0.0);
        max_fetch_err = 0.0;
        if (run_pass(0, 0, 1, vis, 0) != 0) { fail("the forward after the change"); }
        cudaStreamSynchronize(compute);
        check("the next forward fetches the parameters set", max_fetch_err <= tol, "max err %g, tol %g", max_fetch_err, tol);
        const ZeroTensor* t1 = &sp.tensors[1];
        std::vector<float> zeros(t1->size, 0.0f), got(t1->size, 1.0f);
        size_t b = 0, n = 0;
        if (zero_tensor_local(z, ZERO_STATE_M, 1, &b, &n, NULL) != 0 || zero_tensor_set_local(z, ZERO_STATE_M, 1, zeros.data()) != 0 ||
            zero_tensor_get(z, ZERO_STATE_M, 1, got.data()) != 0) {
            fail("zero_tensor_set_local of m");
        }
        check("m set to zero by parts reads back", memcmp(zeros.data(), got.data(), t1->size * sizeof(float)) == 0, "%g %g", 0.0, 0.0);
        // the cache emptied: at stages 2-3 the pools (and at 3 the persistent units) freed,
        // nothing the second time; the next forward allocates and gathers again and fetches
        // the same parameters
        double freed = -1.0, again = -1.0;
        if (zero_empty_cache(z, &freed) != 0 || zero_empty_cache(z, &again) != 0) { fail("zero_empty_cache"); }
        check("zero_empty_cache frees the pools (stages 2-3), then nothing", (stage >= 2 ? freed > 0.0 : freed >= 0.0) && again == 0.0,
              "freed %g, then %g", freed, again);
        max_fetch_err = 0.0;
        if (run_pass(0, 0, 1, vis, 0) != 0) { fail("the forward after zero_empty_cache"); }
        cudaStreamSynchronize(compute);
        check("the forward after zero_empty_cache fetches the same parameters", max_fetch_err <= tol, "max err %g, tol %g", max_fetch_err, tol);
    }

    // a use out of schedule is refused with a message, not followed; so is a state saved
    // by another engine layout
    {
        void* p = NULL;
        int bad_unit = fwd_uses[0] == 1 ? 2 : 1;
        int rc = zero_begin(z, ZERO_PASS_FORWARD, 1) == 0 ? zero_fetch(z, bad_unit, &p) : 0;
        check("fetch out of schedule refused", rc != 0 && strstr(zero_errmsg(), "schedule") != NULL, "rc %g %g", (double)rc, 0.0);
        FILE* fp = tmpfile();
        ZeroStateHeader h = zero_state_header("host", stage, &((ZeroDev*)zero_engine_state(z))->plan, 4, 0);
        rc = fp != NULL && zero_state_write_header(fp, &h) == 0 ? 0 : -1;
        if (fp != NULL) { rewind(fp); }
        rc = rc == 0 ? zero_load(z, fp) : 0;
        check("a host engine's state refused, naming it", rc != 0 && strstr(zero_errmsg(), "host engine") != NULL, "rc %g %g", (double)rc, 0.0);
        if (fp != NULL) { fclose(fp); }
    }

    zero_free(&z);
    gpt2_engine_model_free(&sp);
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank_ == 0) {
        printf("%s: %s stage %d offload %d dpu %d accum %d ranks %d prefetch %d persistence %lld max_live %lld clip %g resume %d "
               "comm %s per_node %d mics %d hpz %d qw %d qg %d\n", all == 0 ? "ok" : "FAILED", PRECISION_MODE, stage, offload, dpu,
               accum, world_, prefetch, persistence, max_live, clip, resume_at, zero_comm_dtype_name(comm), per_node, mics, hpz, qw, qg);
    }
    MPI_Finalize();
    return all == 0 ? 0 : 1;
}
