// zero3/config.c: the implementation (the interface and its notes: zero3/config.h)
#include "zero3/config.h"  // this module's types and prototypes
#include <stdio.h>         // snprintf, vsnprintf
#include <stdarg.h>        // va_list for the warning appender
#include <string.h>        // strcmp, strncmp, strlen, memchr, memset, memcpy
#include <limits.h>        // INT_MAX: the batch rule's bounds, the batch keys' range
#include <math.h>          // isnan: the hash's unset floats (a macro: no -lm needed)
#include "zero3/util.h"     // zero_error: the library error convention

// the enums as the table stores them (an int each)
static int zero_offload_row_parse(const char* what, const char* s, int* out) {
    ZeroOffload o = ZERO_OFFLOAD_NONE;
    if (zero_parse_offload(what, s, &o) != 0) { return -1; }
    *out = (int)o;
    return 0;
}
static const char* zero_offload_row_name(int v) { return zero_offload_name((ZeroOffload)v); }
static int zero_comm_row_parse(const char* what, const char* s, int* out) {
    ZeroCommDtype t = ZERO_COMM_MODEL;
    if (zero_parse_comm_dtype(what, s, &t) != 0) { return -1; }
    *out = (int)t;
    return 0;
}
static const char* zero_comm_row_name(int v) { return zero_comm_dtype_name((ZeroCommDtype)v); }

#define ZC(m) OPT_FIELD(ZeroConfig, m)
#define ZMAX ((double)ZERO_SIZE_MAX)
#define ZO "zero_optimization."

// Every ZeRO option once (zero3/options.h). Sizes: the smallest value that makes sense is
// 1 for a bucket or a sub-group (one of zero elements could never hold anything), 0 for a
// prefetch bucket, persistence threshold, live limit or reuse distance (0 switches the
// feature off). The training keys of the JSON default to -1 or NaN: absent, so that the
// trainer can tell a value the file set from one it did not.
const OptRow zero_options[] = {
    { .group = "ZeRO (DeepSpeed's zero_optimization; --ds-config FILE sets the same keys, the flags override it)",
      .short_flag = "-z", .long_flag = "--zero-stage", .key = ZO "stage", .type = OPT_WHOLE, ZC(stage), .lo = 0, .hi = 3,
      .def = "0", .arg = "<0..3>", .trainer = OPT_BOTH,
      .help = "ZeRO stage: 0 data parallel, 1 + optimizer state sharded, 2 + gradients, 3 + parameters" },
    { .long_flag = "--prefetch", .type = OPT_WHOLE, ZC(prefetch_depth), .lo = 0, .hi = 64, .def = "2", .trainer = OPT_BOTH,
      .help = "stage 3: units gathered ahead of use, 0 = off" },
    { .long_flag = "--param-persistence-threshold", .key = ZO "stage3_param_persistence_threshold", .alias = ZO "param_persistence_threshold",
      .type = OPT_WHOLE, ZC(param_persistence_threshold), .lo = 0, .hi = ZMAX, .def = "1e5", .trainer = OPT_BOTH,
      .help = "stage 3: units smaller than n elements stay gathered" },
    { .long_flag = "--max-live-parameters", .key = ZO "stage3_max_live_parameters", .alias = ZO "max_live_parameters",
      .type = OPT_WHOLE, ZC(max_live_parameters), .lo = 0, .hi = ZMAX, .def = "1e9", .trainer = OPT_BOTH,
      .help = "stage 3: budget of gathered elements" },
    { .long_flag = "--max-reuse-distance", .key = ZO "stage3_max_reuse_distance", .alias = ZO "max_reuse_distance",
      .type = OPT_WHOLE, ZC(max_reuse_distance), .lo = 0, .hi = ZMAX, .def = "1e9", .trainer = OPT_BOTH,
      .help = "stage 3: keep a unit gathered if reused within n elements" },
    { .long_flag = "--reduce-bucket-size", .key = ZO "reduce_bucket_size", .type = OPT_WHOLE, ZC(reduce_bucket_size),
      .lo = 1, .hi = ZMAX, .def = "5e8", .trainer = OPT_BOTH, .help = "gradient elements in flight in reductions" },
    { .long_flag = "--prefetch-bucket-size", .key = ZO "stage3_prefetch_bucket_size", .alias = ZO "prefetch_bucket_size",
      .type = OPT_WHOLE, ZC(prefetch_bucket_size), .lo = 0, .hi = ZMAX, .def = "5e7", .trainer = OPT_BOTH,
      .help = "stage 3: elements being prefetched at once" },
    { .long_flag = "--communication-data-type", .key = "communication_data_type", .type = OPT_ENUM, ZC(comm_dtype),
      .lo = ZERO_COMM_MODEL, .hi = ZERO_COMM_BF16, .def = "model", .choices = "model|fp32|bf16", .arg = "fp32|bf16",
      .parse = zero_comm_row_parse, .name = zero_comm_row_name, .trainer = OPT_BOTH,
      .help = "the type gradients are reduced in: the model's (bf16 in the GPU trainer's bf16 build); fp32: exact sums at "
              "any number of ranks, 2x the gradient traffic; the CPU trainer and the host backend always reduce in fp32" },
    { .key = ZO "allgather_bucket_size", .type = OPT_WHOLE, ZC(allgather_bucket_size), .lo = 1, .hi = ZMAX, .def = "5e8",
      .trainer = OPT_BOTH, .help = "elements per all-gather bucket", .no_effect = "a unit is gathered whole (the unit is the bucket)" },
    { .key = ZO "overlap_comm", .type = OPT_BOOL, ZC(overlap_comm), .hi = 1, .def = "0", .trainer = OPT_BOTH,
      .help = "overlap communication with computation",
      .no_effect = "communication always overlaps computation (nonblocking collectives, NCCL on its own stream)" },
    { .key = ZO "contiguous_gradients", .type = OPT_BOOL, ZC(contiguous_gradients), .hi = 1, .def = "1", .trainer = OPT_BOTH,
      .help = "copy gradients into one buffer", .no_effect = "each unit's gradient is one contiguous buffer already" },
    { .key = ZO "reduce_scatter", .type = OPT_BOOL, ZC(reduce_scatter), .hi = 1, .def = "1", .trainer = OPT_BOTH,
      .help = "reduce-scatter the gradients", .no_effect = "stages 1-3 always reduce-scatter, stage 0 all-reduces" },

    { .group = "Offload",
      .long_flag = "--offload-optimizer", .key = ZO "offload_optimizer.device", .type = OPT_ENUM, ZC(offload_optimizer),
      .lo = ZERO_OFFLOAD_NONE, .hi = ZERO_OFFLOAD_NVME, .def = "none", .choices = "none|cpu|nvme",
      .parse = zero_offload_row_parse, .name = zero_offload_row_name, .trainer = OPT_BOTH,
      .help = "AdamW state and fp32 master on the host (SIMD CPU Adam) or on NVMe (stage 3)" },
    { .long_flag = "--offload-param", .key = ZO "offload_param.device", .type = OPT_ENUM, ZC(offload_param),
      .lo = ZERO_OFFLOAD_NONE, .hi = ZERO_OFFLOAD_NVME, .def = "none", .choices = "none|cpu|nvme",
      .parse = zero_offload_row_parse, .name = zero_offload_row_name, .trainer = OPT_BOTH,
      .help = "stage 3: parameter shards on the host, or on NVMe (needs optimizer offload)" },
    { .long_flag = "--nvme-path", .key = ZO "offload_optimizer.nvme_path", .alias = ZO "offload_param.nvme_path",
      .alias_why = "both offloads use one nvme_path", .type = OPT_PATH, ZC(nvme_path), .def = "", .trainer = OPT_BOTH,
      .help = "where each rank's swap file goes (NVMe offload)" },
    { .long_flag = "--sub-group-size", .key = ZO "sub_group_size", .type = OPT_WHOLE, ZC(sub_group_size), .lo = 1, .hi = ZMAX,
      .def = "1e9", .trainer = OPT_BOTH, .help = "NVMe: elements updated per pipelined sub-group" },
    { .long_flag = "--max-in-cpu", .key = ZO "offload_param.max_in_cpu", .type = OPT_WHOLE, ZC(max_in_cpu), .lo = 0, .hi = ZMAX,
      .def = "1e9", .trainer = OPT_BOTH, .help = "parameter offload to NVMe: elements of shards kept on the host" },
    { .key = ZO "offload_optimizer.pin_memory", .alias = ZO "offload_param.pin_memory", .alias_why = "both offloads use one pin_memory",
      .type = OPT_BOOL, ZC(pin_memory), .hi = 1, .def = "0", .trainer = OPT_BOTH, .help = "pinned host buffers",
      .no_effect = "the host buffers the GPU copies to and from are always pinned" },
    { .key = ZO "offload_optimizer.buffer_count", .type = OPT_WHOLE, ZC(buffer_count), .lo = 1, .hi = 65536, .def = "4",
      .trainer = OPT_BOTH, .help = "NVMe: the optimizer step's buffers" },
    // (DeepSpeed's default for both is false; here true: the same bytes and results, sooner)
    { .key = ZO "offload_optimizer.pipeline_read", .type = OPT_BOOL, ZC(pipeline_read), .hi = 1, .def = "1", .trainer = OPT_BOTH,
      .help = "NVMe: read the step's next sub-group while one is updated (DeepSpeed's default: false)" },
    { .key = ZO "offload_optimizer.pipeline_write", .type = OPT_BOOL, ZC(pipeline_write), .hi = 1, .def = "1", .trainer = OPT_BOTH,
      .help = "NVMe: write the step's sub-groups back while the next ones are updated (DeepSpeed's default: false)" },
    { .key = ZO "offload_param.buffer_count", .type = OPT_WHOLE, ZC(param_buffer_count), .lo = 1, .hi = 65536, .def = "5",
      .trainer = OPT_BOTH, .help = "NVMe: buffers the parameter shards are read ahead into" },

    { .group = "Beyond one node (stage 3): MiCS, ZeRO++ and where the nodes are",
      .long_flag = "--mics-shard-size", .key = ZO "mics_shard_size", .type = OPT_WHOLE, ZC(mics_shard_size), .lo = 1,
      .hi = 1 << 20, .unset = "-1", .def = "-1", .trainer = OPT_BOTH,
      .help = "stage 3, MiCS: shard over groups of n ranks, replicate across groups (-1 = off)" },
    { .long_flag = "--mics-hierarchical-params-gather", .key = ZO "mics_hierarchical_params_gather", .type = OPT_BOOL,
      ZC(mics_hierarchical_params_gather), .hi = 1, .def = "0", .trainer = OPT_BOTH,
      .help = "MiCS: gathers of a group spanning nodes go across nodes first (always so here)" },
    { .long_flag = "--zero-hpz-partition-size", .key = ZO "zero_hpz_partition_size", .type = OPT_WHOLE, ZC(hpz_partition_size),
      .lo = 1, .hi = 1 << 20, .def = "1", .trainer = OPT_BOTH,
      .help = "stage 3, ZeRO++ hpZ: a secondary copy of the parameters sharded over n ranks (a node's), which the gathers "
              "after a unit's first use read (1 = off)" },
    { .long_flag = "--zero-quantized-weights", .key = ZO "zero_quantized_weights", .type = OPT_BOOL, ZC(quantized_weights),
      .hi = 1, .def = "0", .trainer = OPT_BOTH, .help = "stage 3, ZeRO++ qwZ: parameters all-gathered as int8, a scale per 256" },
    { .long_flag = "--zero-quantized-gradients", .key = ZO "zero_quantized_gradients", .type = OPT_BOOL, ZC(quantized_gradients),
      .hi = 1, .def = "0", .trainer = OPT_BOTH,
      .help = "stage 3, ZeRO++ qgZ: gradients reduce-scattered as int8, inside the node then across, summed in fp32 at each hop" },
    { .long_flag = "--ranks-per-node", .type = OPT_WHOLE, ZC(ranks_per_node), .lo = 0, .hi = 1 << 20, .def = "0", .trainer = OPT_BOTH,
      .help = "take consecutive groups of n ranks as nodes (0: MPI's shared-memory split)" },

    // the training keys: the trainer's flags (-b, -l, -c, --grad-clip) override them
    { .key = "train_batch_size", .type = OPT_WHOLE, ZC(train_batch_size), .lo = 1, .hi = ZMAX, .def = "-1", .trainer = OPT_BOTH,
      .help = "sequences per optimizer step over all ranks (with micro and accumulation: DeepSpeed's batch rule)" },
    { .key = "train_micro_batch_size_per_gpu", .type = OPT_WHOLE, ZC(train_micro_batch_size_per_gpu), .lo = 1, .hi = INT_MAX,
      .def = "-1", .trainer = OPT_BOTH, .help = "sequences per rank per micro-step (-b)" },
    { .key = "gradient_accumulation_steps", .type = OPT_WHOLE, ZC(gradient_accumulation_steps), .lo = 1, .hi = INT_MAX,
      .def = "-1", .trainer = OPT_BOTH, .help = "micro-steps per optimizer step" },
    { .key = "gradient_clipping", .type = OPT_FLOAT, ZC(gradient_clipping), .lo = 0, .hi = 1e6, .def = "nan", .trainer = OPT_BOTH,
      .help = "global-norm clip, 0 = off (--grad-clip)" },
    { .key = "optimizer.params.lr", .type = OPT_FLOAT, ZC(lr), .lo = 0, .lo_open = 1, .hi = 1e6, .def = "nan", .trainer = OPT_BOTH,
      .help = "learning rate (-l)" },
    { .key = "optimizer.params.betas[0]", .type = OPT_FLOAT, ZC(beta1), .lo = 0, .hi = 1, .hi_open = 1, .def = "nan",
      .trainer = OPT_BOTH, .help = "AdamW beta1 (a beta of 1 never forgets, and divides by 0 in the bias correction)" },
    { .key = "optimizer.params.betas[1]", .type = OPT_FLOAT, ZC(beta2), .lo = 0, .hi = 1, .hi_open = 1, .def = "nan",
      .trainer = OPT_BOTH, .help = "AdamW beta2" },
    // eps must be > 0: a parameter whose gradient is always zero (an unused vocabulary row)
    // has v = 0, and eps is then all that keeps the update from being 0/0
    { .key = "optimizer.params.eps", .type = OPT_FLOAT, ZC(eps), .lo = 0, .lo_open = 1, .hi = 1, .def = "nan", .trainer = OPT_BOTH,
      .help = "AdamW epsilon" },
    { .key = "optimizer.params.weight_decay", .type = OPT_FLOAT, ZC(weight_decay), .lo = 0, .hi = 1e6, .def = "nan",
      .trainer = OPT_BOTH, .help = "decoupled weight decay (-c)" },
    { .key = "bf16.enabled", .type = OPT_BOOL, ZC(bf16), .hi = 1, .def = "-1", .trainer = OPT_BOTH,
      .help = "bf16 training: the build decides (the CPU trainer fp32, the GPU trainer bf16); another value is a warning" },
};
const int zero_num_options = (int)(sizeof(zero_options) / sizeof(zero_options[0]));

void zero_config_defaults(ZeroConfig* c) {
    memset(c, 0, sizeof(*c));
    opt_defaults(zero_options, zero_num_options, c);
}
const char* zero_comm_dtype_name(ZeroCommDtype t) {
    switch (t) {
        case ZERO_COMM_MODEL: return "model";
        case ZERO_COMM_FP32: return "fp32";
        case ZERO_COMM_BF16: return "bf16";
    }
    return "?";
}

const char* zero_offload_name(ZeroOffload o) {
    switch (o) {
        case ZERO_OFFLOAD_NONE: return "none";
        case ZERO_OFFLOAD_CPU: return "cpu";
        case ZERO_OFFLOAD_NVME: return "nvme";
    }
    return "?";
}

int zero_parse_offload(const char* what, const char* s, ZeroOffload* out) {
    if (s == NULL) { return zero_error("%s needs a value", what); }
    if (strcmp(s, "none") == 0) { *out = ZERO_OFFLOAD_NONE; }
    else if (strcmp(s, "cpu") == 0) { *out = ZERO_OFFLOAD_CPU; }
    else if (strcmp(s, "nvme") == 0) { *out = ZERO_OFFLOAD_NVME; }
    else { return zero_error("%s: unknown device '%s' (accepted: none, cpu, nvme)", what, s); }
    return 0;
}

int zero_streq_nocase(const char* a, const char* b) {
    for (; *a && *b; a++, b++) {
        char ca = (*a >= 'A' && *a <= 'Z') ? (char)(*a - 'A' + 'a') : *a;
        char cb = (*b >= 'A' && *b <= 'Z') ? (char)(*b - 'A' + 'a') : *b;
        if (ca != cb) { return 0; }
    }
    return *a == *b;
}

int zero_parse_comm_dtype(const char* what, const char* s, ZeroCommDtype* out) {
    if (s == NULL) { return zero_error("%s needs a value", what); }
    if (zero_streq_nocase(s, "fp32")) { *out = ZERO_COMM_FP32; }
    else if (zero_streq_nocase(s, "bf16") || zero_streq_nocase(s, "bfp16")) { *out = ZERO_COMM_BF16; }
    else if (zero_streq_nocase(s, "fp16")) {
        return zero_error("%s: fp16 is not supported: gradients here are bf16 or fp32, and are reduced in bf16 or fp32 "
                          "(fp32 or bf16)", what);
    } else {
        return zero_error("%s: unknown data type '%s' (fp32 or bf16)", what, s);
    }
    return 0;
}

int zero_config_set_flag(ZeroConfig* c, const char* name, const char* value) {
    // long flags only: -z is the trainer's (opt_parse_args finds it in the same row)
    if (name == NULL || strncmp(name, "--", 2) != 0) { return 1; }
    const OptRow* r = opt_find_flag(zero_options, zero_num_options, name);
    if (r == NULL) { return 1; }  // not ours: --ds-config included, which the trainer loads itself
    char what[128];
    snprintf(what, sizeof(what), "flag %s", name);
    return opt_set_text(r, c, what, value);
}

const OptRow* zero_option(const char* name) {
    for (int i = 0; i < zero_num_options; i++) {
        const OptRow* r = &zero_options[i];
        if ((r->key && strcmp(r->key, name) == 0) || (r->long_flag && strcmp(r->long_flag, name) == 0)) { return r; }
    }
    return NULL;
}

void zero_json_warn(ZeroJsonCtx* x, const char* fmt, ...) {
    if (x->warnings == NULL || x->warnings_len == 0) { return; }
    const char* nul = (const char*)memchr(x->warnings, '\0', x->warnings_len);
    if (nul == NULL) { return; }  // not a string: leave it alone
    size_t used = (size_t)(nul - x->warnings);
    char line[1600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    size_t n = strlen(line);
    if (used + n + 2 > x->warnings_len) { return; }
    memcpy(x->warnings + used, line, n);
    x->warnings[used + n] = '\n';
    x->warnings[used + n + 1] = '\0';
}

int zero_config_validate(const ZeroConfig* c) {
    // every field in its row's range (zero3/options.h), then the fields together
    if (opt_check_ranges(zero_options, zero_num_options, c, "zero config") != 0) { return -1; }
    // stage 0 keeps the whole optimizer state on every rank: there is no partition to move
    if (c->offload_optimizer != ZERO_OFFLOAD_NONE && c->stage < 1) {
        return zero_error("zero config: offload_optimizer %s needs ZeRO stage 1, 2 or 3 (stage is %d)",
                          zero_offload_name(c->offload_optimizer), c->stage);
    }
    // before stage 3 every rank holds all the parameters for the whole step, so there is
    // no partition of them that could live elsewhere
    if (c->offload_param != ZERO_OFFLOAD_NONE && c->stage != 3) {
        return zero_error("zero config: offload_param %s needs ZeRO stage 3 (stage is %d)", zero_offload_name(c->offload_param), c->stage);
    }
    // NVMe offload of the optimizer is ZeRO-Infinity, built on stage 3's partitioning
    if (c->offload_optimizer == ZERO_OFFLOAD_NVME && c->stage != 3) {
        return zero_error("zero config: offload_optimizer nvme needs ZeRO stage 3 (stage is %d); use cpu for stages 1 and 2", c->stage);
    }
    if ((c->offload_optimizer == ZERO_OFFLOAD_NVME || c->offload_param == ZERO_OFFLOAD_NVME) && c->nvme_path[0] == '\0') {
        return zero_error("zero config: offload to nvme needs a directory: --nvme-path DIR or offload_*.nvme_path");
    }
    if (memchr(c->nvme_path, '\0', sizeof(c->nvme_path)) == NULL) { return zero_error("zero config: nvme_path is not terminated"); }
    // MiCS and ZeRO++ partition, replicate or quantise stage 3's gathers and reductions
    int beyond = c->mics_shard_size > 0 || c->hpz_partition_size > 1 || c->quantized_weights || c->quantized_gradients;
    if (beyond && c->stage != 3) {
        return zero_error("zero config: mics_shard_size, zero_hpz_partition_size and zero_quantized_weights/gradients need ZeRO stage 3 (stage is %d)", c->stage);
    }
    if (c->mics_shard_size > 0 && c->hpz_partition_size > 1) {
        return zero_error("zero config: mics_shard_size and zero_hpz_partition_size together: choose one (MiCS keeps its gathers inside the shard group already)");
    }
    if (c->mics_shard_size > 0 && c->offload_optimizer != ZERO_OFFLOAD_NONE) {
        return zero_error("zero config: mics_shard_size with offload_optimizer %s is not supported (the replicas' all-reduce runs on the gradients the device holds)",
                          zero_offload_name(c->offload_optimizer));
    }
    if (c->mics_hierarchical_params_gather && c->mics_shard_size <= 0) {
        return zero_error("zero config: mics_hierarchical_params_gather needs mics_shard_size");
    }
    return 0;
}

void zero_config_warnings(const ZeroConfig* c, char* warnings, size_t cap) {
    ZeroConfig d;
    zero_config_defaults(&d);
    ZeroJsonCtx x = { "", warnings, cap, NULL };
    const struct { const char* key; int changed, applies; const char* needs; } knobs[] = {
        { "prefetch (--prefetch)", c->prefetch_depth != d.prefetch_depth, c->stage == 3, "ZeRO stage 3" },
        { "prefetch_bucket_size", c->prefetch_bucket_size != d.prefetch_bucket_size, c->stage == 3, "ZeRO stage 3" },
        { "param_persistence_threshold", c->param_persistence_threshold != d.param_persistence_threshold, c->stage == 3, "ZeRO stage 3" },
        { "max_live_parameters", c->max_live_parameters != d.max_live_parameters, c->stage == 3, "ZeRO stage 3" },
        { "max_reuse_distance", c->max_reuse_distance != d.max_reuse_distance, c->stage == 3, "ZeRO stage 3" },
        { "sub_group_size", c->sub_group_size != d.sub_group_size, c->offload_optimizer == ZERO_OFFLOAD_NVME, "offload_optimizer nvme" },
        { "offload_optimizer.buffer_count", c->buffer_count != d.buffer_count, c->offload_optimizer == ZERO_OFFLOAD_NVME, "offload_optimizer nvme" },
        { "offload_optimizer.pipeline_read", c->pipeline_read != d.pipeline_read, c->offload_optimizer == ZERO_OFFLOAD_NVME, "offload_optimizer nvme" },
        { "offload_optimizer.pipeline_write", c->pipeline_write != d.pipeline_write, c->offload_optimizer == ZERO_OFFLOAD_NVME, "offload_optimizer nvme" },
        { "offload_param.max_in_cpu", c->max_in_cpu != d.max_in_cpu, c->offload_param == ZERO_OFFLOAD_NVME, "offload_param nvme" },
        { "offload_param.buffer_count", c->param_buffer_count != d.param_buffer_count, c->offload_param == ZERO_OFFLOAD_NVME, "offload_param nvme" },
    };
    for (size_t i = 0; i < sizeof(knobs) / sizeof(knobs[0]); i++) {
        if (knobs[i].changed && !knobs[i].applies) {
            zero_json_warn(&x, "warning: ZeRO setting %s has no effect without %s", knobs[i].key, knobs[i].needs);
        }
    }
}

int zero_config_resolve_batch(long long train_batch_size, int micro, int accum, int world, int* micro_out, int* accum_out) {
    if (world < 1) { return zero_error("batch: world size %d must be >= 1", world); }
    long long t = train_batch_size > 0 ? train_batch_size : 0;
    long long m = micro > 0 ? micro : 0;
    long long a = accum > 0 ? accum : 0;
    long long w = world;
    // micro and accum are ints, so micro * world and micro * accum * world stay far below
    // 2^63 (2^31 * 2^31 * 2^31 would not, hence the division-based checks below)
    if (t && m && a) {
        if (t % (m * w) != 0 || t / (m * w) != a) {
            return zero_error("batch: train_batch_size %lld != micro %lld x accum %lld x world %lld", t, m, a, w);
        }
    } else if (t && m) {
        if (t % (m * w) != 0) { return zero_error("batch: train_batch_size %lld is not divisible by micro %lld x world %lld", t, m, w); }
        a = t / (m * w);
    } else if (t && a) {
        if (t % (a * w) != 0) { return zero_error("batch: train_batch_size %lld is not divisible by accum %lld x world %lld", t, a, w); }
        m = t / (a * w);
    } else if (m && a) {
        // nothing to check: the product is the train batch size
    } else if (t) {
        // DeepSpeed's reading of a lone train_batch_size: no accumulation
        a = 1;
        if (t % w != 0) { return zero_error("batch: train_batch_size %lld is not divisible by world %lld (with accum 1)", t, w); }
        m = t / w;
    } else if (m) {
        a = 1;
    } else if (a) {
        return zero_error("batch: gradient_accumulation_steps %lld alone does not fix the batch: give train_batch_size or "
                          "train_micro_batch_size_per_gpu too", a);
    } else {
        return zero_error("batch: none of train_batch_size, train_micro_batch_size_per_gpu, gradient_accumulation_steps given");
    }
    if (m > INT_MAX || a > INT_MAX) {
        return zero_error("batch: micro %lld or accum %lld from train_batch_size %lld and world %lld is too large", m, a, t, w);
    }
    *micro_out = (int)m;
    *accum_out = (int)a;
    return 0;
}

uint64_t zero_hash_bytes(uint64_t h, const void* p, size_t n) {
    const unsigned char* b = (const unsigned char*)p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ULL;  // FNV-1a 64-bit prime
    }
    return h;
}

// integers go in as 8 little-endian bytes so the hash does not depend on the field's type
static uint64_t zero_hash_i64(uint64_t h, long long v) {
    unsigned char b[8];
    for (int i = 0; i < 8; i++) { b[i] = (unsigned char)((unsigned long long)v >> (8 * i)); }
    return zero_hash_bytes(h, b, 8);
}

// floats by their bits, with every NaN (unset) one value and -0 folded into 0
static uint64_t zero_hash_f32(uint64_t h, float v) {
    uint32_t bits = 0;
    if (isnan(v)) { bits = 0x7fc00000u; }
    else if (v == 0.0f) { bits = 0; }
    else { memcpy(&bits, &v, sizeof(bits)); }
    return zero_hash_i64(h, (long long)bits);
}

uint64_t zero_config_hash(const ZeroConfig* c) {
    uint64_t h = 14695981039346656037ULL;  // FNV-1a 64-bit offset basis
    h = zero_hash_bytes(h, "ZeroConfig/2", 12);  // bump when the field list changes
    long long ints[] = {
        c->stage, c->reduce_bucket_size, c->allgather_bucket_size, c->overlap_comm, c->contiguous_gradients,
        c->reduce_scatter, c->prefetch_bucket_size, c->param_persistence_threshold, c->max_live_parameters,
        c->max_reuse_distance, c->sub_group_size, c->prefetch_depth, (long long)c->offload_optimizer,
        (long long)c->offload_param, c->train_batch_size, c->train_micro_batch_size_per_gpu,
        c->gradient_accumulation_steps, c->bf16, (long long)c->comm_dtype,
    };
    for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) { h = zero_hash_i64(h, ints[i]); }
    float floats[] = { c->lr, c->beta1, c->beta2, c->eps, c->weight_decay, c->gradient_clipping };
    for (size_t i = 0; i < sizeof(floats) / sizeof(floats[0]); i++) { h = zero_hash_f32(h, floats[i]); }
    return h;
}

// the value of the option `name` (its key or long flag) as the table writes it: counts as
// DeepSpeed does (1e5, 5e8), devices by name
static const char* zero_value(const ZeroConfig* c, const char* name, char* buf, size_t cap) {
    const OptRow* r = zero_option(name);
    if (r == NULL) { snprintf(buf, cap, "?"); return buf; }
    return opt_format(r, c, buf, cap);
}

// appends as much of s as fits: a log line may lose the end of a long path, never its terminator
static void zero_append(char* out, size_t len, const char* s) {
    size_t n = strlen(out);
    while (*s != '\0' && n + 1 < len) { out[n++] = *s++; }
    out[n] = '\0';
}

void zero_config_describe(const ZeroConfig* c, char* out, size_t len) {
    if (out == NULL || len == 0) { return; }
    char a[32], b[32], d[32], e[32], f[32], g[32], line[512];
    const char* reduce = zero_value(c, ZO "reduce_bucket_size", a, sizeof(a));
    const char* opt = zero_value(c, ZO "offload_optimizer.device", b, sizeof(b));
    if (c->stage == 3) {
        snprintf(line, sizeof(line), "stage 3, prefetch %s, persistence %s, offload optimizer %s, param %s, buckets: prefetch %s, reduce %s",
                 zero_value(c, "--prefetch", d, sizeof(d)), zero_value(c, ZO "stage3_param_persistence_threshold", e, sizeof(e)),
                 opt, zero_value(c, ZO "offload_param.device", f, sizeof(f)),
                 zero_value(c, ZO "stage3_prefetch_bucket_size", g, sizeof(g)), reduce);
    } else if (c->stage == 0) {
        snprintf(line, sizeof(line), "stage 0 (plain data parallel), reduce bucket %s", reduce);
    } else {
        snprintf(line, sizeof(line), "stage %d, offload optimizer %s, buckets: reduce %s", c->stage, opt, reduce);
    }
    out[0] = '\0';
    zero_append(out, len, line);
    if (c->comm_dtype != ZERO_COMM_MODEL) {
        zero_append(out, len, ", gradients reduced in ");
        zero_append(out, len, zero_value(c, "communication_data_type", a, sizeof(a)));
    }
    // the modes beyond one node, each when on: "LABEL VALUE LABEL2" in the table's words
    static const struct { const char* name; const char* before; const char* after; } modes[] = {
        { ZO "mics_shard_size", ", MiCS shard groups of ", "" },
        { ZO "zero_hpz_partition_size", ", hpZ groups of ", "" },
        { ZO "zero_quantized_weights", ", qwZ (int8 gathers)", NULL },
        { ZO "zero_quantized_gradients", ", qgZ (int8 reduce-scatters)", NULL },
        { "--ranks-per-node", ", nodes of ", " ranks" },
    };
    int on[] = { c->mics_shard_size > 0, c->hpz_partition_size > 1, c->quantized_weights, c->quantized_gradients, c->ranks_per_node > 0 };
    for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
        if (!on[i]) { continue; }
        zero_append(out, len, modes[i].before);
        if (modes[i].after == NULL) { continue; }
        zero_append(out, len, zero_value(c, modes[i].name, a, sizeof(a)));
        zero_append(out, len, modes[i].after);
    }
    if (c->offload_optimizer == ZERO_OFFLOAD_NVME || c->offload_param == ZERO_OFFLOAD_NVME) {
        zero_append(out, len, ", nvme ");
        zero_append(out, len, c->nvme_path);
    }
}
