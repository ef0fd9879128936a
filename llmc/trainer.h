/*
 The training run, shared by the two trainers (train_gpt2_zero3.c on the CPU, .cu on the
 GPU): everything of a run that is not the model's own code or the device set-up.

   trainer_start    MPI, the flags (-h prints the usage and exits), ranks on this node
   trainer_model    the model of -e: an llm.c file, or a descriptor with a random init
   trainer_setup    the batch arithmetic, the check that all ranks run the same thing,
                    the output directory, the data loaders, the tokenizer for samples
   trainer_engine   what a ZeRO engine is built from (zero3/zero.h's ZeroInit) for GPT-2
   trainer_run      resume, the header, the step loop (validation, samples, checkpoints,
                    micro-steps, the optimizer step, the step line, main.log), the report
   trainer_finish   frees the run and ends MPI

 A trainer hands trainer_run its model as a TrainerModel: the engine and a few functions
 (a training micro-step, the losses, evaluation, memory). The model's forward and
 backward reach the engine through the four unit hooks below (params_fetch, ...).
 Errors that every rank sees alike stop the job with one line from rank 0 (die_all);
 others with MPI_Abort.
*/
#ifndef LLMC_TRAINER_H
#define LLMC_TRAINER_H

#include <stdio.h>            // printf, fprintf, snprintf
#include <stdlib.h>           // exit, malloc
#include <string.h>           // strstr, memset
#include <math.h>             // isfinite, NAN: a step with a non-finite loss or norm is skipped
#include <limits.h>           // LLONG_MAX: no non-finite parameter on a rank
#include <signal.h>           // signal: SIGXFSZ ignored, so a full file fails a write instead
#include <unistd.h>           // access, sysconf: cores per node
#include <sys/stat.h>         // stat, mkdir
#include <dirent.h>           // opendir: -o's files, against the inputs
#include <fcntl.h>            // O_APPEND, O_NOFOLLOW: main.log appended without following a link
#include <mpi.h>              // ranks, the checks across ranks
#include <cjson/cJSON.h>      // the --report JSON
#include "llmc/utils.h"       // llmc_error, AtomicFile
#include "common/file.h"      // file_open: main.log opened without blocking on a FIFO
#include "llmc/job.h"         // the launcher's check, -o's lock, the stop signals, job_doing
#include "llmc/args.h"        // TrainConfig, args_parse
#include "llmc/gpt2.h"        // model files, descriptors, init, the units
#include "llmc/dataloader.h"  // DataLoader
#include "llmc/tokenizer.h"   // Tokenizer for samples
#include "llmc/rand.h"        // Rng: the sampler's coins
#include "llmc/schedulers.h"  // LRScheduler
#include "llmc/checkpoint.h"  // checkpoint_save, checkpoint_find_valid, checkpoint_resume, checkpoint_prune
#include "llmc/activations.h" // the GPU trainer's activations, for --estimate
#include "zero3/config.h"     // zero_config_resolve_batch, zero_config_describe, zero_hash_bytes
#include "zero3/zero.h"       // Zero: the engine's interface; zero_now_ms (zero3/util.h)
#include "zero3/estimate.h"   // zero_estimate_print: model-state memory for --estimate
#include "zero3/nvme.h"       // nvme_remove_all: no swap file outlives a failed run
#include "zero3/host.h"       // zero_host_estimate: the host engine's memory for --estimate

// Every failure after start-up ends here, after its message: this rank's swap files go and
// its NCCL communicators are aborted (zero_watch_exit_hooks: MPI_Abort runs no cleanup),
// then the whole job stops.
static void trainer_abort(void) {
    zero_watch_exit_hooks();
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static void mpi_check(int rc, const char* file, int line) {
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, msg, &len);
        fprintf(stderr, "error: MPI: %s [%s:%d]\n", msg, file, line);
        trainer_abort();
    }
}
#define mpiCheck(rc) mpi_check((rc), __FILE__, __LINE__)
// a blocking MPI call of the trainer, told to --collective-timeout's watchdog as `what`
#define mpiWatched(what, call) do { zero_watch_enter(what, -1); int rc_ = (call); zero_watch_leave(); mpiCheck(rc_); } while (0)

// An engine call failed: a bug, a dead rank or a device error. Stop every rank.
static void zero_fail(const char* file, int line) {
    fprintf(stderr, "error: %s [%s:%d]\n", zero_errmsg(), file, line);
    trainer_abort();
}
#define zeroCheck(rc) do { if ((rc) != 0) { zero_fail(__FILE__, __LINE__); } } while (0)

// The unit hooks: every parameter and gradient access of the forward and backward goes
// through the engine, which gathers (stage 3), releases and reduces units in the order
// of the schedule registered at its init (gpt2_schedule). They hand out the engine's
// element type: float on the CPU, floatX on the GPU.
static inline void* params_fetch(Zero* z, int u) {
    void* p = NULL;
    zeroCheck(zero_fetch(z, u, &p));
    return p;
}
static inline void params_release(Zero* z, int u) { zeroCheck(zero_release(z, u)); }
static inline void* grads_unit(Zero* z, int u) {
    void* g = NULL;
    zeroCheck(zero_grad(z, u, &g));
    return g;
}
static inline void grads_reduce(Zero* z, int u) { zeroCheck(zero_reduce(z, u)); }

// a trainer-layer call failed on this rank: stop every rank
static void trainer_fail(int rank) {
    fprintf(stderr, "error: rank %d: %s\n", rank, llmc_errmsg());
    trainer_abort();
}

// errors every rank sees alike (before training starts, or --max-skipped-steps): print
// once, remove this rank's swap files, stop all
static void die_all(int rank, const char* msg) {
    if (rank == 0) { fprintf(stderr, "error: %s\n", msg); }
    nvme_remove_all();
    zero_watchdog_stop();
    MPI_Finalize();
    exit(EXIT_FAILURE);
}

// One line of llm.c's main.log ("s:%d trl:%f" / "s:%d tel:%f"), from rank 0. A line that
// cannot be written (a full disk, a file-size limit) stops the run: a log with holes would
// pass for a complete one. Opened without following a link: start-up checked the path.
static void log_line(const char* dir, int rank, const char* fmt, int step, float value) {
    if (dir == NULL || rank != 0) { return; }
    char path[4096];
    snprintf(path, sizeof(path), "%s/main.log", dir);
    const char* why = NULL;  // file_open's reason, or the write's
    int fd = file_open(path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW, 0666, FILE_REGULAR, &why);
    FILE* fp = fd >= 0 ? fdopen(fd, "a") : NULL;
    int ok = fp != NULL && fprintf(fp, fmt, step, value) > 0;
    if (!ok && fd >= 0) { why = strerror(errno); }
    if (fp != NULL && fclose(fp) != 0 && ok) { ok = 0; why = strerror(errno); }
    if (fp == NULL && fd >= 0) { close(fd); }
    if (!ok) {
        fprintf(stderr, "error: cannot write %s: %s\n", path, why);
        trainer_abort();
    }
}

static float allreduce_mean(float x, int world, const char* what) {
    mpiWatched(what, MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
    return x / world;
}

// ----------------------------------------------------------------------------
// the run

typedef struct {
    TrainConfig tc;
    int rank, world;
    int local_size;          // ranks on this node
    int threads;             // this rank's share of the node's cores (OMP_NUM_THREADS when set)
    GPT2Config config;
    GPT2Source source;       // where the initial parameters come from: -e's file (open) or random init from --seed
    long total_batch;        // tokens per optimizer step over all ranks
    int grad_accum;
    DataLoader train, val;
    int loaders_ready;       // trainer_setup opened them
    int val_steps, max_steps;
    Tokenizer tokenizer;
    int have_tokenizer;
    int start_token;         // what the first sampled position sees
} Trainer;

// Start-up: line-buffered stdout, SIGXFSZ ignored (a write past a file-size limit fails
// with EFBIG and is reported), MPI, the flags (-h prints the usage for `program` and
// exits; a bad flag stops every rank), the launcher's word against MPI's (llmc/job.h),
// the stop signals, the --ds-config warnings from rank 0, and this rank's threads: the
// node's cores split among its ranks unless OMP_NUM_THREADS says.
static void trainer_start(Trainer* t, int* argc, char*** argv, const char* program) {
    memset(t, 0, sizeof(*t));
    t->source.fd = -1;  // no model file open
    setvbuf(stdout, NULL, _IOLBF, 0);  // line by line into logs and pipes, not in 4 KiB blocks
    signal(SIGXFSZ, SIG_IGN);
    JobLauncher launcher;
    job_launcher_read(&launcher);  // before MPI_Init, which sets some of the variables for a singleton
    mpiCheck(MPI_Init(argc, argv));
    // every exit() too (a CUDA error's, llmc's checks): no swap file outlives the process
    atexit(zero_watch_exit_hooks);
    mpiCheck(MPI_Comm_rank(MPI_COMM_WORLD, &t->rank));
    mpiCheck(MPI_Comm_size(MPI_COMM_WORLD, &t->world));
    int rc = args_parse(&t->tc, *argc, *argv);
    if (rc == 1) {
        if (t->rank == 0) { args_usage(stdout, program); }
        MPI_Finalize();
        exit(EXIT_SUCCESS);
    }
    if (job_launcher_check(&launcher, t->world) != 0) { die_all(t->rank, llmc_errmsg()); }
    // after MPI_Init, so that these are ours: a first SIGTERM, SIGINT or SIGUSR1 stops the
    // run at its next step boundary (trainer_run), a second one or --stop-grace ends it
    // at once; the swap files go with either (nvme_remove_all only unlinks)
    job_signals_install(t->rank, t->tc.stop_grace, nvme_remove_all);
    if (rc != 0 || llmc_input_add(t->tc.ds_config, "--ds-config") != 0) { die_all(t->rank, llmc_errmsg()); }
    if (zero_watchdog_start(t->tc.collective_timeout, MPI_COMM_WORLD) != 0) { die_all(t->rank, zero_errmsg()); }
    if (t->rank == 0 && t->tc.warnings[0] != '\0') { fputs(t->tc.warnings, stderr); }
    MPI_Comm local;
    mpiCheck(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, t->rank, MPI_INFO_NULL, &local));
    mpiCheck(MPI_Comm_size(local, &t->local_size));
    MPI_Comm_free(&local);
    const char* env = getenv("OMP_NUM_THREADS");
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    t->threads = env != NULL ? atoi(env) : (int)(cores / t->local_size);
    if (t->threads < 1) { t->threads = 1; }
}

// The model of -e: an llm.c file (its header and size checked on every rank, the file
// kept open: each rank reads only its shards when the engine is built), or a descriptor
// with GPT-2's random init from --seed. Nothing of the parameters is read or made here:
// the engine asks t->source for each rank's shards (trainer_fill). Checks -t against the model.
static void trainer_model(Trainer* t) {
    const TrainConfig* tc = &t->tc;
    job_doing("opening the model %s", tc->model);
    if (access(tc->model, F_OK) == 0) {
        if (gpt2_source_open(&t->source, tc->model) != 0 || llmc_input_add(tc->model, "-e") != 0) {
            die_all(t->rank, llmc_errmsg());
        }
        t->config = t->source.config;
    } else {
        if (strstr(tc->model, ".bin") != NULL) {
            char msg[4200];
            snprintf(msg, sizeof(msg), "model file %s does not exist", tc->model);
            die_all(t->rank, msg);
        }
        if (gpt2_config_from_descriptor(tc->model, &t->config) != 0) { die_all(t->rank, llmc_errmsg()); }
        gpt2_source_random(&t->source, &t->config, tc->seed);
    }
    if (tc->T > t->config.max_seq_len) {
        char msg[256];
        snprintf(msg, sizeof(msg), "flag -t: sequence length %d exceeds the model's maximum of %d", tc->T, t->config.max_seq_len);
        die_all(t->rank, msg);
    }
}

// Tokens per optimizer step over all ranks: -d if given (a multiple of B*T*ranks), else
// DeepSpeed's rule over --ds-config's train_batch_size (sequences), micro batch and
// accumulation steps, else B*T*ranks. Stops every rank with a message when they do not fit.
static long trainer_total_batch(const TrainConfig* tc, int rank, int world) {
    long tokens_per_micro = (long)tc->B * tc->T * world;
    if (tc->given_d) {
        if (tc->total_batch_size % tokens_per_micro != 0) {
            char msg[256];
            snprintf(msg, sizeof(msg), "flag -d: total batch size %ld is not a multiple of B*T*ranks = %d*%d*%d = %ld",
                     tc->total_batch_size, tc->B, tc->T, world, tokens_per_micro);
            die_all(rank, msg);
        }
        return tc->total_batch_size;
    }
    if (tc->zero.train_batch_size > 0 || tc->zero.gradient_accumulation_steps > 0) {
        int micro = 0, accum = 0;
        if (zero_config_resolve_batch(tc->zero.train_batch_size, tc->B, tc->zero.gradient_accumulation_steps,
                                      world, &micro, &accum) != 0) {
            die_all(rank, zero_errmsg());
        }
        return (long)micro * accum * world * tc->T;
    }
    return tokens_per_micro;
}

// Every rank must run the same configuration and model, or the collectives would
// pair up wrong. Each rank hashes what must agree; all compare with rank 0's and each
// that differs says what differs.
static void trainer_check_ranks(const Trainer* t) {
    const TrainConfig* tc = &t->tc;
    uint64_t h[3];
    h[0] = zero_config_hash(&tc->zero);
    uint64_t x = 0xcbf29ce484222325ull;
    x = zero_hash_bytes(x, &tc->B, sizeof(tc->B));
    x = zero_hash_bytes(x, &tc->T, sizeof(tc->T));
    x = zero_hash_bytes(x, &t->total_batch, sizeof(t->total_batch));
    x = zero_hash_bytes(x, &tc->lr, sizeof(tc->lr));
    x = zero_hash_bytes(x, &tc->weight_decay, sizeof(tc->weight_decay));
    x = zero_hash_bytes(x, &tc->grad_clip, sizeof(tc->grad_clip));
    x = zero_hash_bytes(x, &tc->max_skipped_steps, sizeof(tc->max_skipped_steps));
    x = zero_hash_bytes(x, &tc->seed, sizeof(tc->seed));
    x = zero_hash_bytes(x, &tc->max_steps, sizeof(tc->max_steps));
    x = zero_hash_bytes(x, &tc->overfit_single_batch, sizeof(tc->overfit_single_batch));
    x = zero_hash_bytes(x, &tc->shuffle, sizeof(tc->shuffle));
    x = zero_hash_bytes(x, &tc->val_every, sizeof(tc->val_every));
    x = zero_hash_bytes(x, &tc->sample_every, sizeof(tc->sample_every));
    x = zero_hash_bytes(x, &tc->checkpoint_every, sizeof(tc->checkpoint_every));
    // the GPU trainer's: a rank on another backend or with a delayed update would issue
    // other collectives
    x = zero_hash_bytes(x, tc->zero_backend, strlen(tc->zero_backend));
    x = zero_hash_bytes(x, &tc->dpu, sizeof(tc->dpu));
    h[1] = x;
    h[2] = zero_hash_bytes(0xcbf29ce484222325ull, &t->config, sizeof(t->config));
    uint64_t h0[3] = {h[0], h[1], h[2]};
    mpiWatched("broadcast of the run's hashes", MPI_Bcast(h0, 3, MPI_UINT64_T, 0, MPI_COMM_WORLD));
    static const char* const what[3] = {"ZeRO configuration (-z, --ds-config, ZeRO flags)",
                                        "training flags (-b -t -d -l -c -x -a -v -s -n --seed --grad-clip --max-skipped-steps --shuffle --zero-backend --dpu)",
                                        "model shape (-e)"};
    int bad = 0;
    for (int i = 0; i < 3; i++) {
        if (h[i] != h0[i]) {
            fprintf(stderr, "error: rank %d of %d runs a different %s than rank 0\n", t->rank, t->world, what[i]);
            bad = 1;
        }
    }
    mpiWatched("all-reduce of the ranks' agreement", MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    if (bad) {
        if (t->rank == 0) { fprintf(stderr, "error: the ranks disagree (see above); every rank must get the same flags and files\n"); }
        zero_watchdog_stop();
        MPI_Finalize();
        exit(EXIT_FAILURE);
    }
}

// An input of the run that is also a file of -o under a name the run writes or removes
// there (a checkpoint's model, state or marker file, their temporaries, main.log; by device
// and inode, so -e given through a link or another name counts) would be replaced by a
// checkpoint or removed by --keep-checkpoints: refused before anything is written.
// Returns 0, or -1 with llmc_errmsg() naming the file, and the input's flag and path.
static int trainer_inputs_outside_output(const char* out) {
    DIR* d = opendir(out);
    if (d == NULL) { return llmc_error("cannot read %s: %s", out, strerror(errno)); }
    int rc = 0;
    struct dirent* e;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        int step, rank, tmp;
        if (checkpoint_name_parse(e->d_name, &step, &rank, &tmp) == CHECKPOINT_FILE_NONE && strcmp(e->d_name, "main.log") != 0) {
            continue;
        }
        char path[4400];
        struct stat st;
        snprintf(path, sizeof(path), "%s/%s", out, e->d_name);
        if (lstat(path, &st) == 0 && S_ISREG(st.st_mode) && output_input_check(path, &st) != 0) {
            char why[sizeof(llmc_errbuf)];
            snprintf(why, sizeof(why), "%s", llmc_errmsg());
            rc = llmc_error("%s: a checkpoint would replace it or --keep-checkpoints remove it (copy the input out of %s)",
                            why, out);
        }
    }
    closedir(d);
    return rc;
}

// Where the run will write, checked before it starts, after its inputs are known (so that
// no output replaces one): -o a directory every rank can create files in, its main.log
// (rank 0) no link, FIFO or input; --report's directory writable and its path neither
// (rank 0); --nvme-path a writable directory (every rank, with NVMe offload). Every rank
// says what it found wrong, naming the path; then all stop.
static void trainer_check_outputs(Trainer* t) {
    const TrainConfig* tc = &t->tc;
    int bad = 0;
    for (size_t i = 0; i < t->train.num_shards && !bad; i++) { bad = llmc_input_add(t->train.shard_paths[i], "-i") != 0; }
    for (size_t i = 0; tc->val_every > 0 && i < t->val.num_shards && !bad; i++) { bad = llmc_input_add(t->val.shard_paths[i], "-j") != 0; }
    if (bad || llmc_input_add(tc->tokenizer, "--tokenizer") != 0) { trainer_fail(t->rank); }
    char path[4200];
    const char* flag = NULL;
    if (!bad && tc->output_dir != NULL) {
        flag = "-o";
        bad = output_dir_check(tc->output_dir) != 0 || trainer_inputs_outside_output(tc->output_dir) != 0;
        snprintf(path, sizeof(path), "%s/main.log", tc->output_dir);
        if (!bad && t->rank == 0) { bad = output_check(path) != 0; }
    }
    if (!bad && tc->report != NULL && t->rank == 0) {
        flag = "--report";
        snprintf(path, sizeof(path), "%s", tc->report);
        char* slash = strrchr(path, '/');
        if (slash == path) { slash[1] = '\0'; } else if (slash != NULL) { *slash = '\0'; } else { strcpy(path, "."); }
        if (output_dir_check(path) != 0) {
            char why[1024];
            snprintf(why, sizeof(why), "%s", llmc_errmsg());
            bad = llmc_error("cannot write the report %s: %s", tc->report, why) != 0;
        } else {
            bad = output_check(tc->report) != 0;
        }
    }
    int nvme = tc->zero.offload_optimizer == ZERO_OFFLOAD_NVME || tc->zero.offload_param == ZERO_OFFLOAD_NVME;
    if (!bad && nvme && tc->zero.nvme_path[0] != '\0') {
        flag = "--nvme-path";
        bad = output_dir_check(tc->zero.nvme_path) != 0;
    }
    if (bad) { fprintf(stderr, "error: rank %d: flag %s: %s\n", t->rank, flag, llmc_errmsg()); }
    mpiWatched("all-reduce of the output checks", MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    if (bad) {
        zero_watchdog_stop();
        MPI_Finalize();
        exit(EXIT_FAILURE);
    }
}

// After trainer_model: the batch (t->total_batch, t->grad_accum), the check that all ranks
// agree, the output directory (-o, made by rank 0; -n and -y need it), the data loaders
// (each rank reports its own file errors: files may differ per node), the validation
// batches (-m, at most the set), the steps (-x, or one epoch), and the tokenizer for
// samples (used only when it has the model's vocabulary: a small test model samples ids).
static void trainer_setup(Trainer* t) {
    const TrainConfig* tc = &t->tc;
    int rank = t->rank;
    t->total_batch = trainer_total_batch(tc, rank, t->world);
    t->grad_accum = (int)(t->total_batch / ((long)tc->B * tc->T * t->world));
    trainer_check_ranks(t);
    // MiCS's checkpoint sections are of the shard group, which the checkpoint set (one
    // section per rank of the run) cannot yet describe: refused before anything is trained
    if (tc->zero.mics_shard_size > 0 && tc->zero.mics_shard_size < t->world && (tc->checkpoint_every > 0 || tc->resume)) {
        die_all(rank, "flags -n and -y with mics_shard_size: checkpoints of MiCS runs are not supported yet (save with the "
                      "same run without MiCS, or train without -n)");
    }

    if (tc->output_dir != NULL) {
        struct stat st;
        int bad = 0, err = 0;
        if (rank == 0 && lstat(tc->output_dir, &st) != 0 && mkdir(tc->output_dir, 0755) != 0) { bad = 1; err = errno; }
        mpiWatched("broadcast of the output directory's creation", MPI_Bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD));
        if (bad) {
            char msg[4200];
            snprintf(msg, sizeof(msg), "flag -o: cannot create output directory %s: %s", tc->output_dir, strerror(err));
            die_all(rank, msg);
        }
        // one job per directory: rank 0 locks it before anything of the run reads or writes
        // there (a second job is refused naming the first; llmc/job.h); -o not a directory
        // is trainer_check_outputs' to say
        job_doing("locking the output directory %s", tc->output_dir);
        bad = rank == 0 && stat(tc->output_dir, &st) == 0 && S_ISDIR(st.st_mode) ? job_lock_dir(tc->output_dir) != 0 : 0;
        mpiWatched("broadcast of the output directory's lock", MPI_Bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD));
        if (bad) { die_all(rank, llmc_errmsg()); }
    } else if (tc->checkpoint_every > 0 || tc->resume) {
        die_all(rank, "flags -n and -y need an output directory: add -o DIR");
    }

    job_doing("opening the data (-i %s, -j %s) and the tokenizer", tc->train_pattern, tc->val_pattern);
    int shuffle = tc->shuffle && !tc->overfit_single_batch;
    if (dataloader_init(&t->train, tc->train_pattern, tc->B, tc->T, rank, t->world, shuffle, tc->seed) != 0) { trainer_fail(rank); }
    // every token id read from here on is checked against the model's vocabulary
    dataloader_set_vocab(&t->train, t->config.vocab_size);
    t->val_steps = 0;
    if (tc->val_every > 0) {
        if (dataloader_init(&t->val, tc->val_pattern, tc->B, tc->T, rank, t->world, 0, 0) != 0) {
            fprintf(stderr, "error: %s (or disable validation with -v 0)\n", llmc_errmsg());
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        dataloader_set_vocab(&t->val, t->config.vocab_size);
        size_t nb = dataloader_num_batches(&t->val);
        t->val_steps = tc->val_max_steps < 0 || (size_t)tc->val_max_steps > nb ? (int)nb : tc->val_max_steps;
    }
    t->max_steps = tc->max_steps >= 0 ? tc->max_steps : (int)(dataloader_num_batches(&t->train) / t->grad_accum);
    t->loaders_ready = 1;

    int V = t->config.vocab_size;
    t->have_tokenizer = tc->sample_every > 0 && tokenizer_init(&t->tokenizer, tc->tokenizer) == 0;
    // a missing tokenizer only changes how samples print; one that exists but is corrupt
    // is a wrong file the user means to use: stop
    if (tc->sample_every > 0 && !t->have_tokenizer && access(tc->tokenizer, F_OK) == 0) { die_all(rank, llmc_errmsg()); }
    if (tc->sample_every > 0 && !t->have_tokenizer && rank == 0) {
        printf("warning: %s; samples are printed as token ids\n", llmc_errmsg());
    }
    if (t->have_tokenizer && (int)t->tokenizer.vocab_size != V) {
        if (rank == 0) {
            printf("warning: tokenizer %s has %u tokens but the model has %d; samples are printed as token ids\n",
                   tc->tokenizer, t->tokenizer.vocab_size, V);
        }
        tokenizer_free(&t->tokenizer);
        t->have_tokenizer = 0;
    }
    // <|endoftext|>, or the last token of a smaller vocabulary
    t->start_token = t->have_tokenizer ? (int)t->tokenizer.eot_token : (V > GPT2_VOCAB_SIZE - 1 ? GPT2_VOCAB_SIZE - 1 : V - 1);
    trainer_check_outputs(t);
}

static void trainer_finish(Trainer* t) {
    job_doing("ending the run");
    if (t->have_tokenizer) { tokenizer_free(&t->tokenizer); }
    if (t->loaders_ready) { dataloader_free(&t->train); }
    if (t->loaders_ready && t->tc.val_every > 0) { dataloader_free(&t->val); }
    gpt2_source_close(&t->source);
    zero_watchdog_stop();
    MPI_Finalize();
}

static void gpt2_engine_model(const GPT2Config* c, ZeroModel* m);  // below, with the engine
static void gpt2_engine_model_free(ZeroModel* m);

// --estimate's figures for this very run on the host engine (the CPU trainer: host_acts,
// its activations' bytes) at NODES x GPUS ranks: what each rank will hold at its peak, from
// zero_host_estimate (the engine's own plan, schedule and sizes) and the activations. The
// last line is for scripts: peak_bytes_per_rank=... swap_bytes_per_rank=...
static void trainer_estimate_host(const Trainer* t, int ranks, double host_acts) {
    const double GiB = 1073741824.0;
    const ZeroConfig* z = &t->tc.zero;
    ZeroModel spec;
    ZeroHostEstimate he;
    gpt2_engine_model(&t->config, &spec);
    int rc = zero_host_estimate(&spec, z, ranks, &he);
    gpt2_engine_model_free(&spec);
    if (rc != 0) { printf("this run: cannot estimate: %s\n", zero_errmsg()); return; }
    double peak = he.states + he.buffers + he.host_buffers + host_acts;
    double states = 16.0 * (double)gpt2_num_params(&t->config);
    printf("this run (train_gpt2_zero3_cpu, host engine, %d rank%s, stage %d, optimizer %s, parameters %s): per rank %.2f GiB of host memory at the peak =\n",
           ranks, ranks == 1 ? "" : "s", z->stage, zero_offload_name(z->offload_optimizer), zero_offload_name(z->offload_param), peak / GiB);
    printf("  %.2f GiB model states held in memory (fp32 shards, unit by unit on NVMe where offloaded)\n", he.states / GiB);
    printf("  + %.2f GiB gathered units, unit gradients and received shards (the schedule's most at once:", he.buffers / GiB);
    for (int k = 0; k < ZERO_EST_POOL_SIZES && he.pool_count[k] > 0; k++) {
        printf("%s %d x %.1f MiB", k > 0 ? "," : "", he.pool_count[k], he.pool_elems[k] * sizeof(float) / 1048576.0);
    }
    printf(")\n");
    printf("  + %.2f GiB NVMe step buffers and shard staging\n", he.host_buffers / GiB);
    printf("  + %.2f GiB activations at -b %d -t %d -r %d\n", host_acts / GiB, t->tc.B, t->tc.T, t->tc.recompute);
    printf("  the model states are %.2f GiB per rank in all (16 bytes/param); swap file %.2f GiB per rank; start-up and checkpoints are\n"
           "  partitioned: each rank fills, saves and loads its own shards through one unit at a time (%.2f GiB)\n",
           states / ranks / GiB, he.swap / GiB, he.unit / GiB);
    printf("host_estimate: peak_bytes_per_rank=%.0f engine_bytes_per_rank=%.0f activation_bytes=%.0f swap_bytes_per_rank=%.0f\n",
           peak, he.states + he.buffers + he.host_buffers, host_acts, he.swap);
}

// --estimate NODES:GPUS (after trainer_model, without parameters): DeepSpeed-style
// model-state memory per GPU and per node for every stage and offload, then the GPU
// trainer's activations at this run's -b, -t, -r and --attention, x bytes per element;
// with host_acts >= 0 (the CPU trainer's activations) this run's own host-engine figures
// too (trainer_estimate_host); printed by rank 0. Ends the program: returns main's exit status.
static int trainer_estimate(Trainer* t, size_t x, double host_acts) {
    const TrainConfig* tc = &t->tc;
    const GPT2Config* c = &t->config;
    int nodes = 0, gpus = 0;
    char tail;
    if (sscanf(tc->estimate, "%d:%d%c", &nodes, &gpus, &tail) != 2 || nodes < 1 || gpus < 1) {
        char msg[256];
        snprintf(msg, sizeof(msg), "flag --estimate: '%.64s' should be NODES:GPUS_PER_NODE, for example 1:8", tc->estimate);
        die_all(t->rank, msg);
    }
    if (t->rank == 0) {
        double largest = 0;
        for (int u = 0; u < gpt2_num_units(c); u++) {
            double n = (double)gpt2_unit_size(c, u);
            if (n > largest) { largest = n; }
        }
        // the GPU trainer's gradients are reduced in fp32 when asked (bf16 build; the fp32 build's
        // are fp32 anyway, with no extra buffer)
        int comm_fp32 = tc->zero.comm_dtype == ZERO_COMM_FP32 && x == 2;
        zero_estimate_print(stdout, tc->model, (double)gpt2_num_params(c), largest, nodes, gpus, comm_fp32);
        int flash = !strcmp(tc->attention, "flash");
        double act = gpu_activations_total(c, tc->B, tc->T, tc->recompute, flash, tc->vocab_tile, x);
        printf("activations: %.2f GiB per GPU (train_gpt2_zero3 in %s at -b %d -t %d -r %d --attention %s --vocab-tile %d; "
               "kernel scratch and cuBLASLt's workspace not counted)\n", act / 1073741824.0, x == 2 ? "bf16" : "fp32",
               tc->B, tc->T, tc->recompute, tc->attention, gpu_vocab_tile(c, tc->vocab_tile));
        if (host_acts >= 0) { trainer_estimate_host(t, nodes * gpus, host_acts); }
    }
    trainer_finish(t);
    return 0;
}

// ----------------------------------------------------------------------------
// the engine for GPT-2

// The order in which the forward and backward use the units. Forward: the embedding,
// the blocks, the final layernorm, then the embedding again as the classifier (tied
// weights). Backward: the classifier (adjacent to its forward use, so never gathered
// twice there), the final layernorm, the blocks in reverse. The encoder's backward
// needs only the token ids, not wte, so it is not a use. Whether wte stays gathered
// from the encoder to the classifier is the schedule's reuse-distance rule.
static int gpt2_schedule(const GPT2Config* c, int* out, int train) {
    int n = 0, L = c->num_layers;
    out[n++] = 0;
    for (int l = 0; l < L; l++) { out[n++] = 1 + l; }
    out[n++] = L + 1;
    out[n++] = 0;
    if (train) {
        out[n++] = 0;
        out[n++] = L + 1;
        for (int l = L - 1; l >= 0; l--) { out[n++] = 1 + l; }
    }
    return n;
}

// GPT-2 as the engines see it (llmc/gpt2.h's units): sizes, tensors with their weight
// decay, the two use schedules. The arrays live until gpt2_engine_model_free.
static void gpt2_engine_model(const GPT2Config* c, ZeroModel* m) {
    int nu = gpt2_num_units(c), nt = gpt2_num_tensors(c);
    memset(m, 0, sizeof(*m));
    size_t* numel = (size_t*)mallocCheck(nu * sizeof(size_t));
    for (int u = 0; u < nu; u++) { numel[u] = gpt2_unit_size(c, u); }
    TensorRange* ranges = (TensorRange*)mallocCheck(nt * sizeof(TensorRange));
    gpt2_tensor_ranges(c, ranges);
    ZeroTensor* tensors = (ZeroTensor*)mallocCheck(nt * sizeof(ZeroTensor));
    for (int i = 0; i < nt; i++) {
        ZeroTensor tr = {ranges[i].unit, ranges[i].offset, ranges[i].size, ranges[i].decay};
        tensors[i] = tr;
    }
    free(ranges);
    int* train = (int*)mallocCheck((2 * nu + 4) * sizeof(int));
    int* fwd = (int*)mallocCheck((2 * nu + 4) * sizeof(int));
    m->num_units = nu;
    m->unit_numel = numel;
    m->num_tensors = nt;
    m->tensors = tensors;
    m->uses[ZERO_PASS_TRAIN] = train;
    m->num_uses[ZERO_PASS_TRAIN] = gpt2_schedule(c, train, 1);
    m->uses[ZERO_PASS_FORWARD] = fwd;
    m->num_uses[ZERO_PASS_FORWARD] = gpt2_schedule(c, fwd, 0);
}

static void gpt2_engine_model_free(ZeroModel* m) {
    free((void*)m->unit_numel); free((void*)m->tensors);
    free((void*)m->uses[ZERO_PASS_TRAIN]); free((void*)m->uses[ZERO_PASS_FORWARD]);
    memset(m, 0, sizeof(*m));
}

// the engines' ZeroFillFn over a GPT2Source (ctx): a range of a unit read from the model
// file or made by the random init; llmc's message becomes the engine's
static int trainer_fill(void* ctx, int u, size_t begin, size_t n, float* out) {
    if (gpt2_source_read((const GPT2Source*)ctx, u, begin, n, out) != 0) { return zero_error("%s", llmc_errmsg()); }
    return 0;
}

// what an engine for this run is built from: the ZeRO configuration, AdamW's betas and
// eps, every rank, the initial parameters from t->source (model: gpt2_engine_model's)
static ZeroInit trainer_engine(Trainer* t, const ZeroModel* model) {
    job_doing("building the engine (this rank's shards of the model)");
    ZeroInit in;
    memset(&in, 0, sizeof(in));
    in.cfg = &t->tc.zero;
    in.model = model;
    in.fill = trainer_fill;
    in.fill_ctx = &t->source;
    in.beta1 = t->tc.beta1;
    in.beta2 = t->tc.beta2;
    in.eps = t->tc.eps;
    in.comm = MPI_COMM_WORLD;
    in.dpu = t->tc.dpu;
    in.threads = t->threads;
    return in;
}

// ----------------------------------------------------------------------------
// what trainer_run needs of a model

// the mean loss of one (B, T) batch of inputs and targets on this rank
typedef float (*TrainerLossFn)(void* self, const int* inputs, const int* targets);
// the probabilities of the next token after tokens[0..t) (the real vocabulary's, in order)
typedef const float* (*TrainerProbsFn)(void* self, const int* tokens, int t);

// Memory per rank, in bytes, in this order in the step table and the report: the model
// states and working set where the computation runs (params, grads, optimizer, buffers,
// activations), what the program allocated there, the peak in use, the host tiers and
// the swap file.
enum { MEM_PARAMS, MEM_GRADS, MEM_OPTIMIZER, MEM_BUFFERS, MEM_ACTIVATIONS, MEM_ALLOCATED, MEM_PEAK,
       MEM_HOST_PARAMS, MEM_HOST_GRADS, MEM_HOST_OPTIMIZER, MEM_HOST_BUFFERS, MEM_NVME, MEM_FIELDS };
static const char* const mem_names[MEM_FIELDS] = {"params", "grads", "optimizer", "buffers", "activations",
    "allocated", "peak", "host_params", "host_grads", "host_optimizer", "host_buffers", "nvme"};

typedef struct {
    void* self;
    Zero* zero;                 // the model's engine
    const char* device;         // where it computes, for the header and the report ("cpu", the GPU's name)
    const char* precision;      // "fp32", "bf16"
    const char* notes;          // more of the header's device line ("attention flash, 8 GPUs per node"), or ""
    double peak_flops;          // the device's peak bf16 FLOP/s for MFU: < 0 no MFU (CPU), 0 unknown
    // one training micro-step of grad_accum on this rank's batch: the forward and the
    // backward under one engine pass, the gradients of the mean loss / grad_accum accumulated
    void (*train_micro)(void* self, const int* inputs, const int* targets, int last_micro, int grad_accum);
    // the sum of the training micro-steps' mean losses since the last call; waits for the step
    double (*train_loss)(void* self);
    TrainerLossFn eval_loss;
    TrainerProbsFn next_probs;
    // the model's memory: out[MEM_ACTIVATIONS], out[MEM_ALLOCATED] and out[MEM_PEAK] set,
    // its scratch added to out[MEM_BUFFERS]; the engine's figures are in zs and out already
    void (*memory)(void* self, const ZeroStats* zs, double* out);
    // the memory in use on the device now, for the step line; NULL: not shown
    double (*device_in_use)(void* self);
    // named ranges for a profiler around the step and the update (the GPU's NVTX); NULL: none
    void (*range_push)(const char* name);
    void (*range_pop)(void);
} TrainerModel;

// ----------------------------------------------------------------------------
// evaluation between steps

// draws from probs (over the real vocabulary) with a uniform coin in [0, 1)
static int sample_token(const float* probs, int V, float coin) {
    float cdf = 0.0f;
    for (int i = 0; i < V; i++) {
        cdf += probs[i];
        if (coin < cdf) { return i; }
    }
    return V - 1;  // rounding: the cdf may end a hair below 1
}

// -v: the validation loss (mean over the batches and the ranks), printed by rank 0 and
// logged to main.log
static float trainer_validate(Trainer* t, const TrainerModel* m) {
    dataloader_reset(&t->val);
    double sum = 0.0;
    for (int i = 0; i < t->val_steps; i++) {
        if (dataloader_next_batch(&t->val) != 0) { trainer_fail(t->rank); }
        sum += m->eval_loss(m->self, t->val.inputs, t->val.targets);
    }
    return allreduce_mean((float)(sum / t->val_steps), t->world, "all-reduce of the validation loss");
}

// -s: a sample of -g tokens from start_token, one forward over the prefix per token. Every
// rank samples the same tokens from the same RNG (at stage 3 a forward needs every rank's
// shards); rank 0 prints them, decoded when the tokenizer has the model's vocabulary.
static void trainer_sample(Trainer* t, const TrainerModel* m, Rng* rng) {
    int gen_max = t->tc.gen_T < t->tc.T ? t->tc.gen_T : t->tc.T;
    int* tokens = (int*)mallocCheck((size_t)gen_max * sizeof(int));
    tokens[0] = t->start_token;
    if (t->rank == 0) { printf("generating:\n---\n"); }
    for (int i = 1; i < gen_max; i++) {
        const float* p = m->next_probs(m->self, tokens, i);
        int next = sample_token(p, t->config.vocab_size, rng_float(rng));
        tokens[i] = next;
        if (t->rank != 0) { continue; }
        const char* piece = t->have_tokenizer ? tokenizer_decode(&t->tokenizer, (uint32_t)next) : NULL;
        if (piece != NULL) { fputs(piece, stdout); } else { printf("<%d>", next); }
        fflush(stdout);
    }
    if (t->rank == 0) { printf("\n---\n"); }
    free(tokens);
}

// ----------------------------------------------------------------------------
// memory and the report

// this rank's memory in MEM_* order: the engine's peaks, then the model's
static void trainer_memory(const TrainerModel* m, double* out) {
    ZeroStats zs;
    zeroCheck(zero_stats(m->zero, &zs));
    memset(out, 0, MEM_FIELDS * sizeof(double));
    out[MEM_PARAMS] = zs.mem[ZERO_MEM_PARAMS];
    out[MEM_GRADS] = zs.mem[ZERO_MEM_GRADS];
    out[MEM_OPTIMIZER] = zs.mem[ZERO_MEM_OPTIMIZER];
    out[MEM_BUFFERS] = zs.mem[ZERO_MEM_BUFFERS];
    out[MEM_HOST_PARAMS] = zs.mem[ZERO_MEM_HOST_PARAMS];
    out[MEM_HOST_GRADS] = zs.mem[ZERO_MEM_HOST_GRADS];
    out[MEM_HOST_OPTIMIZER] = zs.mem[ZERO_MEM_HOST_OPTIMIZER];
    out[MEM_HOST_BUFFERS] = zs.mem[ZERO_MEM_HOST_BUFFERS];
    out[MEM_NVME] = zs.nvme_bytes;
    m->memory(m->self, &zs, out);
}

// gathers every rank's figures to rank 0 (all: (world, MEM_FIELDS)); print: rank 0
// prints one line per rank, `where` naming the compute memory ("" or "GPU ")
static void memory_gather(const double* mine, double* all, int rank, int world, int print, const char* where) {
    mpiWatched("gather of the memory figures", MPI_Gather(mine, MEM_FIELDS, MPI_DOUBLE, all, MEM_FIELDS, MPI_DOUBLE, 0, MPI_COMM_WORLD));
    for (int r = 0; print && rank == 0 && r < world; r++) {
        const double* x = all + r * MEM_FIELDS;
        printf("memory rank %d (MiB): %sparams %.1f, grads %.1f, optimizer %.1f, buffers %.1f, activations %.1f",
               r, where, x[MEM_PARAMS] / 1048576, x[MEM_GRADS] / 1048576, x[MEM_OPTIMIZER] / 1048576,
               x[MEM_BUFFERS] / 1048576, x[MEM_ACTIVATIONS] / 1048576);
        double host = x[MEM_HOST_PARAMS] + x[MEM_HOST_GRADS] + x[MEM_HOST_OPTIMIZER] + x[MEM_HOST_BUFFERS];
        if (host > 0 || x[MEM_NVME] > 0) { printf(" | host %.1f, nvme %.1f", host / 1048576, x[MEM_NVME] / 1048576); }
        printf("\n");
    }
}

// What the kernel says of this process, not the engines' accounting: the peak resident
// memory (VmHWM) of start-up and of the steps, and the bytes it made the storage read and
// write during the steps (/proc/self/io, O_DIRECT and io_uring's workers included).
enum { KERNEL_RSS_STARTUP, KERNEL_RSS_STEPS, KERNEL_READ, KERNEL_WRITE, KERNEL_FIELDS };
static const char* const kernel_names[KERNEL_FIELDS] = {"peak_rss_startup", "peak_rss_steps", "read_bytes_per_step",
                                                        "write_bytes_per_step"};

// the number after "key" in a /proc file (kB figures of status in bytes), -1 if absent
static double proc_self_value(const char* file, const char* key) {
    FILE* f = fopen(file, "r");
    if (f == NULL) { return -1; }
    char line[256];
    double v = -1;
    size_t n = strlen(key);
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, key, n) != 0) { continue; }
        v = atof(line + n);
        if (strstr(line, "kB") != NULL) { v *= 1024; }
        break;
    }
    fclose(f);
    return v;
}

// start-up's peak is read and the kernel's high-water mark reset (writing 5 to clear_refs,
// Linux >= 4.0), so that the steps' peak is the steps' own; without the reset the steps'
// figure includes start-up
static void kernel_steps_begin(double* k) {
    k[KERNEL_RSS_STARTUP] = proc_self_value("/proc/self/status", "VmHWM:");
    FILE* f = fopen("/proc/self/clear_refs", "w");
    if (f != NULL) { fputs("5", f); fclose(f); }
    k[KERNEL_READ] = proc_self_value("/proc/self/io", "read_bytes:");
    k[KERNEL_WRITE] = proc_self_value("/proc/self/io", "write_bytes:");
}

static void kernel_steps_end(double* k, int steps) {
    double n = steps > 0 ? steps : 1;
    k[KERNEL_RSS_STEPS] = proc_self_value("/proc/self/status", "VmHWM:");
    k[KERNEL_READ] = (proc_self_value("/proc/self/io", "read_bytes:") - k[KERNEL_READ]) / n;
    k[KERNEL_WRITE] = (proc_self_value("/proc/self/io", "write_bytes:") - k[KERNEL_WRITE]) / n;
}

// one training step and one validation, as the report records them
typedef struct { int step; float loss; double ms, tokens_per_s; float lr, norm; double wait_ms, mfu; int skipped; } StepRecord;  // mfu < 0: unknown
typedef struct { int step; float loss; } ValRecord;

// What the report says about the run's engine per training step, averaged: the bytes each
// collective sent, the wait, the tiers' traffic and the update's time. The traffic of
// validation, sampling and checkpoints between steps is included (run with -v 0 -s 0 -n 0
// to leave it out).
// net: the bytes every rank's engine sent, summed over the ranks (rank 0's copy), by link
// (inside a node, between nodes) and collective: over the whole run, then over the steps.
typedef struct {
    ZeroStats start; double wait_total; int steps;
    double net[2][ZERO_NUM_LINKS][ZERO_NUM_COLLECTIVES];
} TrainerTraffic;

// root.key.per_rank: one object per rank, {rank, names[f]: values[r * nfields + f]}
static void report_per_rank(cJSON* root, const char* key, const char* const* names, int nfields, const double* values, int world) {
    cJSON* arr = cJSON_AddArrayToObject(cJSON_AddObjectToObject(root, key), "per_rank");
    for (int r = 0; r < world; r++) {
        cJSON* o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "rank", r);
        for (int f = 0; f < nfields; f++) { cJSON_AddNumberToObject(o, names[f], values[r * nfields + f]); }
        cJSON_AddItemToArray(arr, o);
    }
}

// the --report JSON (DESIGN's contract and more), written whole or not at all
static int trainer_report(const Trainer* t, const TrainerModel* m, const StepRecord* steps, int nsteps,
                          const ValRecord* vals, int nvals, const double* mem, const double* kernel,
                          const TrainerTraffic* tr, double flops_per_token) {
    const TrainConfig* tc = &t->tc;
    ZeroStats zs;
    zeroCheck(zero_stats(m->zero, &zs));
    cJSON* root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "world_size", t->world);
    cJSON_AddNumberToObject(root, "zero_stage", tc->zero.stage);
    cJSON_AddNumberToObject(root, "num_parameters", (double)gpt2_num_params(&t->config));
    cJSON_AddNumberToObject(root, "num_parameters_padded", (double)zs.padded_total);
    cJSON_AddStringToObject(root, "device", m->device);
    cJSON_AddStringToObject(root, "precision", m->precision);
    cJSON_AddStringToObject(root, "zero_backend", zero_name(m->zero));
    cJSON* cfg = cJSON_AddObjectToObject(root, "config");
    cJSON_AddStringToObject(cfg, "model", tc->model);
    cJSON_AddNumberToObject(cfg, "B", tc->B);
    cJSON_AddNumberToObject(cfg, "T", tc->T);
    cJSON_AddNumberToObject(cfg, "grad_accum_steps", t->grad_accum);
    cJSON_AddNumberToObject(cfg, "num_layers", t->config.num_layers);
    cJSON_AddNumberToObject(cfg, "channels", t->config.channels);
    cJSON_AddNumberToObject(cfg, "num_heads", t->config.num_heads);
    cJSON_AddNumberToObject(cfg, "recompute", tc->recompute);
    cJSON_AddNumberToObject(cfg, "flops_per_token", flops_per_token);
    char zdesc[512];
    zero_config_describe(&tc->zero, zdesc, sizeof(zdesc));
    cJSON_AddStringToObject(cfg, "zero", zdesc);
    int skipped = 0;
    for (int i = 0; i < nsteps; i++) { skipped += steps[i].skipped; }
    cJSON_AddNumberToObject(root, "skipped_steps", skipped);
    cJSON* arr = cJSON_AddArrayToObject(root, "steps");
    for (int i = 0; i < nsteps; i++) {
        cJSON* s = cJSON_CreateObject();
        cJSON_AddNumberToObject(s, "step", steps[i].step);
        cJSON_AddNumberToObject(s, "loss", steps[i].loss);
        cJSON_AddNumberToObject(s, "ms", steps[i].ms);
        cJSON_AddNumberToObject(s, "tokens_per_s", steps[i].tokens_per_s);
        cJSON_AddNumberToObject(s, "lr", steps[i].lr);
        cJSON_AddNumberToObject(s, "grad_norm", steps[i].norm);
        cJSON_AddNumberToObject(s, "comm_wait_ms", steps[i].wait_ms);
        cJSON_AddBoolToObject(s, "skipped", steps[i].skipped);
        if (steps[i].mfu >= 0) { cJSON_AddNumberToObject(s, "mfu", steps[i].mfu); }
        cJSON_AddItemToArray(arr, s);
    }
    arr = cJSON_AddArrayToObject(root, "val");
    for (int i = 0; i < nvals; i++) {
        cJSON* s = cJSON_CreateObject();
        cJSON_AddNumberToObject(s, "step", vals[i].step);
        cJSON_AddNumberToObject(s, "loss", vals[i].loss);
        cJSON_AddItemToArray(arr, s);
    }
    // memory.per_rank: world rows of MEM_FIELDS numbers (bytes); params, grads and
    // optimizer are the engine's model states (peaks), buffers its working set (gathered
    // units, unit gradients) plus the model's scratch, peak the most in use at once
    report_per_rank(root, "memory", mem_names, MEM_FIELDS, mem, t->world);
    // kernel.per_rank: the kernel's figures (kernel_steps_begin); -1 where /proc lacks one
    report_per_rank(root, "kernel", kernel_names, KERNEL_FIELDS, kernel, t->world);
    // comm: the bytes a rank sends per optimizer step as a ring algorithm moves them and
    // the wait; transfers_per_step: the bytes between device, host and NVMe, and the
    // AdamW update's time, wherever it ran
    double n = tr->steps > 0 ? tr->steps : 1;
    cJSON* comm = cJSON_AddObjectToObject(root, "comm");
    cJSON* per = cJSON_AddObjectToObject(comm, "per_rank_bytes_per_step");
    cJSON_AddNumberToObject(per, "allgather", (zs.comm_bytes[ZERO_ALLGATHER] - tr->start.comm_bytes[ZERO_ALLGATHER]) / n);
    cJSON_AddNumberToObject(per, "reduce_scatter", (zs.comm_bytes[ZERO_REDUCE_SCATTER] - tr->start.comm_bytes[ZERO_REDUCE_SCATTER]) / n);
    cJSON_AddNumberToObject(per, "allreduce", (zs.comm_bytes[ZERO_ALLREDUCE] - tr->start.comm_bytes[ZERO_ALLREDUCE]) / n);
    cJSON_AddNumberToObject(comm, "wait_ms_per_step", tr->wait_total / n);
    // network: the bytes all ranks' engines sent, summed, split by where they went: inside
    // a node or between nodes (by the phase's communicator, zero3/comm.h's "Nodes");
    // job_bytes over the whole run (start-up included: what a network counter sees),
    // job_bytes_per_step per collective over the steps. Only where the engine splits them.
    if (zs.links_known) {
        static const char* const link_names[ZERO_NUM_LINKS] = {"intra", "inter"};
        static const char* const kind_keys[ZERO_NUM_COLLECTIVES] = {"allgather", "reduce_scatter", "allreduce", "broadcast", "scalar"};
        cJSON* net = cJSON_AddObjectToObject(comm, "network");
        cJSON_AddNumberToObject(net, "nodes", zs.nodes);
        cJSON_AddNumberToObject(net, "ranks_per_node", zs.ranks_per_node);
        cJSON_AddStringToObject(net, "topology", zs.ranks_per_node > 0 ? "even" : "uneven (every byte counted as crossing)");
        cJSON* job = cJSON_AddObjectToObject(net, "job_bytes");
        cJSON* per_step = cJSON_AddObjectToObject(net, "job_bytes_per_step");
        for (int l = 0; l < ZERO_NUM_LINKS; l++) {
            double total = 0.0;
            cJSON* o = cJSON_AddObjectToObject(per_step, link_names[l]);
            for (int k = 0; k < ZERO_NUM_COLLECTIVES; k++) {
                total += tr->net[0][l][k];
                cJSON_AddNumberToObject(o, kind_keys[k], tr->net[1][l][k] / n);
            }
            cJSON_AddNumberToObject(job, link_names[l], total);
        }
    }
    cJSON* mv = cJSON_AddObjectToObject(root, "transfers_per_step");
    cJSON_AddNumberToObject(mv, "device_to_host", (zs.moved[ZERO_MOVE_D2H] - tr->start.moved[ZERO_MOVE_D2H]) / n);
    cJSON_AddNumberToObject(mv, "host_to_device", (zs.moved[ZERO_MOVE_H2D] - tr->start.moved[ZERO_MOVE_H2D]) / n);
    cJSON_AddNumberToObject(mv, "nvme_read", (zs.moved[ZERO_MOVE_NVME_READ] - tr->start.moved[ZERO_MOVE_NVME_READ]) / n);
    cJSON_AddNumberToObject(mv, "nvme_write", (zs.moved[ZERO_MOVE_NVME_WRITE] - tr->start.moved[ZERO_MOVE_NVME_WRITE]) / n);
    cJSON_AddNumberToObject(mv, "update_ms", (zs.update_ms - tr->start.update_ms) / n);
    cJSON_AddNumberToObject(mv, "nvme_wait_ms", (zs.nvme_wait_ms - tr->start.nvme_wait_ms) / n);
    cJSON_AddNumberToObject(mv, "update_nvme_wait_ms", (zs.update_nvme_wait_ms - tr->start.update_nvme_wait_ms) / n);

    char* text = cJSON_Print(root);
    cJSON_Delete(root);
    AtomicFile f;
    if (text == NULL) { return llmc_error("cannot write report %s: out of memory", tc->report); }
    int rc = atomic_open(&f, tc->report);
    if (rc == 0) { rc = atomic_commit(&f, fputs(text, f.fp) >= 0 && fputs("\n", f.fp) >= 0); }
    free(text);
    return rc;
}

// ----------------------------------------------------------------------------
// the step loop

// the run's table, printed by rank 0
static void trainer_print_header(const Trainer* t, const TrainerModel* m, double flops_per_token) {
    const TrainConfig* tc = &t->tc;
    const GPT2Config* c = &t->config;
    char zdesc[512];
    zero_config_describe(&tc->zero, zdesc, sizeof(zdesc));
    printf("+-----------------------+\n");
    printf("| model                 | %s\n", tc->model);
    printf("| max_seq_len, vocab    | %d, %d (padded %d)\n", c->max_seq_len, c->vocab_size, c->padded_vocab_size);
    printf("| layers, heads, chans  | %d, %d, %d\n", c->num_layers, c->num_heads, c->channels);
    printf("| parameters            | %zu\n", gpt2_num_params(c));
    printf("| ranks, B, T           | %d, %d, %d  (grad accumulation %d, %ld tokens/step)\n", t->world, tc->B, tc->T,
           t->grad_accum, t->total_batch);
    printf("| steps, lr, schedule   | %d, %g, %s (warmup %d, final %g)\n", t->max_steps, tc->lr, tc->lr_schedule, tc->warmup,
           tc->final_lr_frac);
    printf("| ZeRO                  | %s, %s backend\n", zdesc, zero_name(m->zero));
    printf("| device, precision     | %s, %s, recompute %d%s, %d threads per rank\n", m->device, m->precision, tc->recompute,
           m->notes, t->threads);
    if (m->peak_flops > 0) {
        printf("| MFU basis             | %.3g FLOP/token (6*matmul params + 12*L*T*C), peak bf16 %.0f TFLOP/s\n",
               flops_per_token, m->peak_flops / 1e12);
    } else if (m->peak_flops == 0) {
        printf("| MFU basis             | %.3g FLOP/token (6*matmul params + 12*L*T*C), peak bf16 n/a for this device\n", flops_per_token);
    }
    printf("+-----------------------+\n");
}

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

// Resumes, when -y 1, from the newest checkpoint in -o whose files pass their checksums
// (llmc/checkpoint.h), at any world size and stage (checkpoint_resume); stops every rank
// when there are checkpoints but none passes. Returns the step to start from, and in
// *skipped the steps skipped before it
static int trainer_resume(Trainer* t, const TrainerModel* m, Rng* sample_rng, int* skipped) {
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

// Whether every parameter of the engine's fp32 master is finite: each rank checks its own
// range of each unit (zero_master_shard, one unit's range at a time), and the first
// non-finite parameter of the model (unit order) is found over the ranks: a checkpoint of a
// non-finite state would be resumed from and poison every step after it. Says which
// parameter (its tensor, element and place in unit order) and its value in *msg when not.
static int trainer_params_finite(const Trainer* t, const TrainerModel* m, char* msg, size_t len) {
    const GPT2Config* c = &t->config;
    size_t largest = 0, begin, n;
    for (int u = 0; u < gpt2_num_units(c); u++) {
        zeroCheck(zero_master_shard(m->zero, u, &begin, &n, NULL));
        if (n > largest) { largest = n; }
    }
    float* buf = (float*)mallocCheck((largest > 0 ? largest : 1) * sizeof(float));
    long long bad = LLONG_MAX;  // this rank's first non-finite parameter, in unit order
    float value = 0.0f;
    for (int u = 0; u < gpt2_num_units(c) && bad == LLONG_MAX; u++) {
        zeroCheck(zero_master_shard(m->zero, u, &begin, &n, buf));
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

static void trainer_checkpoint(Trainer* t, const TrainerModel* m, int step, int skipped, const Rng* sample_rng) {
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
    if (checkpoint_prune(tc->output_dir, tc->keep_checkpoints, step, tc->allow_unverified, t->rank, t->world) != 0) {
        fprintf(stderr, "warning: %s\n", llmc_errmsg());
    }
}

// The run: resume, the header and the memory table, then per step validation (-v),
// samples (-s) and checkpoints (-n) where asked, the micro-steps of gradient accumulation,
// the engine's optimizer step, the step line and main.log; at the end the report.
static void trainer_run(Trainer* t, const TrainerModel* m) {
    const TrainConfig* tc = &t->tc;
    int rank = t->rank, world = t->world;
    LRScheduler sched;
    memset(&sched, 0, sizeof(sched));
    if (lr_scheduler_init(&sched, tc->lr_schedule, tc->lr, tc->warmup, t->max_steps, tc->final_lr_frac) != 0) { trainer_fail(rank); }
    Rng sample_rng;
    rng_init(&sample_rng, tc->seed ^ 0xA5A5A5A5ull);
    int skipped = 0;  // optimizer steps skipped so far (non-finite loss or norm): AdamW's t did not advance
    int start_step = trainer_resume(t, m, &sample_rng, &skipped);
    int skipped_before = skipped, skipped_in_a_row = 0, signalled = 0;
    // test hook (docs/TESTING.md): the last rank's loss of this step is NaN, as an overflow would make it
    const char* nan_env = getenv("ZERO3_TEST_NAN_STEP");
    int nan_step = nan_env != NULL ? atoi(nan_env) : -1;

    double flops_per_token = gpt2_flops_per_token(&t->config, tc->T);
    if (rank == 0) { trainer_print_header(t, m, flops_per_token); }
    double* mem_all = (double*)mallocCheck(MEM_FIELDS * world * sizeof(double));
    double mine[MEM_FIELDS];
    trainer_memory(m, mine);
    memory_gather(mine, mem_all, rank, world, 1, m->device_in_use != NULL ? "GPU " : "");

    StepRecord* steps = (StepRecord*)mallocCheck((t->max_steps + 1) * sizeof(StepRecord));
    ValRecord* vals = (ValRecord*)mallocCheck((t->max_steps + 2) * sizeof(ValRecord));
    int nsteps = 0, nvals = 0, have_batch = 0;
    TrainerTraffic traffic;
    memset(&traffic, 0, sizeof(traffic));
    zeroCheck(zero_stats(m->zero, &traffic.start));
    double kernel[KERNEL_FIELDS];
    kernel_steps_begin(kernel);

    for (int step = start_step; step <= t->max_steps; step++) {
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
            log_line(tc->output_dir, rank, "s:%d tel:%f\n", step, val_loss);
            vals[nvals++] = (ValRecord){step, val_loss};
        }
        if (tc->sample_every > 0 && ((step > 0 && step % tc->sample_every == 0) || last_step)) {
            job_doing("sampling at step %d", step);
            trainer_sample(t, m, &sample_rng);
        }
        int saved = 0;
        // -x 0 -n N: the checkpoint of step 0, the initial model (a run of no steps saves it)
        if (tc->checkpoint_every > 0 && (step > start_step || t->max_steps == 0) && (step % tc->checkpoint_every == 0 || last_step)) {
            trainer_checkpoint(t, m, step, skipped, &sample_rng);
            saved = 1;
        }
        if (last_step) { break; }
        if (stop) {
            signalled = 1;
            // where a -n checkpoint of this step would be, so that -y 1 continues the same run;
            // a resumed run signalled before its first step has its checkpoint already
            if (tc->output_dir == NULL) {
                if (rank == 0) { printf("received %s at step %d: no checkpoint without -o, exiting\n", job_signal_name(stop), step); }
            } else {
                if (!saved && !(step == start_step && start_step > 0)) { trainer_checkpoint(t, m, step, skipped, &sample_rng); }
                if (rank == 0) { printf("received %s: saved checkpoint at step %d in %s, exiting\n", job_signal_name(stop), step, tc->output_dir); }
            }
            break;
        }

        job_doing("training step %d", step + 1);
        if (m->range_push != NULL) { m->range_push("step"); }
        ZeroStats before;
        zeroCheck(zero_stats(m->zero, &before));
        double t0 = zero_now_ms();
        for (int micro = 0; micro < t->grad_accum; micro++) {
            if (!tc->overfit_single_batch || !have_batch) {
                if (dataloader_next_batch(&t->train) != 0) { trainer_fail(rank); }
                have_batch = 1;
            }
            m->train_micro(m->self, t->train.inputs, t->train.targets, micro == t->grad_accum - 1, t->grad_accum);
        }
        // the loss before the update: every rank sees the same mean, so all skip alike
        float my_loss = (float)(m->train_loss(m->self) / t->grad_accum);
        if (step == nan_step && rank == world - 1) { my_loss = NAN; }
        float loss = allreduce_mean(my_loss, world, "all-reduce of the loss");
        float lr = lr_scheduler_get(&sched, step);
        // AdamW's 1-based step counts only the updates made, as DeepSpeed's does over overflows
        ZeroStep zs = {lr, tc->weight_decay, tc->grad_clip, step + 1 - skipped, tc->seed, !isfinite(loss)};
        if (m->range_push != NULL) { m->range_push("optimizer"); }
        zeroCheck(zero_step(m->zero, &zs));
        if (m->range_pop != NULL) { m->range_pop(); }
        double ms = zero_now_ms() - t0;
        ZeroStats after;
        zeroCheck(zero_stats(m->zero, &after));
        // the engine skipped the update when either is not finite (zero3/zero.h's ZeroStep)
        int skip = !isfinite(loss) || !isfinite(after.norm);
        skipped += skip;
        skipped_in_a_row = skip ? skipped_in_a_row + 1 : 0;
        double wait = after.wait_ms - before.wait_ms;
        traffic.wait_total += wait;
        if (m->range_pop != NULL) { m->range_pop(); }

        double tps = t->total_batch / (ms / 1e3);
        // MFU per device: this rank's share of the tokens on its device's peak
        double mfu = m->peak_flops > 0 ? flops_per_token * (tps / world) / m->peak_flops : -1.0;
        char extra[128] = "";
        if (m->peak_flops >= 0) {
            if (mfu >= 0) { snprintf(extra, sizeof(extra), " | MFU %.1f%%", 100.0 * mfu); } else { snprintf(extra, sizeof(extra), " | MFU n/a"); }
        }
        if (m->device_in_use != NULL) {
            size_t len = strlen(extra);
            snprintf(extra + len, sizeof(extra) - len, " | GPU mem %.0f MiB", m->device_in_use(m->self) / 1048576.0);
        }
        if (rank == 0) {
            printf("step %4d/%d | loss %.6f | lr %.2e | norm %.4f | %.1f ms | %.0f tok/s%s | comm wait %.1f ms%s\n",
                   step + 1, t->max_steps, loss, lr, after.norm, ms, tps, extra, wait, skip ? " | skipped (non-finite loss/norm)" : "");
        }
        log_line(tc->output_dir, rank, "s:%d trl:%f\n", step, loss);
        steps[nsteps++] = (StepRecord){step, loss, ms, tps, lr, after.norm, wait, mfu, skip};
        if (skipped_in_a_row > tc->max_skipped_steps) { break; }
    }
    int stopped = skipped_in_a_row > tc->max_skipped_steps;
    // a run that trained nothing did not do what it was asked: not a success (a signal's
    // stop is, and -y 1 goes on from its checkpoint)
    int none_trained = !stopped && !signalled && nsteps > 0 && skipped - skipped_before == nsteps;
    traffic.steps = nsteps;
    job_doing("writing the report and the memory figures");

    // the report: memory peaks over the whole run (gathered again: the working set grows
    // during the steps), and the training steps' traffic per step
    trainer_memory(m, mine);
    memory_gather(mine, mem_all, rank, world, 0, "");
    kernel_steps_end(kernel, nsteps);
    double* kernel_all = (double*)mallocCheck(KERNEL_FIELDS * world * sizeof(double));
    mpiWatched("gather of the kernel's figures", MPI_Gather(kernel, KERNEL_FIELDS, MPI_DOUBLE, kernel_all, KERNEL_FIELDS,
                                                             MPI_DOUBLE, 0, MPI_COMM_WORLD));
    {   // what crossed between nodes and what stayed inside them, summed over the ranks
        ZeroStats now;
        zeroCheck(zero_stats(m->zero, &now));
        double mine_net[2][ZERO_NUM_LINKS][ZERO_NUM_COLLECTIVES];
        for (int l = 0; l < ZERO_NUM_LINKS; l++) {
            for (int k = 0; k < ZERO_NUM_COLLECTIVES; k++) {
                mine_net[0][l][k] = now.link_bytes[l][k];
                mine_net[1][l][k] = now.link_bytes[l][k] - traffic.start.link_bytes[l][k];
            }
        }
        mpiWatched("sum of the network figures", MPI_Reduce(mine_net, traffic.net, 2 * ZERO_NUM_LINKS * ZERO_NUM_COLLECTIVES,
                                                             MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD));
    }
    if (rank == 0 && tc->report != NULL &&
        trainer_report(t, m, steps, nsteps, vals, nvals, mem_all, kernel_all, &traffic, flops_per_token) != 0) {
        fprintf(stderr, "error: %s\n", llmc_errmsg());
        trainer_abort();
    }
    int last = nsteps > 0 ? steps[nsteps - 1].step + 1 : start_step;
    free(steps); free(vals); free(mem_all); free(kernel_all);
    if (stopped) {  // every rank saw the same loss and norm: all stop here together
        zeroCheck(zero_flush(m->zero));
        char msg[4400];
        snprintf(msg, sizeof(msg), "stopping at step %d: %d consecutive step%s had a non-finite loss or gradient norm and "
                 "were skipped, more than --max-skipped-steps %d; none of them changed the model%s%s%s", last, skipped_in_a_row,
                 skipped_in_a_row == 1 ? "" : "s",
                 tc->max_skipped_steps, tc->output_dir != NULL ? " (the checkpoints in " : "",
                 tc->output_dir != NULL ? tc->output_dir : "", tc->output_dir != NULL ? " are those of good steps)" : "");
        die_all(rank, msg);
    }
    if (none_trained) {
        zeroCheck(zero_flush(m->zero));
        char msg[256], which[96];
        if (nsteps == 1) { snprintf(which, sizeof(which), "the one step of this run (step %d)", last); }
        else { snprintf(which, sizeof(which), "every one of this run's %d steps (steps %d-%d)", nsteps, start_step + 1, last); }
        snprintf(msg, sizeof(msg), "%s had a non-finite loss or gradient norm and was skipped: nothing was trained", which);
        die_all(rank, msg);
    }
}

#endif // LLMC_TRAINER_H
