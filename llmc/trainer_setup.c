// A training run's set-up (llmc/trainer_setup.h): start-up, the model, the checks, the engine for GPT-2, --estimate, the end.
#include "llmc/trainer_setup.h" // the interface, its types and the headers its bodies use
#include <stdio.h>            // printf, fprintf, snprintf
#include <stdlib.h>           // malloc, getenv
#include <string.h>           // strstr, memset
#include <ctype.h>            // isdigit: --estimate's value
#include <math.h>             // isfinite: --estimate's value
#include <signal.h>           // signal: SIGXFSZ ignored, so a full file fails a write instead
#include <unistd.h>           // access, sysconf: cores per node
#include <sys/stat.h>         // stat, mkdir
#include <dirent.h>           // opendir: -o's files, against the inputs
#include <mpi.h>              // ranks, the checks across ranks
#include "llmc/trainer_proc.h" // die_all, mpiWatched, zeroCheck, trainer_fail
#include "llmc/utils.h"       // llmc_error, mallocCheck
#include "llmc/job.h"         // the launcher's check, -o's lock, the stop signals, job_doing
#include "llmc/checkpoint.h"  // checkpoint_name_parse: which of -o's files are a run's
#include "llmc/activations.h" // the GPU trainer's activations, for --estimate
#include "zero3/config.h"     // zero_config_resolve_batch, zero_config_describe, zero_hash_bytes
#include "zero3/estimate.h"   // zero_estimate_print: model-state memory for --estimate
#include "zero3/host.h"       // zero_host_estimate: the host engine's memory for --estimate
#include "zero3/dev_estimate.h" // zero_dev_estimate: the device engine's memory for --estimate, every tier
#include "zero3/util.h"     // zero_error, zero_errmsg, zero_now_ms
#include "zero3/watchdog.h"  // zero_watchdog_start, zero_watchdog_stop
#include "llmc/manifest.h"  // checkpoint_name_parse, CHECKPOINT_FILE_*: which of -o's files are a run's

void trainer_start(Trainer* t, int* argc, char*** argv, const char* program, int gelu_fusion) {
    memset(t, 0, sizeof(*t));
    t->started_ms = zero_now_ms();
    t->source.fd = -1;  // no model file open
    setvbuf(stdout, NULL, _IOLBF, 0);  // line by line into logs and pipes, not in 4 KiB blocks
    signal(SIGXFSZ, SIG_IGN);
    JobLauncher launcher;
    // before MPI_Init, which sets some of the variables for a singleton (and which Open MPI
    // aborts with a misleading page when srun gave no MPI plugin: refused here instead)
    if (job_launcher_read(&launcher) != 0) { fprintf(stderr, "error: %s\n", llmc_errmsg()); exit(EXIT_FAILURE); }
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
    MPI_Comm local;
    mpiCheck(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, t->rank, MPI_INFO_NULL, &local));
    mpiCheck(MPI_Comm_size(local, &t->local_size));
    MPI_Comm_free(&local);
    // (-pr differs by process under srun's scripts: each says its own, then every one stops)
    int bad = rc == 0 && job_layout_check(t->tc.mp_processes, t->tc.mp_rank, t->tc.mp_per_node, t->world, t->rank, t->local_size) != 0;
    int any = bad;
    if (bad) { fprintf(stderr, "error: rank %d: %s\n", t->rank, llmc_errmsg()); }
    mpiCheck(MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    if (any) { die_all(t->rank, "llm.c's flags -pn/-pr/-pg disagree with the ranks MPI started (above): nothing was trained"); }
    // -ge: the build's own, or where the forward's GELU is in the matmul's epilogue (1) also
    // the backward's in its DGELU epilogue (2, opted into)
    int ge = t->tc.gelu_fusion;
    if (rc == 0 && ge != -1 && ge != gelu_fusion && !(gelu_fusion == 1 && ge == 2)) {
        char msg[256];
        snprintf(msg, sizeof(msg), "flag -ge %d: %s %s; run with -ge %s (or -1)", ge, program,
                 gelu_fusion ? "fuses the forward's GELU into its matmul (1), and the backward's too with -ge 2"
                             : "computes its GELU apart from the matmuls (0)", gelu_fusion ? "1 or 2" : "0");
        die_all(t->rank, msg);
    }
    if (ge == -1) { t->tc.gelu_fusion = gelu_fusion; }
    // after MPI_Init, so that these are ours: a first SIGTERM, SIGINT or SIGUSR1 stops the
    // run at its next step boundary (trainer_run), a second one or --stop-grace ends it
    // at once; the swap files go with either (nvme_remove_all only unlinks)
    job_signals_install(t->rank, t->tc.stop_grace, nvme_remove_all);
    if (rc != 0 || llmc_input_add(t->tc.ds_config, "--ds-config") != 0) { die_all(t->rank, llmc_errmsg()); }
    if (zero_watchdog_start(t->tc.collective_timeout, MPI_COMM_WORLD) != 0) { die_all(t->rank, zero_errmsg()); }
    if (t->rank == 0 && t->tc.warnings[0] != '\0') { fputs(t->tc.warnings, stderr); }
    const char* env = getenv("OMP_NUM_THREADS");
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    t->threads = env != NULL ? atoi(env) : (int)(cores / t->local_size);
    if (t->threads < 1) { t->threads = 1; }
}

void trainer_model(Trainer* t) {
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
    if (tc->log_tensors > 0 && tc->output_dir == NULL) {
        die_all(t->rank, "flag --log-tensors: its figures go to main.jsonl in -o's directory: give -o DIR");
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
// there (a checkpoint's model, state or marker file, their temporaries, main.log and
// main.jsonl; by device
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
        if (checkpoint_name_parse(e->d_name, &step, &rank, &tmp) == CHECKPOINT_FILE_NONE && strcmp(e->d_name, "main.log") != 0 &&
            strcmp(e->d_name, "main.jsonl") != 0) {
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

// --prompt: its GPT-2 BPE tokens (--encoder's files), which every sample continues. Refused
// with a message: no samples to continue (-s 0), a model whose vocabulary is not GPT-2's, a
// prompt that is no UTF-8 or leaves no room for a token in a sample (-g, at most -t).
static int trainer_prompt(Trainer* t) {
    const TrainConfig* tc = &t->tc;
    if (tc->sample_every <= 0) { return llmc_error("flag --prompt: there are no samples to continue (-s 0)"); }
    if (t->config.vocab_size != GPT2_VOCAB_SIZE) {
        return llmc_error("flag --prompt: the model's vocabulary has %d tokens, not GPT-2's %d, which the prompt is encoded in",
                          t->config.vocab_size, GPT2_VOCAB_SIZE);
    }
    char json[4200], merges[4200];
    snprintf(json, sizeof(json), "%s/encoder.json", tc->encoder);
    snprintf(merges, sizeof(merges), "%s/vocab.bpe", tc->encoder);
    Bpe b;
    memset(&b, 0, sizeof(b));
    uint16_t* toks = NULL;
    size_t n = 0;
    int rc = bpe_init(&b, json, merges);
    if (rc != 0) {
        char why[sizeof(llmc_errbuf)];
        snprintf(why, sizeof(why), "%s", llmc_errmsg());
        llmc_error("flag --prompt: cannot load GPT-2's encoder from --encoder %s: %s", tc->encoder, why);
    } else if ((rc = bpe_encode(&b, tc->prompt, strlen(tc->prompt), &toks, &n)) != 0) {
        char why[sizeof(llmc_errbuf)];
        snprintf(why, sizeof(why), "%s", llmc_errmsg());
        llmc_error("flag --prompt: %s", why);
    }
    bpe_free(&b);
    if (rc != 0) { return -1; }
    int room = (tc->gen_T < tc->T ? tc->gen_T : tc->T) - 1;  // a sample's tokens after <|endoftext|>
    if (n == 0 || (long)n >= room) {
        free(toks);
        return n == 0 ? llmc_error("flag --prompt: the prompt is empty")
                      : llmc_error("flag --prompt: its %zu tokens leave no room for a generated one in a sample of %d "
                                   "(-g %d, at most -t %d): give a shorter prompt or a larger -g", n, room + 1, tc->gen_T, tc->T);
    }
    t->prompt = (int*)mallocCheck(n * sizeof(int));
    for (size_t i = 0; i < n; i++) { t->prompt[i] = toks[i]; }
    t->prompt_n = (int)n;
    free(toks);
    return 0;
}

// Where the run will write, checked before it starts, after its inputs are known (so that
// no output replaces one): -o a directory every rank can create files in, its main.log
// and main.jsonl (rank 0) no link, FIFO or input; --report's directory writable and its path neither
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
        if (!bad && t->rank == 0) {
            snprintf(path, sizeof(path), "%s/main.jsonl", tc->output_dir);
            bad = output_check(path) != 0;
        }
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

// -h 1: the eval file, read by every rank (each node may have its own copy, so each rank
// reports its own error, as for the shards); every rank must have the same examples, or
// their forwards would not pair up
static void trainer_hellaswag_open(Trainer* t) {
    const TrainConfig* tc = &t->tc;
    job_doing("reading the HellaSwag examples (--hellaswag-file %s)", tc->hellaswag_file);
    if (evalset_load(&t->hellaswag, tc->hellaswag_file, tc->B, tc->T, t->config.vocab_size) != 0) {
        fprintf(stderr, "error: rank %d: flag -h 1: %s (write it with ./tokenize --hellaswag hellaswag_val.jsonl %s, or "
                        "llm.c's dev/data/hellaswag.py; or run with -h 0)\n", t->rank, llmc_errmsg(), tc->hellaswag_file);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (llmc_input_add(tc->hellaswag_file, "--hellaswag-file") != 0) { trainer_fail(t->rank); }
    int mine[2] = {t->hellaswag.completions, -t->hellaswag.completions};
    mpiWatched("all-reduce of the HellaSwag set's size", MPI_Allreduce(MPI_IN_PLACE, mine, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    if (mine[0] != -mine[1]) { die_all(t->rank, "flag -h 1: the ranks read different --hellaswag-file sets (numbers of completions differ)"); }
}

void trainer_setup(Trainer* t) {
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
    if (tc->hellaswag) { trainer_hellaswag_open(t); }
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
    if (tc->prompt != NULL && trainer_prompt(t) != 0) { die_all(rank, llmc_errmsg()); }
    trainer_check_outputs(t);
}

void trainer_finish(Trainer* t) {
    job_doing("ending the run");
    free(t->prompt);
    if (t->have_tokenizer) { tokenizer_free(&t->tokenizer); }
    if (t->loaders_ready) { dataloader_free(&t->train); }
    if (t->loaders_ready && t->tc.val_every > 0) { dataloader_free(&t->val); }
    evalset_free(&t->hellaswag);
    gpt2_source_close(&t->source);
    zero_watchdog_stop();
    MPI_Finalize();
}

void gpt2_engine_model(const GPT2Config* c, ZeroModel* m) {
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

void gpt2_engine_model_free(ZeroModel* m) {
    free((void*)m->unit_numel); free((void*)m->tensors);
    free((void*)m->uses[ZERO_PASS_TRAIN]); free((void*)m->uses[ZERO_PASS_FORWARD]);
    memset(m, 0, sizeof(*m));
}

int trainer_fill(void* ctx, int u, size_t begin, size_t n, float* out) {
    if (gpt2_source_read((const GPT2Source*)ctx, u, begin, n, out) != 0) { return zero_error("%s", llmc_errmsg()); }
    return 0;
}

ZeroInit trainer_engine(Trainer* t, const ZeroModel* model) {
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

// --estimate's figures for this very run on the host engine (the CPU trainer: host_acts,
// its activations' bytes at -r recompute) at NODES x GPUS ranks: what each rank will hold at its peak, from
// zero_host_estimate (the engine's own plan, schedule and sizes) and the activations. The
// last line is for scripts: peak_bytes_per_rank=... swap_bytes_per_rank=...
static void trainer_estimate_host(const Trainer* t, int ranks, double host_acts, int recompute) {
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
    printf("  + %.2f GiB activations at -b %d -t %d -r %d\n", host_acts / GiB, t->tc.B, t->tc.T, recompute);
    printf("  the model states are %.2f GiB per rank in all (16 bytes/param); swap file %.2f GiB per rank; start-up and checkpoints are\n"
           "  partitioned: each rank fills, saves and loads its own shards through one unit at a time (%.2f GiB)\n",
           states / ranks / GiB, he.swap / GiB, he.unit / GiB);
    printf("host_estimate: peak_bytes_per_rank=%.0f engine_bytes_per_rank=%.0f activation_bytes=%.0f swap_bytes_per_rank=%.0f\n",
           peak, he.states + he.buffers + he.host_buffers, host_acts, he.swap);
}

// --estimate's value: NODES:GPUS[,gpu=GIB,host=GIB[,nvme=GB]]; the second part asks for
// the largest GPT-3 size that trains on GPUs of gpu GiB with host GiB of memory and nvme GB
// of NVMe per node (fit 1). Returns 0, or -1 with the reason in why.
typedef struct { int nodes, gpus, fit; double gpu_gib, host_gib, nvme_gb; } EstimateAsk;

// a count of ranks: digits only, 1 to ZERO_PLAN_MAX_WORLD; *s moves past it
static int estimate_count(const char** s, int* out) {
    long v = 0;
    const char* p = *s;
    if (!isdigit((unsigned char)*p)) { return -1; }
    while (isdigit((unsigned char)*p) && v <= ZERO_PLAN_MAX_WORLD) { v = v * 10 + (*p++ - '0'); }
    if (v < 1 || v > ZERO_PLAN_MAX_WORLD) { return -1; }
    *out = (int)v;
    *s = p;
    return 0;
}

static int trainer_estimate_parse(const char* arg, EstimateAsk* q, char* why, size_t cap) {
    memset(q, 0, sizeof(*q));
    const char* s = arg;
    if (estimate_count(&s, &q->nodes) != 0 || *s++ != ':' || estimate_count(&s, &q->gpus) != 0) {
        snprintf(why, cap, "NODES and GPUS must be whole numbers from 1 to %d", ZERO_PLAN_MAX_WORLD);
        return -1;
    }
    if ((long)q->nodes * q->gpus > ZERO_PLAN_MAX_WORLD) { snprintf(why, cap, "more than %d ranks", ZERO_PLAN_MAX_WORLD); return -1; }
    int seen[3] = {0, 0, 0};
    static const char* const keys[3] = {"gpu", "host", "nvme"};
    double* vals[3] = {&q->gpu_gib, &q->host_gib, &q->nvme_gb};
    while (*s == ',') {
        s++;
        int k = 0;
        while (k < 3 && !(strncmp(s, keys[k], strlen(keys[k])) == 0 && s[strlen(keys[k])] == '=')) { k++; }
        if (k == 3) { snprintf(why, cap, "'%.16s' is not gpu=GIB, host=GIB or nvme=GB", *s ? s : "(nothing after ',')"); return -1; }
        if (seen[k]++) { snprintf(why, cap, "%s= is given twice", keys[k]); return -1; }
        s += strlen(keys[k]) + 1;
        char* end = NULL;
        // (a decimal number: no sign, hex, inf or nan, which strtod would take)
        double v = isdigit((unsigned char)*s) && strspn(s, "0123456789.eE+-") >= strcspn(s, ",") ? strtod(s, &end) : -1.0;
        if (end == NULL || (*end != ',' && *end != '\0') || !isfinite(v) || v < 0 || v > 1e9 || (k < 2 && v <= 0)) {
            snprintf(why, cap, "%s= needs a number%s (got '%.16s')", keys[k], k < 2 ? " above 0" : " >= 0", s);
            return -1;
        }
        *vals[k] = v;
        s = end;
    }
    if (*s != '\0') { snprintf(why, cap, "unexpected '%.16s'", s); return -1; }
    q->fit = seen[0] || seen[1] || seen[2];
    if (q->fit && !(seen[0] && seen[1])) { snprintf(why, cap, "the fit needs both gpu=GIB and host=GIB (nvme=GB is optional, 0 without)"); return -1; }
    return 0;
}

// the device engine's tiers: the order they are printed in (by stage), and `pref`, the
// order the fit tries them in (least offload first)
static const struct { int stage; ZeroOffload opt, param; int pref; } dev_tiers[] = {
    {0, ZERO_OFFLOAD_NONE, ZERO_OFFLOAD_NONE, 0},  {1, ZERO_OFFLOAD_NONE, ZERO_OFFLOAD_NONE, 1},
    {1, ZERO_OFFLOAD_CPU, ZERO_OFFLOAD_NONE, 4},   {2, ZERO_OFFLOAD_NONE, ZERO_OFFLOAD_NONE, 2},
    {2, ZERO_OFFLOAD_CPU, ZERO_OFFLOAD_NONE, 5},   {3, ZERO_OFFLOAD_NONE, ZERO_OFFLOAD_NONE, 3},
    {3, ZERO_OFFLOAD_CPU, ZERO_OFFLOAD_NONE, 6},   {3, ZERO_OFFLOAD_CPU, ZERO_OFFLOAD_CPU, 7},
    {3, ZERO_OFFLOAD_CPU, ZERO_OFFLOAD_NVME, 10},  {3, ZERO_OFFLOAD_NVME, ZERO_OFFLOAD_NONE, 8},
    {3, ZERO_OFFLOAD_NVME, ZERO_OFFLOAD_CPU, 9},   {3, ZERO_OFFLOAD_NVME, ZERO_OFFLOAD_NVME, 11},
};
#define DEV_TIERS ((int)(sizeof(dev_tiers) / sizeof(dev_tiers[0])))

// one tier of the device engine for model c at this run's -b -t -r --attention --vocab-tile
// and ZeRO knobs on `world` ranks: *gpu the GPU peak per rank (the engine, then the larger
// of its init's fp32 unit and the activations), *acts the activations. Returns 0, or -1
// with zero_errmsg() (a tier the run's knobs rule out: MiCS with offload)
static int trainer_dev_tier(const TrainConfig* tc, const GPT2Config* c, int i, int world, size_t x, ZeroDevEstimate* e,
                            double* gpu, double* acts) {
    ZeroConfig z = tc->zero;
    z.stage = dev_tiers[i].stage;
    z.offload_optimizer = dev_tiers[i].opt;
    z.offload_param = dev_tiers[i].param;
    if (z.stage != 3) {  // MiCS and ZeRO++ are stage 3's
        z.mics_shard_size = -1;
        z.hpz_partition_size = 1;
        z.quantized_weights = z.quantized_gradients = 0;
    }
    if (z.mics_shard_size > 0 && z.mics_shard_size < world && z.offload_optimizer != ZERO_OFFLOAD_NONE) {
        return zero_error("MiCS does not run with optimizer offload");
    }
    ZeroModel spec;
    gpt2_engine_model(c, &spec);
    int rc = zero_dev_estimate(&spec, &z, world, x, tc->dpu && z.offload_optimizer == ZERO_OFFLOAD_CPU, e);
    gpt2_engine_model_free(&spec);
    *acts = gpt2_activations_total(c, tc->B, tc->T, tc->recompute, !strcmp(tc->attention, "flash"), tc->vocab_tile, ACT_GPU, x);
    *gpu = e->gpu + (e->gpu_init > *acts ? e->gpu_init : *acts);
    return rc;
}

static int trainer_pool_buffers(const ZeroDevEstimate* e) {
    int n = 0;
    for (int i = 0; i < e->npools; i++) { n += e->pool_count[i]; }
    return n;
}

// the device engine's figures per rank for this run's model at every tier, a table and
// then one line each for scripts
static void trainer_estimate_device(const Trainer* t, int nodes, int gpus, size_t x) {
    const double GiB = 1073741824.0;
    const TrainConfig* tc = &t->tc;
    int world = nodes * gpus;
    printf("train_gpt2_zero3 on its device engine (%s), per rank of %d x %d, at -b %d -t %d -r %d --attention %s --vocab-tile %d%s: "
           "the GPU holds the engine's arrays and the larger of the activations and the init's fp32 unit; the host pins the "
           "offloaded states\n", x == 2 ? "bf16" : "fp32", nodes, gpus, tc->B, tc->T, tc->recompute, tc->attention,
           gpt2_vocab_tile(&t->config, tc->vocab_tile), tc->dpu ? " --dpu 1" : "");
    for (int i = 0; i < DEV_TIERS; i++) {
        ZeroDevEstimate e;
        double gpu = 0, acts = 0;
        if (trainer_dev_tier(tc, &t->config, i, world, x, &e, &gpu, &acts) != 0) {
            printf("  stage %d, optimizer %s, parameters %s: cannot estimate: %s\n", dev_tiers[i].stage,
                   zero_offload_name(dev_tiers[i].opt), zero_offload_name(dev_tiers[i].param), zero_errmsg());
            continue;
        }
        printf("  stage %d, optimizer %-4s, parameters %-4s: GPU %8.2f GiB (engine %.2f + activations %.2f), host %8.2f GiB, NVMe %8.2f GiB\n",
               dev_tiers[i].stage, zero_offload_name(dev_tiers[i].opt), zero_offload_name(dev_tiers[i].param), gpu / GiB,
               e.gpu / GiB, acts / GiB, e.host / GiB, e.nvme / GiB);
    }
    for (int i = 0; i < DEV_TIERS; i++) {
        ZeroDevEstimate e;
        double gpu = 0, acts = 0;
        if (trainer_dev_tier(tc, &t->config, i, world, x, &e, &gpu, &acts) != 0) { continue; }
        printf("dev_estimate: stage=%d offload_optimizer=%s offload_param=%s gpu_peak_per_rank=%.0f host_pinned_per_rank=%.0f "
               "nvme_per_rank=%.0f gpu_engine=%.0f gpu_activations=%.0f gpu_init=%.0f gpu_params=%.0f gpu_grads=%.0f "
               "gpu_optimizer=%.0f gpu_buffers=%.0f host_params=%.0f host_grads=%.0f host_optimizer=%.0f host_buffers=%.0f "
               "gather_buffers=%d\n",
               dev_tiers[i].stage, zero_offload_name(dev_tiers[i].opt), zero_offload_name(dev_tiers[i].param), gpu, e.host, e.nvme,
               e.gpu, acts, e.gpu_init, e.gpu_params, e.gpu_grads, e.gpu_optimizer, e.gpu_units + e.gpu_grad_pools + e.gpu_comm,
               e.host_params, e.host_grads, e.host_optimizer, e.host_staging, trainer_pool_buffers(&e));
    }
}

// the share of each memory the fit lets the counted bytes fill: on the GPU the rest is the
// CUDA context's, cuBLAS(Lt)'s workspace, NCCL's and the allocator's (scripts/run_common.sh
// plans 70 GiB of an 80 GB GPU), on the host the system's and the processes' own
#define EST_USABLE (7.0 / 8.0)

// the fit of one GPT-3 size: the first tier in dev_tiers' `pref` order whose GPU peak per
// rank, host memory per node and swap files per node are within the budgets; -1 if none.
// *min_gpu: the least GPU peak of any tier (what it would take)
static int trainer_fit_size(const TrainConfig* tc, const GPT2Config* c, const EstimateAsk* q, size_t x, ZeroDevEstimate* e,
                            double* gpu, double* min_gpu) {
    const double GiB = 1073741824.0;
    double gpu_cap = q->gpu_gib * GiB * EST_USABLE, host_cap = q->host_gib * GiB * EST_USABLE, nvme_cap = q->nvme_gb * 1e9;
    *min_gpu = -1;
    for (int pref = 0; pref < DEV_TIERS; pref++) {
        int i = 0;
        while (dev_tiers[i].pref != pref) { i++; }
        double acts;
        if (trainer_dev_tier(tc, c, i, q->nodes * q->gpus, x, e, gpu, &acts) != 0) { continue; }
        if (*min_gpu < 0 || *gpu < *min_gpu) { *min_gpu = *gpu; }
        if (*gpu <= gpu_cap && e->host * q->gpus <= host_cap && e->nvme * q->gpus <= nvme_cap) { return i; }
    }
    return -1;
}

// --estimate N:G,gpu=..,host=..[,nvme=..]: every GPT-3 size the trainer knows (llmc/gpt2.h's
// gpt3_sizes) at this run's -b -t -r --attention --vocab-tile and ZeRO knobs, whether one of
// the device engine's tiers fits it, and the largest that does; the last line is for scripts
static void trainer_estimate_fit(const Trainer* t, const EstimateAsk* q, size_t x) {
    const double GiB = 1073741824.0;
    const TrainConfig* tc = &t->tc;
    int flash = !strcmp(tc->attention, "flash"), best = -1, best_tier = -1;
    double best_gpu = 0, best_host = 0, best_nvme = 0, best_params = 0;
    printf("the largest GPT-3 on %d x %d GPU(s) of %g GiB (%.1f GiB counted) with %g GiB of host memory (%.1f GiB counted) and "
           "%g GB of NVMe per node, at -b %d -t %d -r %d --attention %s --vocab-tile %d (the estimator's figures, the device "
           "engine's tiers):\n", q->nodes, q->gpus, q->gpu_gib, q->gpu_gib * EST_USABLE, q->host_gib, q->host_gib * EST_USABLE,
           q->nvme_gb, tc->B, tc->T, tc->recompute, tc->attention, tc->vocab_tile);
    for (int k = 0; k < (int)(sizeof(gpt3_sizes) / sizeof(gpt3_sizes[0])); k++) {
        char desc[32];
        GPT2Config c;
        memset(&c, 0, sizeof(c));
        snprintf(desc, sizeof(desc), "gpt3:c%d", gpt3_sizes[k].channels);
        if (gpt2_config_from_descriptor(desc, &c) != 0) { continue; }
        int hs = c.channels / c.num_heads;
        printf("  %-12s %5s: ", desc, gpt3_sizes[k].name);
        if (tc->T > c.max_seq_len) { printf("-t %d exceeds its %d positions\n", tc->T, c.max_seq_len); continue; }
        // (llmc/attention_flash.cuh's head sizes: the bf16 build's tensor-core kernels 64, 80, 96,
        // 128; the fp32 build's CUDA-core ones 64, 96, 128)
        int flash_hs = hs == 64 || hs == 96 || hs == 128 || (x == 2 && hs == 80);
        if (flash && !flash_hs) { printf("--attention flash has no kernel for its head size %d\n", hs); continue; }
        ZeroDevEstimate e;
        double gpu = 0, min_gpu = 0;
        int i = trainer_fit_size(tc, &c, q, x, &e, &gpu, &min_gpu);
        if (i < 0) {
            printf("does not fit (the least GPU any tier needs: %.2f GiB per rank)\n", min_gpu / GiB);
            continue;
        }
        printf("fits at stage %d, optimizer %s, parameters %s: GPU %.2f GiB per rank, host %.2f GiB and NVMe %.1f GB per node\n",
               dev_tiers[i].stage, zero_offload_name(dev_tiers[i].opt), zero_offload_name(dev_tiers[i].param), gpu / GiB,
               e.host * q->gpus / GiB, e.nvme * q->gpus / 1e9);
        best = k; best_tier = i; best_gpu = gpu; best_host = e.host * q->gpus; best_nvme = e.nvme * q->gpus;
        best_params = (double)gpt2_num_params(&c);
    }
    if (best < 0) { printf("dev_fit: largest=none\n"); return; }
    printf("dev_fit: largest=gpt3:c%d name=%s params=%.0f stage=%d offload_optimizer=%s offload_param=%s gpu_peak_per_rank=%.0f "
           "host_pinned_per_node=%.0f nvme_per_node=%.0f\n", gpt3_sizes[best].channels, gpt3_sizes[best].name, best_params,
           dev_tiers[best_tier].stage, zero_offload_name(dev_tiers[best_tier].opt), zero_offload_name(dev_tiers[best_tier].param),
           best_gpu, best_host, best_nvme);
}

// -r -1 for --estimate: with gpu=, the least recompute whose activations fit beside this
// run's device engine on such a GPU, as the trainer chooses at its start from the memory
// then free (llmc/activations.h); without, llm.c's 1. Said on a line of its own.
static int trainer_estimate_recompute(const Trainer* t, const EstimateAsk* q, size_t x) {
    const TrainConfig* tc = &t->tc;
    const double GiB = 1073741824.0;
    if (!q->fit) {
        printf("recompute: -r -1 is chosen at the GPU trainer's start from the memory then free; the figures below take 1 "
               "(give gpu=GIB to --estimate for its choice)\n");
        return 1;
    }
    ZeroModel spec;
    ZeroDevEstimate e;
    gpt2_engine_model(&t->config, &spec);
    int rc = zero_dev_estimate(&spec, &tc->zero, q->nodes * q->gpus, x, tc->dpu && tc->zero.offload_optimizer == ZERO_OFFLOAD_CPU, &e);
    gpt2_engine_model_free(&spec);
    if (rc != 0) {
        printf("recompute: -r -1: no estimate of this run's engine (%s); the figures below take 1\n", zero_errmsg());
        return 1;
    }
    int flash = !strcmp(tc->attention, "flash");
    double total = q->gpu_gib * GiB, room = total - e.gpu - gpt2_recompute_reserve(total), acts[3];
    for (int k = 0; k < 3; k++) { acts[k] = gpt2_activations_total(&t->config, tc->B, tc->T, k, flash, tc->vocab_tile, ACT_GPU, x); }
    int r = gpt2_recompute_auto(&t->config, tc->B, tc->T, flash, tc->vocab_tile, x, room);
    printf("recompute: -r -1 takes -r %d on a GPU of %.0f GiB%s: %.2f GiB left for the activations beside this run's engine "
           "(%.2f GiB) and the margin kept back (5%%, at least 1 GiB); they take %.2f GiB at -r 0, %.2f at -r 1, %.2f at -r 2\n",
           r, q->gpu_gib, acts[r] > room ? " (none fits)" : "", room / GiB, e.gpu / GiB, acts[0] / GiB, acts[1] / GiB,
           acts[2] / GiB);
    return r;
}

int trainer_estimate(Trainer* t, size_t x, double host_acts) {
    const TrainConfig* tc = &t->tc;
    const GPT2Config* c = &t->config;
    EstimateAsk q;
    char why[160];
    if (trainer_estimate_parse(tc->estimate, &q, why, sizeof(why)) != 0) {
        char msg[512];
        snprintf(msg, sizeof(msg), "flag --estimate: '%.64s' should be NODES:GPUS_PER_NODE[,gpu=GIB,host=GIB[,nvme=GB]], for "
                 "example 1:8 or 1:1,gpu=80,host=128,nvme=2000: %s", tc->estimate, why);
        die_all(t->rank, msg);
    }
    int nodes = q.nodes, gpus = q.gpus;
    if (t->rank == 0) {
        int host_recompute = tc->recompute < 0 ? 1 : tc->recompute;  // (the CPU trainer's, host_acts')
        if (tc->recompute < 0) { t->tc.recompute = trainer_estimate_recompute(t, &q, x); }
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
        double act = gpt2_activations_total(c, tc->B, tc->T, tc->recompute, flash, tc->vocab_tile, ACT_GPU, x);
        printf("activations: %.2f GiB per GPU (train_gpt2_zero3 in %s at -b %d -t %d -r %d --attention %s --vocab-tile %d; "
               "kernel scratch and cuBLASLt's workspace not counted)\n", act / 1073741824.0, x == 2 ? "bf16" : "fp32",
               tc->B, tc->T, tc->recompute, tc->attention, gpt2_vocab_tile(c, tc->vocab_tile));
        trainer_estimate_device(t, nodes, gpus, x);
        if (q.fit) { trainer_estimate_fit(t, &q, x); }
        if (host_acts >= 0) { trainer_estimate_host(t, nodes * gpus, host_acts, host_recompute); }
    }
    trainer_finish(t);
    return 0;
}
