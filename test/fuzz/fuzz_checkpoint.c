/*
 libFuzzer harness: a rank's checkpoint state file through checkpoint_load (llmc/checkpoint.h):
 the trainer's CheckpointHeader checks, then the engine's section read by a real host engine
 (zero3/host.h: zero_state_read_header, then the payload into its shards) of a 3-unit model
 at ZeRO stage 3 on one rank (MPI's singleton mode: no mpirun). The engine is built once;
 every input is loaded into it, so a failed load must leave nothing allocated behind.

 FUZZ_MAKE_SEED=DIR writes this engine's own checkpoint of step 1 to DIR (checkpoint_save)
 and exits: how test/fuzz/corpus/checkpoint/ was made.
*/
#include <stdint.h>               // uint8_t
#include <stddef.h>               // size_t
#include <stdlib.h>               // getenv, exit, abort
#include <string.h>               // memset
#include <mpi.h>                  // MPI_Init: the engine partitions over MPI_COMM_WORLD
#include <sanitizer/lsan_interface.h>  // __lsan_disable: Open MPI's set-up is not ours to check
#include "llmc/checkpoint.h"      // checkpoint_load, checkpoint_save, CheckpointHeader
#include "zero3/host.h"           // zero_host_create: the host engine
#include "test/fuzz/fuzz_file.h"  // fuzz_write_file, fuzz_dir: the input as a file
#include "zero3/util.h"     // zero_error, zero_errmsg
#include "llmc/utils.h"     // llmc_errmsg

// GPT-2 at max_seq_len 8, vocab 25, one layer, one channel: the embedding, the block, the final layernorm
static const size_t NUMEL[3] = {33, 25, 2};
static const ZeroTensor TENSORS[3] = {{0, 0, 33, 1}, {1, 0, 25, 1}, {2, 0, 2, 0}};
static const int FWD[4] = {0, 1, 2, 0};
static const int TRAIN[7] = {0, 1, 2, 0, 0, 2, 1};
static Zero* engine;
static CheckpointHeader want;

// the initial parameters: element i of the model (unit order) is 0.01 i
static int fill(void* ctx, int u, size_t begin, size_t n, float* out) {
    (void)ctx;
    size_t first = begin;
    for (int k = 0; k < u; k++) { first += NUMEL[k]; }
    for (size_t j = 0; j < n; j++) { out[j] = 0.01f * (float)(first + j); }
    return 0;
}

int LLVMFuzzerInitialize(int* argc, char*** argv) {
    // what MPI_Init allocates and keeps (much of it in components it loads and unloads,
    // whose stacks no suppression can name) and the engine, built once, are left out of
    // the leak checks; what each input's load allocates is checked
    __lsan_disable();
    if (MPI_Init(argc, argv) != MPI_SUCCESS) { abort(); }
    ZeroConfig cfg;
    zero_config_defaults(&cfg);
    cfg.stage = 3;
    ZeroModel m;
    memset(&m, 0, sizeof(m));
    m.num_units = 3;
    m.unit_numel = NUMEL;
    m.num_tensors = 3;
    m.tensors = TENSORS;
    m.uses[ZERO_PASS_TRAIN] = TRAIN;
    m.num_uses[ZERO_PASS_TRAIN] = 7;
    m.uses[ZERO_PASS_FORWARD] = FWD;
    m.num_uses[ZERO_PASS_FORWARD] = 4;
    ZeroInit in;
    memset(&in, 0, sizeof(in));
    in.cfg = &cfg;
    in.model = &m;
    in.fill = fill;
    in.beta1 = 0.9f; in.beta2 = 0.95f; in.eps = 1e-8f;
    in.comm = MPI_COMM_WORLD;
    if (zero_host_create(&engine, &in) != 0) { fprintf(stderr, "fuzz_checkpoint: %s\n", zero_errmsg()); abort(); }
    memset(&want, 0, sizeof(want));
    want.magic = CHECKPOINT_MAGIC; want.version = CHECKPOINT_VERSION;
    want.rank = 0; want.world_size = 1; want.step = 1; want.num_params = 60;
    want.B = 4; want.T = 8; want.shuffle = 1; want.grad_accum = 1; want.seed = 1337;
    const char* seed_dir = getenv("FUZZ_MAKE_SEED");
    if (seed_dir != NULL) {
        GPT2Config c = {.max_seq_len = 8, .vocab_size = 25, .padded_vocab_size = 25, .num_layers = 1, .num_heads = 1, .channels = 1};
        if (checkpoint_save(seed_dir, &want, engine, &c, 3) != 0) { fprintf(stderr, "fuzz_checkpoint: %s\n", llmc_errmsg()); exit(1); }
        zero_free(&engine);
        MPI_Finalize();
        exit(0);
    }
    __lsan_enable();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fuzz_write_file("state_00000001_00000.bin", data, size);
    CheckpointHeader got;
    llmc_errbuf[0] = '\0';  // so that a refusal must record its own message
    if (checkpoint_load(fuzz_dir, 1, &want, engine, &got) == 0) {
        if (got.step != 1 || got.rank != 0 || got.world_size != 1) { abort(); }
    } else {
        fuzz_refused(llmc_errmsg());
    }
    return 0;
}
