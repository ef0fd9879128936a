// The trainer's command line (llmc/args.h): its table of options, usage, the strict parse.
#include "llmc/args.h" // the interface, its types and the headers its bodies use
#include <string.h>  // strcmp, strncmp, memset
#include <math.h>    // isnan for the JSON's unset values
#include "llmc/utils.h"  // llmc_error
#include "zero3/config_json.h"  // zero_config_load_json: --ds-config
#include "zero3/util.h"     // zero_error, zero_errmsg, zero_now_ms

#define TC(m) OPT_FIELD(TrainConfig, m)
#define K30 1073741824.0  // 2^30
#define K20 1048576.0     // 2^20

// The trainer's own options, once each (zero3/options.h); the ZeRO ones are zero_options
// (zero3/config.c). llm.c's short flags keep llm.c's meanings and defaults.
static const OptRow args_options[] = {
    { .group = "Data and model",
      .short_flag = "-i", .type = OPT_STRING, TC(train_pattern), .def = "dev/data/tinyshakespeare/tiny_shakespeare_train.bin",
      .arg = "<pattern>", .trainer = OPT_BOTH, .help = "train token shards, a glob" },
    { .short_flag = "-j", .type = OPT_STRING, TC(val_pattern), .def = "dev/data/tinyshakespeare/tiny_shakespeare_val.bin",
      .arg = "<pattern>", .trainer = OPT_BOTH, .help = "validation token shards, a glob" },
    { .short_flag = "-e", .type = OPT_STRING, TC(model), .def = "d12", .arg = "<model>", .trainer = OPT_BOTH,
      .help = "llm.c model .bin, or a descriptor: dN, gpt2:dN, gpt3:cC" },
    { .long_flag = "--tokenizer", .type = OPT_STRING, TC(tokenizer), .def = "dev/data/gpt2_tokenizer.bin", .arg = "<file>",
      .trainer = OPT_BOTH, .help = "tokenizer for decoding samples" },
    { .short_flag = "-o", .type = OPT_STRING, TC(output_dir), .def = NULL, .arg = "<dir>", .trainer = OPT_BOTH,
      .help = "output directory for main.log and checkpoints" },

    { .group = "Batch and optimizer",
      .short_flag = "-b", .type = OPT_INT, TC(B), .lo = 1, .hi = K20, .def = "4", .trainer = OPT_BOTH,
      .help = "micro batch size per rank (--ds-config's train_micro_batch_size_per_gpu when not given)" },
    { .short_flag = "-t", .type = OPT_INT, TC(T), .lo = 1, .hi = K20, .def = "1024", .trainer = OPT_BOTH, .help = "sequence length" },
    { .short_flag = "-d", .type = OPT_INT, TC(total_batch_size), .lo = 1, .hi = 1099511627776.0, .unset = "-1", .def = "-1",
      .trainer = OPT_BOTH, .help = "total batch size in tokens over all ranks, for gradient accumulation (-1: B*T*ranks)" },
    { .short_flag = "-x", .type = OPT_INT, TC(max_steps), .lo = -1, .hi = K30, .def = "-1", .trainer = OPT_BOTH,
      .help = "max steps (-1: one epoch)" },
    { .short_flag = "-k", .type = OPT_CHOICE, TC(lr_schedule), .def = "cosine", .choices = "cosine|linear|constant|wsd",
      .trainer = OPT_BOTH, .help = "learning rate schedule (wsd: llm.c's warm-up, stable, then 1 - sqrt decay over the last "
                                   "20% of the steps)" },
    { .short_flag = "-l", .type = OPT_FLOAT, TC(lr), .lo = 0, .hi = 10, .def = "3e-4", .trainer = OPT_BOTH,
      .help = "learning rate (--ds-config's optimizer.params.lr when not given)" },
    { .short_flag = "-u", .type = OPT_INT, TC(warmup), .lo = 0, .hi = K30, .def = "0", .trainer = OPT_BOTH, .help = "warmup steps" },
    { .short_flag = "-q", .type = OPT_FLOAT, TC(final_lr_frac), .lo = 0, .hi = 1, .def = "1.0", .trainer = OPT_BOTH,
      .help = "final learning rate, a fraction of -l" },
    { .short_flag = "-c", .type = OPT_FLOAT, TC(weight_decay), .lo = 0, .hi = 10, .def = "0.0", .trainer = OPT_BOTH,
      .help = "weight decay (--ds-config's optimizer.params.weight_decay when not given)" },
    { .long_flag = "--grad-clip", .type = OPT_FLOAT, TC(grad_clip), .lo = 0, .hi = 1e6, .def = "1.0", .trainer = OPT_BOTH,
      .help = "clip the global gradient norm, 0 = off (--ds-config's gradient_clipping when not given)" },
    { .long_flag = "--seed", .type = OPT_U64, TC(seed), .def = "1337", .trainer = OPT_BOTH, .help = "seed for init and shuffling" },
    { .long_flag = "--shuffle", .type = OPT_BOOL, TC(shuffle), .hi = 1, .def = "1", .trainer = OPT_BOTH,
      .help = "shuffle the training shards and batches" },
    { .short_flag = "-a", .type = OPT_BOOL, TC(overfit_single_batch), .hi = 1, .def = "0", .trainer = OPT_BOTH,
      .help = "overfit a single batch" },
    { .short_flag = "-sl", .type = OPT_FLOAT, TC(skip_lossz), .lo = 0, .hi = 1e6, .def = "0", .arg = "<z>", .trainer = OPT_BOTH,
      .help = "skip the update when the loss's z-score over the last 128 steps' (the step's own included, llm.c's outlier "
              "detector) passes z; 0: off" },
    { .short_flag = "-sg", .type = OPT_FLOAT, TC(skip_gradz), .lo = 0, .hi = 1e6, .def = "0", .arg = "<z>", .trainer = OPT_BOTH,
      .help = "skip the update when the gradient norm's z-score over the last 128 steps' passes z (as -sl); 0: off" },

    { .group = "Validation, samples, checkpoints, report",
      .short_flag = "-v", .type = OPT_INT, TC(val_every), .lo = 0, .hi = K30, .def = "20", .trainer = OPT_BOTH,
      .help = "validate every N steps, 0 = never" },
    { .short_flag = "-m", .type = OPT_INT, TC(val_max_steps), .lo = 1, .hi = K30, .unset = "-1", .def = "20", .trainer = OPT_BOTH,
      .help = "validation batches, -1 = all (use -v 0 to disable validation)" },
    { .short_flag = "-s", .type = OPT_INT, TC(sample_every), .lo = 0, .hi = K30, .def = "20", .trainer = OPT_BOTH,
      .help = "sample every N steps, 0 = never" },
    { .short_flag = "-g", .type = OPT_INT, TC(gen_T), .lo = 1, .hi = K20, .def = "64", .trainer = OPT_BOTH,
      .help = "tokens to generate per sample, at most -t (the default is cut to -t)" },
    { .long_flag = "--prompt", .type = OPT_STRING, TC(prompt), .def = NULL, .arg = "<text>", .trainer = OPT_BOTH,
      .help = "samples continue this text (encoded with --encoder's GPT-2 BPE, after <|endoftext|>); without it they start "
              "from <|endoftext|> alone, as llm.c's" },
    { .long_flag = "--encoder", .type = OPT_STRING, TC(encoder), .def = "dev/data/gpt2", .arg = "<dir>", .trainer = OPT_BOTH,
      .help = "the directory of GPT-2's encoder.json and vocab.bpe, which --prompt is encoded with" },
    { .long_flag = "--temperature", .type = OPT_FLOAT, TC(temperature), .lo = 0, .lo_open = 1, .hi = 100, .def = "1.0",
      .trainer = OPT_BOTH, .help = "samples: the model's probabilities raised to 1/T and renormalized (below 1: surer)" },
    { .long_flag = "--top-k", .type = OPT_INT, TC(top_k), .lo = 0, .hi = K30, .def = "0", .arg = "<K>", .trainer = OPT_BOTH,
      .help = "samples: drawn from the K likeliest tokens only (1: the likeliest, whatever the seed); 0: all" },
    { .short_flag = "-h", .type = OPT_BOOL, TC(hellaswag), .hi = 1, .def = "0", .help_alone = 1, .arg = "0|1", .trainer = OPT_BOTH,
      .help = "llm.c's HellaSwag evaluation (acc_norm) every -v steps and at the last, over --hellaswag-file's examples "
              "split among the ranks; needs -b 4 or more (-h alone, or --help: this message)" },
    { .long_flag = "--hellaswag-file", .type = OPT_STRING, TC(hellaswag_file), .def = "dev/data/hellaswag/hellaswag_val.bin",
      .arg = "<file>", .trainer = OPT_BOTH,
      .help = "-h 1's examples: llm.c's eval file (from its hellaswag.py, or ./tokenize --hellaswag IN.jsonl OUT.bin)" },
    { .short_flag = "-n", .type = OPT_INT, TC(checkpoint_every), .lo = 0, .hi = K30, .def = "0", .trainer = OPT_BOTH,
      .help = "checkpoint every N steps, 0 = never" },
    { .short_flag = "-y", .type = OPT_BOOL, TC(resume), .hi = 1, .def = "0", .trainer = OPT_BOTH,
      .help = "resume from the newest checkpoint in -o whose checksums pass, at any world size and ZeRO stage" },
    { .short_flag = "-nk", .long_flag = "--keep-checkpoints", .type = OPT_INT, TC(keep_checkpoints), .lo = 0, .hi = K30, .def = "0",
      .arg = "<K>", .trainer = OPT_BOTH, .help = "after each checkpoint, remove all but the K newest that pass their checks (the "
                                                 "damaged ones are moved to -o's damaged_STEP); 0: keep every one" },
    { .short_flag = "-nm", .type = OPT_INT, TC(major_checkpoint_every), .lo = 0, .hi = K30, .def = "0", .arg = "<M>",
      .trainer = OPT_BOTH, .help = "with -nk: a checkpoint whose step is a multiple of M is never removed (llm.c's major "
                                   "checkpoints); 0: none" },
    { .long_flag = "--allow-unverified", .type = OPT_BOOL, TC(allow_unverified), .hi = 1, .def = "0", .trainer = OPT_BOTH,
      .help = "-y 1 may resume from a checkpoint whose DONE marker is empty, as versions before checksums wrote it, "
              "unverified (0: such a one is skipped)" },
    { .long_flag = "--save-bf16", .type = OPT_BOOL, TC(save_bf16), .hi = 1, .def = "0", .trainer = OPT_BOTH,
      .help = "checkpoints write the model file as llm.c's bf16 version 5, the one llm.c's GPU trainer reads (0: fp32 version 3)" },
    { .long_flag = "--report", .type = OPT_STRING, TC(report), .def = NULL, .arg = "<file>", .trainer = OPT_BOTH,
      .help = "write a JSON report at exit (rank 0)" },
    { .long_flag = "--log-tensors", .type = OPT_INT, TC(log_tensors), .lo = 0, .hi = K30, .def = "0", .arg = "<N>", .trainer = OPT_BOTH,
      .help = "every N steps, per tensor and per layer, the norm and largest magnitude of the parameters, m, v and the "
              "gradient and the update-to-parameter ratio, as a line of -o's main.jsonl (needs -o); 0 = off" },
    { .long_flag = "--profile-ops", .type = OPT_INT, TC(profile_ops), .lo = 0, .hi = K30, .def = "0", .arg = "<N>", .trainer = OPT_BOTH,
      .help = "time every op of the run's last N steps (CUDA events on the GPU, the clock on the CPU): a table at the end "
              "(each op's ms, share of the step, and its time over the floor its FLOPs and bytes allow), the same rows in "
              "--report's ops and in -o's main.jsonl, the timeline as -o's ops_trace.json (Chrome's trace format, for "
              "Perfetto); those steps are marked profiled and left out of the speed figures; 0 = off" },

    { .group = "Memory and compute",
      .short_flag = "-r", .type = OPT_INT, TC(recompute), .lo = -1, .hi = 2, .def = "-1", .arg = "-1|0|1|2", .trainer = OPT_BOTH,
      .help = "recompute: 0 none, 1 GELU, 2 GELU and layernorms; -1: the GPU trainer takes the least whose activations "
              "(--estimate's table) fit the GPU's memory free once the engine is built, less 5% (at least 1 GiB), every rank "
              "the most any needs; the CPU trainer takes 1 (llm.c's)" },
    { .long_flag = "--vocab-tile", .type = OPT_INT, TC(vocab_tile), .lo = 0, .hi = K30, .def = "0", .trainer = OPT_BOTH,
      .help = "the classifier and its loss in tiles of n vocabulary columns (online softmax): no (B,T,Vp) logits, at the cost "
              "of computing the logits of all tiles but the last again in the backward; n >= the padded vocabulary is one "
              "tile, no recompute. The GPU trainer needs a multiple of 8 (bf16) or 4 (fp32); 0: untiled" },
    { .long_flag = "--zero-backend", .type = OPT_CHOICE, TC(zero_backend), .def = "auto", .choices = "auto|device|host",
      .trainer = OPT_GPU, .help = "device = the model states on the GPU, collectives over NCCL (every stage, optimizer offload "
                                  "to the CPU, one GPU per rank); host = the ZeRO engine on the host over MPI, the GPU "
                                  "computing on copies (also NVMe and parameter offload, ranks sharing a GPU); auto = device "
                                  "when it can. The CPU trainer is always host." },
    { .long_flag = "--attention", .type = OPT_CHOICE, TC(attention), .def = "cublas", .choices = "cublas|flash", .trainer = OPT_GPU,
      .help = "attention through cuBLAS products and a (B,NH,T,T) matrix per layer, or the fused flash kernels with O(T) "
              "memory (on the tensor cores in bf16, head sizes 64, 80, 96, 128; the fp32 build's on the CUDA cores, 64, 96, "
              "128). The CPU trainer has one attention and ignores it." },
    { .long_flag = "--dpu", .type = OPT_BOOL, TC(dpu), .hi = 1, .def = "0", .trainer = OPT_GPU,
      .help = "with --offload-optimizer cpu: the CPU Adam of step i runs while the GPU computes step i+1 on the parameters "
              "of step i-1 (ZeRO-Offload's delayed parameter update)" },
    { .long_flag = "--matmul-tune", .type = OPT_INT, TC(matmul_tune), .lo = 0, .hi = 8, .def = "0", .arg = "<N>", .trainer = OPT_GPU,
      .help = "in the first step, each new matmul shape times up to N of cuBLASLt's candidate algorithms and keeps the "
              "fastest; every rank then takes rank 0's choices. The choice comes from timings: two runs may differ in their "
              "bits. 0 or 1: the heuristic's first answer, the same every run" },

    { .group = "llm.c's flags for its GPU and its launcher (checked: each means here what it says, or is refused)",
      .short_flag = "-lg", .type = OPT_INT, TC(log_gpu_every), .lo = -1, .hi = K30, .def = "-1", .trainer = OPT_BOTH,
      .help = "llm.c's GPU telemetry every N steps; not read here (the step line and --report carry memory and times): "
              "only -1 or 0 (off)" },
    { .short_flag = "-ge", .type = OPT_INT, TC(gelu_fusion), .lo = -1, .hi = 2, .def = "-1", .arg = "-1|0|1|2", .trainer = OPT_BOTH,
      .help = "llm.c's GELU fusion: 0 none (the CPU trainer, the fp32 GPU build), 1 the forward's, in the matmul's epilogue "
              "(the bf16 GPU build), 2 the backward's too, in the DGELU epilogue (the bf16 GPU build, opted into: one pass "
              "over (B,T,4C) a layer less, cuBLASLt's own GELU derivative); another is refused; -1: the build's" },
    { .short_flag = "-f", .type = OPT_BOOL, TC(tf32), .hi = 1, .def = "0", .arg = "0|1", .trainer = OPT_BOTH,
      .help = "llm.c's TF32 switch: nothing here computes in TF32 (fp32 is fp32, bf16 is bf16), so only 0" },
    { .short_flag = "-w", .type = OPT_BOOL, TC(master_weights), .hi = 1, .def = "1", .arg = "0|1", .trainer = OPT_BOTH,
      .help = "llm.c's fp32 master weights: ZeRO always keeps them (the optimizer states), so only 1" },
    { .short_flag = "-pn", .type = OPT_INT, TC(mp_processes), .lo = 1, .hi = K30, .unset = "-1", .def = "-1", .trainer = OPT_BOTH,
      .help = "llm.c's process count: checked against MPI's world size (-1: not checked)" },
    { .short_flag = "-pr", .type = OPT_INT, TC(mp_rank), .lo = 0, .hi = K30, .unset = "-1", .def = "-1", .trainer = OPT_BOTH,
      .help = "llm.c's process rank: checked against MPI's rank (-1: not checked)" },
    { .short_flag = "-pg", .type = OPT_INT, TC(mp_per_node), .lo = 1, .hi = K30, .unset = "-1", .def = "-1", .trainer = OPT_BOTH,
      .help = "llm.c's GPUs per node: checked against the processes MPI puts on this node (-1: not checked)" },
    { .short_flag = "-pi", .type = OPT_CHOICE, TC(mp_init), .def = "mpi", .choices = "mpi|fs|tcp", .trainer = OPT_BOTH,
      .help = "llm.c's NCCL bootstrap; here MPI's world always is, whichever is named, once -pn/-pr/-pg agree with it" },
    { .short_flag = "-pf", .type = OPT_STRING, TC(mp_fs_path), .def = NULL, .arg = "<dir>", .trainer = OPT_BOTH,
      .help = "llm.c's shared directory for -pi fs; not needed here (see -pi)" },
    { .short_flag = "-ps", .type = OPT_STRING, TC(mp_server), .def = NULL, .arg = "<ip>", .trainer = OPT_BOTH,
      .help = "llm.c's server address for -pi tcp; not needed here (see -pi)" },

    { .group = "Runs that go wrong",
      .long_flag = "--max-skipped-steps", .type = OPT_INT, TC(max_skipped_steps), .lo = 0, .hi = 1000000, .def = "3", .arg = "<n>",
      .trainer = OPT_BOTH, .help = "a step whose loss or gradient norm is not finite is skipped (no update); after n such steps "
                                   "in a row the next one stops the run, 0 = stop at the first" },
    { .long_flag = "--collective-timeout", .type = OPT_FLOAT, TC(collective_timeout), .lo = 0, .hi = 1e6, .def = "300", .arg = "<s>",
      .trainer = OPT_BOTH, .help = "a rank blocked in a collective (another rank stopped or stuck) or in a file's read or write "
                                   "(a stuck disk) for s seconds ends the job, naming the collective and the ranks that did "
                                   "not arrive, or the file; 0 = never" },
    { .long_flag = "--stop-grace", .type = OPT_INT, TC(stop_grace), .lo = 0, .hi = 1000000, .def = "60", .arg = "<s>",
      .trainer = OPT_BOTH, .help = "SIGTERM, SIGINT or SIGUSR1 stops the run at its next step boundary (with a checkpoint in "
                                   "-o); a process that does not get there within s seconds, or gets a second signal, ends "
                                   "at once, saying what it was doing; 0 = only a second signal" },

    { .group = "Configuration and tools",
      .long_flag = "--ds-config", .type = OPT_STRING, TC(ds_config), .def = NULL, .arg = "<file>", .trainer = OPT_BOTH,
      .help = "DeepSpeed-style JSON (zero_optimization, batch sizes, optimizer, gradient_clipping, bf16); flags override it" },
    { .long_flag = "--estimate", .type = OPT_STRING, TC(estimate), .def = NULL, .arg = "<nodes:gpus[,gpu=GiB,host=GiB[,nvme=GB]]>",
      .trainer = OPT_BOTH,
      .help = "print the ZeRO model-state memory of -e per GPU and per node for every stage, the GPU trainer's device engine "
              "per rank at every tier (GPU and pinned host peaks, swap file), and exit; with gpu= and host= (GPU and host "
              "memory per GPU and per node, GiB; nvme= GB per node, 0 if absent) also the largest GPT-3 size that trains "
              "there at this -b -t -r --attention" },
    { .long_flag = "--help", .type = OPT_HELP, .trainer = OPT_BOTH, .help = "this message (also -h alone)" },
};
#define ARGS_NUM_OPTIONS ((int)(sizeof(args_options) / sizeof(args_options[0])))

const OptRow* args_option_table(int* n) {
    *n = ARGS_NUM_OPTIONS;
    return args_options;
}

static void args_defaults(TrainConfig* c) {
    memset(c, 0, sizeof(*c));
    opt_defaults(args_options, ARGS_NUM_OPTIONS, c);
    // AdamW's betas and eps have no flag: llm.c's, unless --ds-config's optimizer.params gives them
    c->beta1 = 0.9f;
    c->beta2 = 0.95f;
    c->eps = 1e-8f;
    zero_config_defaults(&c->zero);
}

void args_usage(FILE* f, const char* program) {
    fprintf(f, "Usage: %s [options]\n", program);
    opt_print_help(f, args_options, ARGS_NUM_OPTIONS, 0);
    opt_print_help(f, zero_options, zero_num_options, 1);
}

// whether the row of `flag` was given on the command line
static int args_given(const unsigned char* given, const char* flag) {
    const OptRow* r = opt_find_flag(args_options, ARGS_NUM_OPTIONS, flag);
    return r != NULL && given[r - args_options];
}

// llm.c's flags that this trainer cannot honour at the value given: refused by name, never
// ignored (a run that seemed to do what its script asked and did not)
static int args_check_llmc(const TrainConfig* c) {
    if (c->log_gpu_every > 0) {
        return llmc_error("flag -lg %d: GPU telemetry is not read by this trainer (the step line and --report carry memory and "
                          "times); run with -lg -1", c->log_gpu_every);
    }
    if (c->tf32) { return llmc_error("flag -f 1: nothing here computes in TF32 (the fp32 builds are true fp32); run with -f 0"); }
    if (!c->master_weights) { return llmc_error("flag -w 0: ZeRO always keeps the fp32 master weights (the optimizer states); run with -w 1"); }
    return 0;
}

int args_parse(TrainConfig* c, int argc, char** argv) {
    args_defaults(c);
    // the JSON first, so that the flags, read after it, override it
    for (int i = 1; i < argc; i++) {
        const char* path = NULL;
        if (strcmp(argv[i], "--ds-config") == 0 && i + 1 < argc) { path = argv[i + 1]; }
        else if (strncmp(argv[i], "--ds-config=", 12) == 0) { path = argv[i] + 12; }
        if (path == NULL) { continue; }
        c->ds_config = path;
        if (zero_config_load_json(&c->zero, path, c->warnings, sizeof(c->warnings)) != 0) { return llmc_error("%s", zero_errmsg()); }
    }
    unsigned char given[ARGS_NUM_OPTIONS];
    memset(given, 0, sizeof(given));
    OptSet sets[] = { { args_options, ARGS_NUM_OPTIONS, c, given }, { zero_options, zero_num_options, &c->zero, NULL } };
    int rc = opt_parse_args(sets, 2, argc, argv);
    if (rc == 1) { return 1; }
    if (rc != 0) { return llmc_error("%s", zero_errmsg()); }
    c->given_B = args_given(given, "-b");
    c->given_d = args_given(given, "-d") && c->total_batch_size != -1;
    c->given_lr = args_given(given, "-l");
    c->given_wd = args_given(given, "-c");
    c->given_clip = args_given(given, "--grad-clip");
    c->given_g = args_given(given, "-g");
    // a sample is generated inside one sequence of T tokens (the model's activations are
    // sized for T): more tokens than that cannot be made, and a -g asked for is not cut
    if (c->given_g && c->sample_every > 0 && c->gen_T > c->T) {
        return llmc_error("flag -g: %d tokens per sample is more than the sequence length -t %d: a sample is made inside one "
                          "sequence (give -g %d or less, or -s 0 for no samples)", c->gen_T, c->T, c->T);
    }
    if (args_check_llmc(c) != 0) { return -1; }
    // the JSON's training keys fill what the command line left unset
    ZeroConfig* z = &c->zero;
    if (!c->given_B && z->train_micro_batch_size_per_gpu > 0) { c->B = z->train_micro_batch_size_per_gpu; }
    if (!c->given_lr && !isnan(z->lr)) { c->lr = z->lr; }
    if (!c->given_wd && !isnan(z->weight_decay)) { c->weight_decay = z->weight_decay; }
    if (!c->given_clip && !isnan(z->gradient_clipping)) { c->grad_clip = z->gradient_clipping; }
    if (!isnan(z->beta1)) { c->beta1 = z->beta1; }
    if (!isnan(z->beta2)) { c->beta2 = z->beta2; }
    if (!isnan(z->eps)) { c->eps = z->eps; }
    if (zero_config_validate(z) != 0) { return llmc_error("%s", zero_errmsg()); }
    zero_config_warnings(z, c->warnings, sizeof(c->warnings));
    return 0;
}
