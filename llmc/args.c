// The trainer's command line (llmc/args.h): defaults, usage, the strict parse.
#include "llmc/args.h" // the interface, its types and the headers its bodies use

static void args_defaults(TrainConfig* c) {
    memset(c, 0, sizeof(*c));
    c->train_pattern = "dev/data/tinyshakespeare/tiny_shakespeare_train.bin";
    c->val_pattern = "dev/data/tinyshakespeare/tiny_shakespeare_val.bin";
    c->output_dir = NULL;
    c->model = "d12";
    c->B = 4;
    c->T = 1024;
    c->total_batch_size = -1;
    c->max_steps = -1;
    c->lr_schedule = "cosine";
    c->lr = 3e-4f;
    c->warmup = 0;
    c->final_lr_frac = 1.0f;
    c->weight_decay = 0.0f;
    c->val_every = 20;
    c->val_max_steps = 20;
    c->sample_every = 20;
    c->gen_T = 64;
    c->checkpoint_every = 0;
    c->resume = 0;
    c->keep_checkpoints = 0;
    c->allow_unverified = 0;
    c->recompute = 1;
    c->zero_backend = "auto";
    c->attention = "cublas";
    c->overfit_single_batch = 0;
    c->seed = 1337;
    c->shuffle = 1;
    c->grad_clip = 1.0f;
    c->max_skipped_steps = 3;
    c->report = NULL;
    c->tokenizer = "dev/data/gpt2_tokenizer.bin";
    c->beta1 = 0.9f;
    c->beta2 = 0.95f;
    c->eps = 1e-8f;
    c->collective_timeout = 300.0f;
    c->stop_grace = 60;
    zero_config_defaults(&c->zero);
}

void args_usage(FILE* f, const char* program) {
    fprintf(f, "Usage: %s [options]\n", program);
    fprintf(f,
        "  -i <pattern>  train token shards, a glob (default dev/data/tinyshakespeare/tiny_shakespeare_train.bin)\n"
        "  -j <pattern>  validation token shards, a glob (default ..._val.bin)\n"
        "  -o <dir>      output directory for main.log and checkpoints (default: none)\n"
        "  -e <model>    llm.c model .bin, or a descriptor: dN, gpt2:dN, gpt3:cC (default d12)\n"
        "  -b <int>      micro batch size per rank (default 4)\n"
        "  -t <int>      sequence length (default 1024)\n"
        "  -d <int>      total batch size in tokens over all ranks, for gradient accumulation (default B*T*ranks)\n"
        "  -x <int>      max steps (default: one epoch)\n"
        "  -k <name>     learning rate schedule: cosine | linear | constant (default cosine)\n"
        "  -l <float>    learning rate (default 3e-4)\n"
        "  -u <int>      warmup steps (default 0)\n"
        "  -q <float>    final learning rate fraction (default 1.0)\n"
        "  -c <float>    weight decay (default 0.0)\n"
        "  -v <int>      validate every N steps, 0 = never (default 20)\n"
        "  -m <int>      validation batches, -1 = all (default 20)\n"
        "  -s <int>      sample every N steps, 0 = never (default 20)\n"
        "  -g <int>      tokens to generate per sample, at most -t (default 64, cut to -t)\n"
        "  -n <int>      checkpoint every N steps, 0 = never (default 0)\n"
        "  -y <0|1>      resume from the newest checkpoint in -o whose checksums pass, at any world size and\n"
        "                ZeRO stage (default 0)\n"
        "  -z <0..3>     ZeRO stage: 0 data parallel, 1 + optimizer state sharded, 2 + gradients, 3 + parameters (default 0)\n"
        "  -r <0|1|2>    recompute: 0 none, 1 GELU, 2 GELU and layernorms (default 1)\n"
        "  -a <0|1>      overfit a single batch (default 0)\n"
        "  --seed <int>        seed for init and shuffling (default 1337)\n"
        "  --shuffle <0|1>     shuffle the training shards and batches (default 1)\n"
        "  --grad-clip <float> clip the global gradient norm, 0 = off (default 1.0)\n"
        "  --max-skipped-steps <n>  a step whose loss or gradient norm is not finite is skipped (no update);\n"
        "                      after n such steps in a row the next one stops the run, 0 = stop at the first (default 3)\n"
        "  --report <file>     write a JSON report at exit (rank 0)\n"
        "  --tokenizer <file>  tokenizer for decoding samples (default dev/data/gpt2_tokenizer.bin)\n"
        "  --ds-config <file>  DeepSpeed-style JSON (zero_optimization, batch sizes, optimizer, gradient_clipping); flags override it\n"
        "  --prefetch <n>      stage 3: units gathered ahead of use (default 2, 0 = off)\n"
        "  --param-persistence-threshold <n>  stage 3: units smaller than n elements stay gathered (default 1e5)\n"
        "  --max-live-parameters <n>          stage 3: budget of gathered elements (default 1e9)\n"
        "  --max-reuse-distance <n>           stage 3: keep a unit gathered if reused within n elements (default 1e9)\n"
        "  --reduce-bucket-size <n>           gradient elements in flight in reductions (default 5e8)\n"
        "  --prefetch-bucket-size <n>         stage 3: elements being prefetched at once (default 5e7)\n"
        "  --offload-optimizer none|cpu|nvme  AdamW state and fp32 master on the host (SIMD CPU Adam) or on NVMe (stage 3)\n"
        "  --offload-param none|cpu|nvme      stage 3: parameter shards on the host, or on NVMe (needs optimizer offload)\n"
        "  --max-in-cpu <n>                   parameter offload to NVMe: elements of shards kept on the host (default 1e9)\n"
        "  --nvme-path <dir>                  where each rank's swap file goes (NVMe offload)\n"
        "  --sub-group-size <n>               NVMe: elements updated per pipelined sub-group (default 1e9)\n"
        "  --communication-data-type fp32|bf16  the type gradients are reduced in (default: the model's, bf16 in the\n"
        "                                     GPU trainer's bf16 build; fp32: exact sums at any number of ranks, 2x the\n"
        "                                     gradient traffic; the CPU trainer and the host backend always reduce in fp32)\n"
        "  --mics-shard-size <n>              stage 3, MiCS: shard over groups of n ranks, replicate across groups (-1 = off)\n"
        "  --mics-hierarchical-params-gather 0|1  MiCS: gathers of a group spanning nodes go across nodes first (always so here)\n"
        "  --zero-hpz-partition-size <n>      stage 3, ZeRO++ hpZ: a secondary copy of the parameters sharded over n ranks\n"
        "                                     (a node's), which the gathers after a unit's first use read (1 = off)\n"
        "  --zero-quantized-weights 0|1       stage 3, ZeRO++ qwZ: parameters all-gathered as int8, a scale per 256\n"
        "  --zero-quantized-gradients 0|1     stage 3, ZeRO++ qgZ: gradients reduce-scattered as int8, inside the node then\n"
        "                                     across, summed in fp32 at each hop\n"
        "  --ranks-per-node <n>               take consecutive groups of n ranks as nodes (default 0: MPI's shared-memory split)\n"
        "  --zero-backend auto|device|host    GPU trainer: device = the model states on the GPU, collectives over NCCL\n"
        "                                     (every stage, optimizer offload to the CPU, one GPU per rank); host = the\n"
        "                                     ZeRO engine on the host over MPI, the GPU computing on copies (also NVMe and\n"
        "                                     parameter offload, ranks sharing a GPU); auto = device when it can (default).\n"
        "                                     The CPU trainer is always host.\n"
        "  --attention cublas|flash           GPU trainer: attention through cuBLAS products and a (B,NH,T,T) matrix\n"
        "                                     per layer (default), or the fused kernel with O(T) memory (head sizes\n"
        "                                     64, 96, 128). The CPU trainer has one attention and ignores it.\n"
        "  --vocab-tile <n>                   the classifier and its loss in tiles of n vocabulary columns (online softmax):\n"
        "                                     no (B,T,Vp) logits, at the cost of computing the logits of all tiles but the\n"
        "                                     last again in the backward; n >= the padded vocabulary is one tile, no\n"
        "                                     recompute. The GPU trainer needs a multiple of 8 (bf16) or 4 (fp32)\n"
        "                                     (default 0: untiled, the whole (B,T,Vp) logits)\n"
        "  --dpu 0|1                          GPU trainer with --offload-optimizer cpu: the CPU Adam of step i runs while the\n"
        "                                     GPU computes step i+1 on the parameters of step i-1 (ZeRO-Offload's delayed\n"
        "                                     parameter update; default 0)\n"
        "  --keep-checkpoints <K>             after each checkpoint, remove all but the K newest that pass their checks\n"
        "                                     (the damaged ones are moved to -o's damaged_STEP; default 0: keep every one)\n"
        "  --allow-unverified 0|1             -y 1 may resume from a checkpoint whose DONE marker is empty, as versions\n"
        "                                     before checksums wrote it, unverified (default 0: such a one is skipped)\n"
        "  --save-bf16 0|1                    checkpoints write the model file as llm.c's bf16 version 5, the one llm.c's\n"
        "                                     GPU trainer reads (default 0: fp32 version 3)\n"
        "  --collective-timeout <s>           a rank blocked in a collective (another rank stopped or stuck) or in a file's\n"
        "                                     read or write (a stuck disk) for s seconds ends the job, naming the collective\n"
        "                                     and the ranks that did not arrive, or the file (default 300, 0 = never)\n"
        "  --stop-grace <s>                   SIGTERM, SIGINT or SIGUSR1 stops the run at its next step boundary (with a\n"
        "                                     checkpoint in -o); a process that does not get there within s seconds, or\n"
        "                                     gets a second signal, ends at once, saying what it was doing (default 60,\n"
        "                                     0 = only a second signal)\n"
        "  --estimate <nodes:gpus>  print the ZeRO model-state memory of -e per GPU and per node for every stage, and exit\n"
        "  -h, --help          this message\n");
}

// strict parsers: the whole string must be a number within [lo, hi]
static int args_int(const char* flag, const char* s, long lo, long hi, long* out) {
    char* end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0') { return llmc_error("flag %s: '%s' is not an integer", flag, s); }
    if (errno == ERANGE || v < lo || v > hi) { return llmc_error("flag %s: %s is out of range [%ld, %ld]", flag, s, lo, hi); }
    *out = v;
    return 0;
}

// strtof's ERANGE is two things: an overflow (inf: out of any range) and an underflow, a
// value below FLT_MIN that comes back subnormal (1e-45: a float of its own, in range like
// any other) or 0 (1e-50: no float holds it, and 0 is not what was asked for)
static int args_float(const char* flag, const char* s, float lo, float hi, float* out) {
    char* end = NULL;
    errno = 0;
    float v = strtof(s, &end);
    if (*s == '\0' || *end != '\0') { return llmc_error("flag %s: '%s' is not a number", flag, s); }
    int underflow = errno == ERANGE && fabsf(v) <= FLT_MIN;
    if (underflow && v == 0.0f) {
        return llmc_error("flag %s: %s is too small for a float: it would be 0 (the smallest positive float is %g)", flag, s,
                          (double)FLT_TRUE_MIN);
    }
    if ((errno == ERANGE && !underflow) || !(v >= lo && v <= hi)) { return llmc_error("flag %s: %s is out of range [%g, %g]", flag, s, lo, hi); }
    *out = v;
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
    for (int i = 1; i < argc; i++) {
        const char* flag = argv[i];
        if (strcmp(flag, "-h") == 0 || strcmp(flag, "--help") == 0) { return 1; }
        if (flag[0] != '-' || flag[1] == '\0') { return llmc_error("unexpected argument '%s' (flags look like -b 4 or --seed 1)", flag); }
        // "--name=value" or "--name value" / "-x value"
        char name[64];
        const char* val = NULL;
        const char* eq = strncmp(flag, "--", 2) == 0 ? strchr(flag, '=') : NULL;
        if (eq != NULL) {
            size_t len = (size_t)(eq - flag);
            if (len >= sizeof(name)) { return llmc_error("unknown flag %s", flag); }
            memcpy(name, flag, len);
            name[len] = '\0';
            val = eq + 1;
        } else {
            if (strlen(flag) >= sizeof(name)) { return llmc_error("unknown flag %s", flag); }
            strcpy(name, flag);
            if (i + 1 >= argc) { return llmc_error("flag %s needs a value", flag); }
            val = argv[++i];
        }
        long v = 0;  // read only when its parser succeeded
        int rc = 0;
        if      (!strcmp(name, "-i")) { c->train_pattern = val; }
        else if (!strcmp(name, "-j")) { c->val_pattern = val; }
        else if (!strcmp(name, "-o")) { c->output_dir = val; }
        else if (!strcmp(name, "-e")) { c->model = val; }
        else if (!strcmp(name, "-k")) {
            if (strcmp(val, "cosine") && strcmp(val, "linear") && strcmp(val, "constant")) {
                return llmc_error("flag -k: unknown schedule '%s' (cosine, linear or constant)", val);
            }
            c->lr_schedule = val;
        }
        else if (!strcmp(name, "-b")) { rc = args_int(name, val, 1, 1 << 20, &v); c->B = (int)v; c->given_B = 1; }
        else if (!strcmp(name, "-t")) { rc = args_int(name, val, 1, 1 << 20, &v); c->T = (int)v; }
        else if (!strcmp(name, "-d")) { rc = args_int(name, val, -1, 1L << 40, &v); c->total_batch_size = v; c->given_d = v != -1;
                                        if (rc == 0 && v == 0) { return llmc_error("flag -d: total batch size must be positive, or -1"); } }
        else if (!strcmp(name, "-x")) { rc = args_int(name, val, -1, 1L << 30, &v); c->max_steps = (int)v; }
        else if (!strcmp(name, "-l")) { rc = args_float(name, val, 0.0f, 10.0f, &c->lr); c->given_lr = 1; }
        else if (!strcmp(name, "-u")) { rc = args_int(name, val, 0, 1L << 30, &v); c->warmup = (int)v; }
        else if (!strcmp(name, "-q")) { rc = args_float(name, val, 0.0f, 1.0f, &c->final_lr_frac); }
        else if (!strcmp(name, "-c")) { rc = args_float(name, val, 0.0f, 10.0f, &c->weight_decay); c->given_wd = 1; }
        else if (!strcmp(name, "-v")) { rc = args_int(name, val, 0, 1L << 30, &v); c->val_every = (int)v; }
        else if (!strcmp(name, "-m")) { rc = args_int(name, val, -1, 1L << 30, &v); c->val_max_steps = (int)v;
                                        if (rc == 0 && v == 0) { return llmc_error("flag -m: use -v 0 to disable validation, or -1 for the whole set"); } }
        else if (!strcmp(name, "-s")) { rc = args_int(name, val, 0, 1L << 30, &v); c->sample_every = (int)v; }
        else if (!strcmp(name, "-g")) { rc = args_int(name, val, 1, 1 << 20, &v); c->gen_T = (int)v; c->given_g = 1; }
        else if (!strcmp(name, "-n")) { rc = args_int(name, val, 0, 1L << 30, &v); c->checkpoint_every = (int)v; }
        else if (!strcmp(name, "-y")) { rc = args_int(name, val, 0, 1, &v); c->resume = (int)v; }
        else if (!strcmp(name, "-z")) { rc = args_int(name, val, 0, 3, &v); c->zero.stage = (int)v; }
        else if (!strcmp(name, "-r")) { rc = args_int(name, val, 0, 2, &v); c->recompute = (int)v; }
        else if (!strcmp(name, "-a")) { rc = args_int(name, val, 0, 1, &v); c->overfit_single_batch = (int)v; }
        else if (!strcmp(name, "--seed")) {
            char* end = NULL;
            errno = 0;
            unsigned long long s = strtoull(val, &end, 10);
            if (*val == '\0' || *end != '\0' || val[0] == '-' || errno == ERANGE) { return llmc_error("flag --seed: '%s' is not a non-negative integer", val); }
            c->seed = s;
        }
        else if (!strcmp(name, "--shuffle")) { rc = args_int(name, val, 0, 1, &v); c->shuffle = (int)v; }
        else if (!strcmp(name, "--grad-clip")) { rc = args_float(name, val, 0.0f, 1e6f, &c->grad_clip); c->given_clip = 1; }
        else if (!strcmp(name, "--max-skipped-steps")) { rc = args_int(name, val, 0, 1000000, &v); c->max_skipped_steps = (int)v; }
        else if (!strcmp(name, "--report")) { c->report = val; }
        else if (!strcmp(name, "--tokenizer")) { c->tokenizer = val; }
        else if (!strcmp(name, "--ds-config")) { /* loaded above */ }
        else if (!strcmp(name, "--estimate")) { c->estimate = val; }
        else if (!strcmp(name, "--zero-backend")) {
            if (strcmp(val, "auto") && strcmp(val, "device") && strcmp(val, "host")) {
                return llmc_error("flag --zero-backend: unknown backend '%s' (auto, device or host)", val);
            }
            c->zero_backend = val;
        }
        else if (!strcmp(name, "--vocab-tile")) { rc = args_int(name, val, 0, 1L << 30, &v); c->vocab_tile = (int)v; }
        else if (!strcmp(name, "--dpu")) { rc = args_int(name, val, 0, 1, &v); c->dpu = (int)v; }
        else if (!strcmp(name, "--collective-timeout")) { rc = args_float(name, val, 0.0f, 1e6f, &c->collective_timeout); }
        else if (!strcmp(name, "--stop-grace")) { rc = args_int(name, val, 0, 1000000, &v); c->stop_grace = (int)v; }
        else if (!strcmp(name, "--keep-checkpoints")) { rc = args_int(name, val, 0, 1L << 30, &v); c->keep_checkpoints = (int)v; }
        else if (!strcmp(name, "--allow-unverified")) { rc = args_int(name, val, 0, 1, &v); c->allow_unverified = (int)v; }
        else if (!strcmp(name, "--save-bf16")) { rc = args_int(name, val, 0, 1, &v); c->save_bf16 = (int)v; }
        else if (!strcmp(name, "--attention")) {
            if (strcmp(val, "cublas") && strcmp(val, "flash")) {
                return llmc_error("flag --attention: unknown kind '%s' (cublas or flash)", val);
            }
            c->attention = val;
        }
        else {
            rc = zero_config_set_flag(&c->zero, name, val);
            if (rc == 1) { return llmc_error("unknown flag %s (see -h)", name); }
            if (rc != 0) { return llmc_error("%s", zero_errmsg()); }
        }
        if (rc != 0) { return -1; }
    }
    // a sample is generated inside one sequence of T tokens (the model's activations are
    // sized for T): more tokens than that cannot be made, and a -g asked for is not cut
    if (c->given_g && c->sample_every > 0 && c->gen_T > c->T) {
        return llmc_error("flag -g: %d tokens per sample is more than the sequence length -t %d: a sample is made inside one "
                          "sequence (give -g %d or less, or -s 0 for no samples)", c->gen_T, c->T, c->T);
    }
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
