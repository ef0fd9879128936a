/*
 What a checkpoint costs in memory on each rank (test_checkpoint.sh runs it under mpirun):
 a host engine of a GPT-2 model at ZeRO stage 3, then trainer_params_finite and
 checkpoint_save as the trainer calls them, while this program counts the bytes the whole
 process has allocated (malloc and friends replaced by test/e2e/alloc_peak.c, compiled in, so Open MPI's,
 stdio's and OpenMP's allocations count too). It prints, per rank, the most bytes live at
 once during the save beyond those live before it, and the bound: one unit's range of the
 master (the largest shard of a unit) plus the read-back checksum's 4 MiB buffer plus 1 MiB
 for everything else. A save that holds the whole model on some rank (29 MB for d2 at
 fp32, against about 6.6 + 5 MB at 4 ranks) breaks it.

   mpirun -np N save_memory DIR VERSION     (VERSION 3: fp32, 5: bf16)

 Then a -inf and a NaN put into two ranks' shards: trainer_params_finite, on every rank,
 names the first of them in the model's order by its tensor and element.

 Ends with "N passed, N failed", rank 0 counting every rank's verdict (both checks).
*/
#include <stdio.h>            // printf
#include <stdlib.h>           // atoi
#include <string.h>           // memset, strstr
#include <math.h>             // NAN, INFINITY: the parameters the finiteness check must find
#include <mpi.h>              // MPI_Init: the engine and the save are collective
#include "llmc/trainer.h"     // gpt2_engine_model
#include "llmc/trainer_checkpoint.h" // trainer_params_finite
#include "llmc/checkpoint.h"  // CheckpointHeader, checkpoint_save
#include "zero3/host.h"       // zero_host_create: the CPU trainer's engine
#include "zero3/engine.h"     // zero_engine_state: the engine's memory, read white-box
#include "zero3/plan.h"       // zero_plan_init: the largest shard, for the bound
#include "test/e2e/alloc_peak.c" // malloc and friends counted: alloc_peak_restart, alloc_peak_peak
#include "zero3/util.h"     // zero_error, zero_errmsg, zero_now_ms
#include "llmc/utils.h"     // llmc_error, llmc_errmsg, the checked wrappers

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (argc != 3) { fprintf(stderr, "usage: save_memory DIR VERSION\n"); MPI_Abort(MPI_COMM_WORLD, 2); }
    GPT2Config c;
    llmcCheck(gpt2_config_from_descriptor("d2", &c));
    size_t n = gpt2_num_params(&c);
    ZeroModel model;
    gpt2_engine_model(&c, &model);
    ZeroConfig cfg;
    zero_config_defaults(&cfg);
    cfg.stage = 3;
    GPT2Source source;  // the random init of seed 7, each rank its own shards
    gpt2_source_random(&source, &c, 7);
    ZeroInit in;
    memset(&in, 0, sizeof(in));
    in.cfg = &cfg;
    in.model = &model;
    in.fill = trainer_fill;
    in.fill_ctx = &source;
    in.beta1 = 0.9f; in.beta2 = 0.95f; in.eps = 1e-8f;
    in.comm = MPI_COMM_WORLD;
    Zero* z = NULL;
    if (zero_host_create(&z, &in) != 0) { fprintf(stderr, "save_memory: %s\n", zero_errmsg()); MPI_Abort(MPI_COMM_WORLD, 1); }
    ZeroPlan plan;
    if (zero_plan_init(&plan, model.unit_numel, model.num_units, world, rank, sizeof(float)) != 0) { MPI_Abort(MPI_COMM_WORLD, 1); }
    size_t largest = 0;
    for (int u = 0; u < plan.num_units; u++) { if (plan.units[u].shard > largest) { largest = plan.units[u].shard; } }
    zero_plan_free(&plan);

    Trainer t;
    memset(&t, 0, sizeof(t));
    t.config = c;
    t.rank = rank;
    t.world = world;
    TrainerModel m;
    memset(&m, 0, sizeof(m));
    m.zero = z;
    CheckpointHeader h;
    memset(&h, 0, sizeof(h));
    h.magic = CHECKPOINT_MAGIC; h.version = CHECKPOINT_VERSION;
    h.rank = rank; h.world_size = world; h.step = 1; h.num_params = n;
    h.B = 1; h.T = 8; h.grad_accum = 1; h.seed = 7;
    MPI_Barrier(MPI_COMM_WORLD);
    long long before = (long long)alloc_peak_live();
    alloc_peak_restart();
    char why[160];
    int finite = trainer_params_finite(&t, &m, why, sizeof(why));
    int saved = checkpoint_save(argv[1], &h, z, &c, atoi(argv[2]));
    long long extra = (long long)alloc_peak_peak() - before;
    long long bound = (long long)(largest * sizeof(float)) + (5ll << 20);
    int ok = finite && saved == 0 && extra <= bound;
    printf("%s rank %d of %d: the finiteness check and the save (version %s) took at most %lld bytes beyond the engine's; "
           "bound %lld (the largest shard %zu x 4 + 5 MiB); the model is %zu bytes%s%s\n", ok ? "PASS" : "FAIL", rank, world,
           argv[2], extra, bound, largest, n * sizeof(float), saved == 0 ? "" : ": ", saved == 0 ? "" : llmc_errmsg());
    fflush(stdout);
    // the finiteness check names the model's first non-finite parameter, whichever rank
    // holds it: -inf at unit 1's element 148709 (block 0: ln1w, ln1b 128 each, qkvw 49152,
    // qkvb 384, attprojw 16384, attprojb, ln2w, ln2b 128 each, fcw 65536, fcb 512, so
    // fcprojw's element 16101) and NaN at unit 2's element 49578, on whichever ranks own them
    ZeroHost* e = (ZeroHost*)zero_engine_state(z);
    const size_t poke_unit[2] = {1, 2}, poke_at[2] = {148709, 49578};
    for (int i = 0; i < 2; i++) {
        size_t shard = e->plan.units[poke_unit[i]].shard;
        if (poke_at[i] / shard == (size_t)rank) { e->param_ptr[poke_unit[i]][poke_at[i] % shard] = i == 0 ? -INFINITY : NAN; }
    }
    finite = trainer_params_finite(&t, &m, why, sizeof(why));
    int named = !finite && strstr(why, "parameter fcprojw of layer 0 element 16101 (") != NULL && strstr(why, ") is -inf") != NULL;
    printf("%s rank %d of %d: the first non-finite parameter named: %s\n", named ? "PASS" : "FAIL", rank, world, finite ? "none found" : why);
    ok = ok && named;
    int good = 0;
    MPI_Reduce(&ok, &good, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) { printf("%d passed, %d failed\n", good, world - good); }
    zero_free(&z);
    gpt2_engine_model_free(&model);
    MPI_Finalize();
    return rank == 0 && good != world;
}
