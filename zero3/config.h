/*
 The ZeRO configuration: DeepSpeed's documented config keys, set from a JSON file
 (--ds-config FILE.json: zero3/config_json.h reads it) and from the trainer's long flags.

 Order of precedence, lowest first: zero_config_defaults(), then
 zero_config_load_json() (zero3/config_json.h), then zero_config_set_flag() for each
 flag, then zero_config_validate(). So a flag always overrides the file, whatever the
 order of the two on the command line (the trainer loads the file before it applies the
 flags).

 Decisions worth knowing:
 - Sizes are counts of elements, as in DeepSpeed. JSON numbers and flag values may use
   scientific notation (5e8) but must be whole; they are kept as long long and bounded
   by 2^53, the largest range in which a double (what JSON gives us) is exact.
 - The optimizer is always AdamW with decoupled weight decay. DeepSpeed's "Adam" type
   also decouples the decay unless its adam_w_mode is false, so "Adam" with a weight
   decay loads with a warning that says so; adam_w_mode false with a weight decay is an
   error, since we cannot do the coupled (L2) variant it asks for.
 - communication_data_type (--communication-data-type): the type gradients are reduced in.
   Unset (DeepSpeed's null), the model's: bf16 in the bf16 GPU build, whose device engine
   then reduces its bf16 gradients in bf16 as DeepSpeed and llm.c do. "fp32" widens them and
   reduces, accumulates and uses them in fp32 (2x the gradient traffic); "bf16" as unset.
   The engines whose gradients are fp32 (the host engine, the fp32 build) reduce in fp32
   whatever it says. "fp16" is refused: no engine here has fp16 gradients.
 - The optimizer and parameter offloads share one nvme_path and one pin_memory here:
   the two sections may both give them, but then with the same value.
 - Knobs of a mode that is off (stage 3's with -z 0-2, NVMe's without NVMe) are reported
   by zero_config_warnings.
*/
#ifndef ZERO3_CONFIG_H
#define ZERO3_CONFIG_H

#include <stdio.h>         // snprintf, vsnprintf
#include <stdarg.h>        // va_list for the warning appender
#include <stddef.h>        // offsetof: the flag and key tables point into ZeroConfig
#include <stdint.h>        // uint64_t for the configuration hash
#include <stdlib.h>        // strtoll, strtod
#include <string.h>        // strcmp, strlen, memcpy, memchr
#include <errno.h>         // errno, ERANGE
#include <limits.h>        // INT_MAX: the batch rule's bounds
#include <math.h>          // NAN, isnan, isfinite (macros only: no -lm needed)
#include "zero3/util.h"     // zero_error: the library error convention

typedef enum { ZERO_OFFLOAD_NONE = 0, ZERO_OFFLOAD_CPU, ZERO_OFFLOAD_NVME } ZeroOffload;
// the type gradients are reduced in: the model's (unset), or named
typedef enum { ZERO_COMM_MODEL = 0, ZERO_COMM_FP32, ZERO_COMM_BF16 } ZeroCommDtype;

typedef struct {
    int stage;                          // zero_optimization.stage: 0..3
    long long reduce_bucket_size;       // elements per gradient reduce bucket; 5e8
    long long allgather_bucket_size;    // no effect: a unit is gathered whole; 5e8
    int overlap_comm;                   // no effect: communication always overlaps; 0
    int contiguous_gradients;           // no effect: a unit's gradient is contiguous; 1
    int reduce_scatter;                 // no effect: stages 1-3 always reduce-scatter; 1
    long long prefetch_bucket_size;     // stage3_prefetch_bucket_size (or without stage3_): 5e7
    long long param_persistence_threshold; // stage3_...: units with fewer elements stay gathered; 1e5
    long long max_live_parameters;      // stage3_...: gathered elements kept at once; 1e9
    long long max_reuse_distance;       // stage3_...: keep a unit gathered if reused within this; 1e9
    long long sub_group_size;           // elements per optimizer step group; 1e9
    int prefetch_depth;                 // ours: units fetched ahead (--prefetch N); 2, 0 = off
    ZeroOffload offload_optimizer;      // zero_optimization.offload_optimizer.device
    ZeroOffload offload_param;          // zero_optimization.offload_param.device (stage 3 only)
    char nvme_path[1024];               // offload_*.nvme_path, one for both; "" when unset
    int pin_memory;                     // offload_*.pin_memory, one for both; no effect: always pinned; 0
    int buffer_count;                   // offload_optimizer.buffer_count: NVMe step buffers; 4
    int param_buffer_count;             // offload_param.buffer_count; no effect; 5
    int pipeline_read, pipeline_write;  // offload_optimizer.pipeline_read / pipeline_write; no effect: always; 0
    long long max_in_cpu;               // offload_param.max_in_cpu; 1e9
    // beyond one node (stage 3): MiCS, ZeRO++ (hpZ, qwZ, qgZ), and where the nodes are
    int mics_shard_size;                // zero_optimization.mics_shard_size: ranks per shard group; -1 = off
    int mics_hierarchical_params_gather; // ...: 0/1; gathers of a group spanning nodes are hierarchical either way
    int hpz_partition_size;             // zero_optimization.zero_hpz_partition_size: the secondary group; 1 = off
    int quantized_weights;              // zero_optimization.zero_quantized_weights: qwZ, 0/1
    int quantized_gradients;            // zero_optimization.zero_quantized_gradients: qgZ, 0/1
    int ranks_per_node;                 // ours (--ranks-per-node): consecutive ranks taken as a node; 0 = MPI's shared-memory split
    // training keys of the JSON: -1 (NaN for floats) when absent, so the trainer can tell
    // a value the file set from one it did not
    long long train_batch_size;         // sequences per optimizer step over all ranks
    int train_micro_batch_size_per_gpu;
    int gradient_accumulation_steps;
    float lr, beta1, beta2, eps, weight_decay;  // optimizer.params
    float gradient_clipping;            // global-norm clip; 0 = off
    int bf16;                           // bf16.enabled: 0/1, -1 absent
    ZeroCommDtype comm_dtype;           // communication_data_type; ZERO_COMM_MODEL when absent
} ZeroConfig;

// 2^53: every whole number up to here is exact in a double, the type JSON numbers arrive in
#define ZERO_SIZE_MAX (1LL << 53)

// DeepSpeed's defaults for its keys, ours for prefetch_depth, "absent" for the training keys
static inline void zero_config_defaults(ZeroConfig* c) {
    memset(c, 0, sizeof(*c));
    c->stage = 0;
    c->reduce_bucket_size = 500000000LL;
    c->allgather_bucket_size = 500000000LL;
    c->overlap_comm = 0;
    c->contiguous_gradients = 1;
    c->reduce_scatter = 1;
    c->prefetch_bucket_size = 50000000LL;
    c->param_persistence_threshold = 100000LL;
    c->max_live_parameters = 1000000000LL;
    c->max_reuse_distance = 1000000000LL;
    c->sub_group_size = 1000000000LL;
    c->prefetch_depth = 2;
    c->offload_optimizer = ZERO_OFFLOAD_NONE;
    c->offload_param = ZERO_OFFLOAD_NONE;
    c->nvme_path[0] = '\0';
    c->pin_memory = 0;
    c->buffer_count = 4;
    c->param_buffer_count = 5;
    c->pipeline_read = 0;
    c->pipeline_write = 0;
    c->max_in_cpu = 1000000000LL;
    c->mics_shard_size = -1;
    c->mics_hierarchical_params_gather = 0;
    c->hpz_partition_size = 1;
    c->quantized_weights = 0;
    c->quantized_gradients = 0;
    c->ranks_per_node = 0;
    c->train_batch_size = -1;
    c->train_micro_batch_size_per_gpu = -1;
    c->gradient_accumulation_steps = -1;
    c->lr = NAN;
    c->beta1 = NAN;
    c->beta2 = NAN;
    c->eps = NAN;
    c->weight_decay = NAN;
    c->gradient_clipping = NAN;
    c->bf16 = -1;
    c->comm_dtype = ZERO_COMM_MODEL;
}

// "model" (unset: the model's type), "fp32", "bf16"
static inline const char* zero_comm_dtype_name(ZeroCommDtype t) {
    switch (t) {
        case ZERO_COMM_MODEL: return "model";
        case ZERO_COMM_FP32: return "fp32";
        case ZERO_COMM_BF16: return "bf16";
    }
    return "?";
}

static inline const char* zero_offload_name(ZeroOffload o) {
    switch (o) {
        case ZERO_OFFLOAD_NONE: return "none";
        case ZERO_OFFLOAD_CPU: return "cpu";
        case ZERO_OFFLOAD_NVME: return "nvme";
    }
    return "?";
}

// ----------------------------------------------------------------------------
// value checks shared by the flags and the JSON reader. `what` names the source for
// the message: "flag --zero-stage" or "--ds-config f.json: key 'zero_optimization.stage'".

static inline int zero_check_whole(const char* what, double v, long long lo, long long hi, long long* out) {
    // a double outside [-2^53, 2^53] is no longer exact, and a cast of one outside
    // long long's range is undefined: bound it before converting
    if (!isfinite(v) || v < -(double)ZERO_SIZE_MAX || v > (double)ZERO_SIZE_MAX) {
        return zero_error("%s: %g is out of range [%lld, %lld]", what, v, lo, hi);
    }
    long long w = (long long)v;
    if ((double)w != v) { return zero_error("%s: %g is not a whole number", what, v); }
    if (w < lo || w > hi) { return zero_error("%s: %lld is out of range [%lld, %lld]", what, w, lo, hi); }
    *out = w;
    return 0;
}

// a flag value that must be a whole number: "500000000", "5e8" and "5.0e8" all give 5e8
static inline int zero_parse_whole(const char* what, const char* s, long long lo, long long hi, long long* out) {
    if (s == NULL || *s == '\0') { return zero_error("%s needs a value", what); }
    // strtod alone would take leading blanks, hex ("0x10"), "inf" and "nan": allow only
    // the characters of a decimal number so that none of those slip through
    for (const char* p = s; *p; p++) {
        if (!((*p >= '0' && *p <= '9') || *p == '+' || *p == '-' || *p == '.' || *p == 'e' || *p == 'E')) {
            return zero_error("%s: '%s' is not a number", what, s);
        }
    }
    char* end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*end == '\0') {  // a plain integer: exact, no trip through double
        if (errno == ERANGE || v < lo || v > hi) { return zero_error("%s: %s is out of range [%lld, %lld]", what, s, lo, hi); }
        *out = v;
        return 0;
    }
    errno = 0;
    double d = strtod(s, &end);
    if (end == s || *end != '\0') { return zero_error("%s: '%s' is not a number", what, s); }
    if (errno == ERANGE && d != 0.0) { return zero_error("%s: %s is out of range [%lld, %lld]", what, s, lo, hi); }
    if (errno == ERANGE) { return zero_error("%s: %s is not a whole number", what, s); }  // underflow: 1e-400
    return zero_check_whole(what, d, lo, hi, out);
}

static inline int zero_parse_offload(const char* what, const char* s, ZeroOffload* out) {
    if (s == NULL) { return zero_error("%s needs a value", what); }
    if (strcmp(s, "none") == 0) { *out = ZERO_OFFLOAD_NONE; }
    else if (strcmp(s, "cpu") == 0) { *out = ZERO_OFFLOAD_CPU; }
    else if (strcmp(s, "nvme") == 0) { *out = ZERO_OFFLOAD_NVME; }
    else { return zero_error("%s: unknown device '%s' (accepted: none, cpu, nvme)", what, s); }
    return 0;
}

// ASCII case-insensitive equality: names are matched like DeepSpeed's ("adamw" == "AdamW", "FP32" == "fp32")
static inline int zero_streq_nocase(const char* a, const char* b) {
    for (; *a && *b; a++, b++) {
        char ca = (*a >= 'A' && *a <= 'Z') ? (char)(*a - 'A' + 'a') : *a;
        char cb = (*b >= 'A' && *b <= 'Z') ? (char)(*b - 'A' + 'a') : *b;
        if (ca != cb) { return 0; }
    }
    return *a == *b;
}

// communication_data_type, any case as DeepSpeed lowercases it ("bfp16": its older name
// for bf16); fp16 is DeepSpeed's too, but nothing here has fp16 gradients to reduce
static inline int zero_parse_comm_dtype(const char* what, const char* s, ZeroCommDtype* out) {
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

static inline int zero_set_path(const char* what, const char* s, char* dst, size_t cap) {
    if (s == NULL || *s == '\0') { return zero_error("%s: the path is empty", what); }
    if (strlen(s) >= cap) { return zero_error("%s: the path is longer than %zu characters", what, cap - 1); }
    memcpy(dst, s, strlen(s) + 1);
    return 0;
}

// ----------------------------------------------------------------------------
// command-line flags

// One long flag, `name` as typed ("--zero-stage"), `value` its argument. Returns 0 when
// applied, 1 when `name` is not a ZeRO flag (the caller tries its own; --ds-config is the
// caller's), -1 with zero_errmsg() naming the flag on a bad value, leaving c unchanged.
// Flags: --zero-stage 0..3, --prefetch 0..64, --offload-optimizer none|cpu|nvme,
// --offload-param none|cpu|nvme, --nvme-path DIR, --reduce-bucket-size N,
// --prefetch-bucket-size N, --param-persistence-threshold N, --max-live-parameters N,
// --max-reuse-distance N, --sub-group-size N, --max-in-cpu N, --communication-data-type
// fp32|bf16. (No flag for the keys that
// have no effect: they exist for configs written for DeepSpeed.)
static inline int zero_config_set_flag(ZeroConfig* c, const char* name, const char* value) {
    if (name == NULL) { return 1; }
    // sizes: what to set, and the smallest value that makes sense. A bucket or a
    // sub-group of zero elements could never hold anything; a zero prefetch bucket,
    // persistence threshold, live limit or reuse distance just switches the feature off.
    static const struct { const char* flag; size_t offset; long long lo; } sizes[] = {
        { "--reduce-bucket-size", offsetof(ZeroConfig, reduce_bucket_size), 1 },
        { "--prefetch-bucket-size", offsetof(ZeroConfig, prefetch_bucket_size), 0 },
        { "--param-persistence-threshold", offsetof(ZeroConfig, param_persistence_threshold), 0 },
        { "--max-live-parameters", offsetof(ZeroConfig, max_live_parameters), 0 },
        { "--max-reuse-distance", offsetof(ZeroConfig, max_reuse_distance), 0 },
        { "--sub-group-size", offsetof(ZeroConfig, sub_group_size), 1 },
        { "--max-in-cpu", offsetof(ZeroConfig, max_in_cpu), 0 },
    };
    char what[128];
    snprintf(what, sizeof(what), "flag %s", name);
    long long v = 0;
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        if (strcmp(name, sizes[i].flag) == 0) {
            if (zero_parse_whole(what, value, sizes[i].lo, ZERO_SIZE_MAX, &v) != 0) { return -1; }
            *(long long*)((char*)c + sizes[i].offset) = v;
            return 0;
        }
    }
    if (strcmp(name, "--zero-stage") == 0) {
        if (zero_parse_whole(what, value, 0, 3, &v) != 0) { return -1; }
        c->stage = (int)v;
    } else if (strcmp(name, "--prefetch") == 0) {
        if (zero_parse_whole(what, value, 0, 64, &v) != 0) { return -1; }
        c->prefetch_depth = (int)v;
    } else if (strcmp(name, "--offload-optimizer") == 0) {
        return zero_parse_offload(what, value, &c->offload_optimizer);
    } else if (strcmp(name, "--offload-param") == 0) {
        return zero_parse_offload(what, value, &c->offload_param);
    } else if (strcmp(name, "--nvme-path") == 0) {
        return zero_set_path(what, value, c->nvme_path, sizeof(c->nvme_path));
    } else if (strcmp(name, "--mics-shard-size") == 0) {
        if (zero_parse_whole(what, value, -1, 1 << 20, &v) != 0) { return -1; }
        c->mics_shard_size = (int)v;
    } else if (strcmp(name, "--zero-hpz-partition-size") == 0) {
        if (zero_parse_whole(what, value, 1, 1 << 20, &v) != 0) { return -1; }
        c->hpz_partition_size = (int)v;
    } else if (strcmp(name, "--ranks-per-node") == 0) {
        if (zero_parse_whole(what, value, 0, 1 << 20, &v) != 0) { return -1; }
        c->ranks_per_node = (int)v;
    } else if (strcmp(name, "--mics-hierarchical-params-gather") == 0 || strcmp(name, "--zero-quantized-weights") == 0 ||
               strcmp(name, "--zero-quantized-gradients") == 0) {
        if (zero_parse_whole(what, value, 0, 1, &v) != 0) { return -1; }
        int* f = name[2] == 'm' ? &c->mics_hierarchical_params_gather
               : strcmp(name, "--zero-quantized-weights") == 0 ? &c->quantized_weights : &c->quantized_gradients;
        *f = (int)v;
    } else if (strcmp(name, "--communication-data-type") == 0) {
        return zero_parse_comm_dtype(what, value, &c->comm_dtype);
    } else {
        return 1;  // not ours: --ds-config included, which the trainer loads itself
    }
    return 0;
}

// ----------------------------------------------------------------------------
// warnings: the JSON's unknown and no-effect keys (zero3/config_json.h), settings without
// effect (zero_config_warnings), one line each in the caller's buffer

typedef struct {
    const char* path;     // the file, for messages
    char* warnings;       // appended to; may be NULL
    size_t warnings_len;
} ZeroJsonCtx;

// appends one line to the warnings; when the buffer is full the line is dropped rather
// than cut, so that every line the caller sees is whole
__attribute__((format(printf, 2, 3)))
static inline void zero_json_warn(ZeroJsonCtx* x, const char* fmt, ...) {
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

// ----------------------------------------------------------------------------
// checks across fields, after the file and the flags

// 0 when the fields make sense together; -1 with zero_errmsg() naming the conflict
static inline int zero_config_validate(const ZeroConfig* c) {
    if (c->stage < 0 || c->stage > 3) { return zero_error("zero config: stage %d is out of range [0, 3]", c->stage); }
    if (c->prefetch_depth < 0 || c->prefetch_depth > 64) { return zero_error("zero config: prefetch depth %d is out of range [0, 64]", c->prefetch_depth); }
    if (c->reduce_bucket_size < 1) { return zero_error("zero config: reduce_bucket_size %lld must be >= 1", c->reduce_bucket_size); }
    if (c->allgather_bucket_size < 1) { return zero_error("zero config: allgather_bucket_size %lld must be >= 1", c->allgather_bucket_size); }
    if (c->sub_group_size < 1) { return zero_error("zero config: sub_group_size %lld must be >= 1", c->sub_group_size); }
    if (c->prefetch_bucket_size < 0 || c->param_persistence_threshold < 0 || c->max_live_parameters < 0 ||
        c->max_reuse_distance < 0 || c->max_in_cpu < 0) {
        return zero_error("zero config: prefetch_bucket_size, param_persistence_threshold, max_live_parameters, "
                          "max_reuse_distance and max_in_cpu must be >= 0");
    }
    if (c->buffer_count < 1 || c->param_buffer_count < 1) {
        return zero_error("zero config: offload buffer_count must be >= 1 (optimizer %d, param %d)", c->buffer_count, c->param_buffer_count);
    }
    if ((unsigned)c->offload_optimizer > ZERO_OFFLOAD_NVME || (unsigned)c->offload_param > ZERO_OFFLOAD_NVME) {
        return zero_error("zero config: unknown offload device");
    }
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
    if (c->mics_shard_size == 0 || c->mics_shard_size < -1) { return zero_error("zero config: mics_shard_size %d must be >= 1 (or -1 for off)", c->mics_shard_size); }
    if (c->hpz_partition_size < 1) { return zero_error("zero config: zero_hpz_partition_size %d must be >= 1", c->hpz_partition_size); }
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
    if (c->ranks_per_node < 0) { return zero_error("zero config: ranks_per_node %d must be >= 0", c->ranks_per_node); }
    int bools[] = { c->overlap_comm, c->contiguous_gradients, c->reduce_scatter, c->pin_memory, c->pipeline_read, c->pipeline_write,
                    c->mics_hierarchical_params_gather, c->quantized_weights, c->quantized_gradients };
    for (size_t i = 0; i < sizeof(bools) / sizeof(bools[0]); i++) {
        if (bools[i] != 0 && bools[i] != 1) { return zero_error("zero config: a boolean setting holds %d (0 or 1)", bools[i]); }
    }
    if (c->bf16 < -1 || c->bf16 > 1) { return zero_error("zero config: bf16 holds %d (0, 1 or -1 for unset)", c->bf16); }
    if ((unsigned)c->comm_dtype > ZERO_COMM_BF16) { return zero_error("zero config: unknown communication data type %d", (int)c->comm_dtype); }
    if (c->train_batch_size == 0 || c->train_batch_size < -1) { return zero_error("zero config: train_batch_size %lld must be >= 1 (or -1 for unset)", c->train_batch_size); }
    if (c->train_micro_batch_size_per_gpu == 0 || c->train_micro_batch_size_per_gpu < -1) {
        return zero_error("zero config: train_micro_batch_size_per_gpu %d must be >= 1 (or -1 for unset)", c->train_micro_batch_size_per_gpu);
    }
    if (c->gradient_accumulation_steps == 0 || c->gradient_accumulation_steps < -1) {
        return zero_error("zero config: gradient_accumulation_steps %d must be >= 1 (or -1 for unset)", c->gradient_accumulation_steps);
    }
    if (!isnan(c->lr) && !(c->lr > 0.0f && isfinite(c->lr))) { return zero_error("zero config: lr %g must be > 0", (double)c->lr); }
    if (!isnan(c->beta1) && !(c->beta1 >= 0.0f && c->beta1 < 1.0f)) { return zero_error("zero config: beta1 %g is out of range [0, 1)", (double)c->beta1); }
    if (!isnan(c->beta2) && !(c->beta2 >= 0.0f && c->beta2 < 1.0f)) { return zero_error("zero config: beta2 %g is out of range [0, 1)", (double)c->beta2); }
    if (!isnan(c->eps) && !(c->eps > 0.0f && isfinite(c->eps))) { return zero_error("zero config: eps %g must be > 0", (double)c->eps); }
    if (!isnan(c->weight_decay) && !(c->weight_decay >= 0.0f && isfinite(c->weight_decay))) {
        return zero_error("zero config: weight_decay %g must be >= 0", (double)c->weight_decay);
    }
    if (!isnan(c->gradient_clipping) && !(c->gradient_clipping >= 0.0f && isfinite(c->gradient_clipping))) {
        return zero_error("zero config: gradient_clipping %g must be >= 0", (double)c->gradient_clipping);
    }
    return 0;
}

// Knobs given a value (other than the default) that the configuration leaves without
// effect: stage 3's with -z 0-2, the NVMe step's without NVMe optimizer offload, the
// parameter store's without NVMe parameter offload. One line each appended to warnings
// (cap bytes, whole lines only); nothing is refused: a config may serve several runs.
static inline void zero_config_warnings(const ZeroConfig* c, char* warnings, size_t cap) {
    ZeroConfig d;
    zero_config_defaults(&d);
    ZeroJsonCtx x = { "", warnings, cap };
    const struct { const char* key; int changed, applies; const char* needs; } knobs[] = {
        { "prefetch (--prefetch)", c->prefetch_depth != d.prefetch_depth, c->stage == 3, "ZeRO stage 3" },
        { "prefetch_bucket_size", c->prefetch_bucket_size != d.prefetch_bucket_size, c->stage == 3, "ZeRO stage 3" },
        { "param_persistence_threshold", c->param_persistence_threshold != d.param_persistence_threshold, c->stage == 3, "ZeRO stage 3" },
        { "max_live_parameters", c->max_live_parameters != d.max_live_parameters, c->stage == 3, "ZeRO stage 3" },
        { "max_reuse_distance", c->max_reuse_distance != d.max_reuse_distance, c->stage == 3, "ZeRO stage 3" },
        { "sub_group_size", c->sub_group_size != d.sub_group_size, c->offload_optimizer == ZERO_OFFLOAD_NVME, "offload_optimizer nvme" },
        { "offload_optimizer.buffer_count", c->buffer_count != d.buffer_count, c->offload_optimizer == ZERO_OFFLOAD_NVME, "offload_optimizer nvme" },
        { "offload_param.max_in_cpu", c->max_in_cpu != d.max_in_cpu, c->offload_param == ZERO_OFFLOAD_NVME, "offload_param nvme" },
    };
    for (size_t i = 0; i < sizeof(knobs) / sizeof(knobs[0]); i++) {
        if (knobs[i].changed && !knobs[i].applies) {
            zero_json_warn(&x, "warning: ZeRO setting %s has no effect without %s", knobs[i].key, knobs[i].needs);
        }
    }
}

// ----------------------------------------------------------------------------
// DeepSpeed's batch rule: train_batch_size = micro * accum * world

// Of train_batch_size, micro (per rank) and accum, any two fix the third for `world` ranks;
// all three must satisfy train = micro * accum * world. Inputs <= 0 mean "not given"; a lone
// train_batch_size or micro means accum 1, as in DeepSpeed. Fills *micro_out and *accum_out,
// or returns -1 (outputs untouched) with a message naming the numbers.
static inline int zero_config_resolve_batch(long long train_batch_size, int micro, int accum, int world, int* micro_out, int* accum_out) {
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

// ----------------------------------------------------------------------------
// the start-up agreement check

static inline uint64_t zero_hash_bytes(uint64_t h, const void* p, size_t n) {
    const unsigned char* b = (const unsigned char*)p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ULL;  // FNV-1a 64-bit prime
    }
    return h;
}

// integers go in as 8 little-endian bytes so the hash does not depend on the field's type
static inline uint64_t zero_hash_i64(uint64_t h, long long v) {
    unsigned char b[8];
    for (int i = 0; i < 8; i++) { b[i] = (unsigned char)((unsigned long long)v >> (8 * i)); }
    return zero_hash_bytes(h, b, 8);
}

// floats by their bits, with every NaN (unset) one value and -0 folded into 0
static inline uint64_t zero_hash_f32(uint64_t h, float v) {
    uint32_t bits = 0;
    if (isnan(v)) { bits = 0x7fc00000u; }
    else if (v == 0.0f) { bits = 0; }
    else { memcpy(&bits, &v, sizeof(bits)); }
    return zero_hash_i64(h, (long long)bits);
}

// Every field that decides the sequence of collectives or the numbers of the update,
// which must then agree on all ranks. Left out on purpose: nvme_path, pin_memory,
// buffer counts, pipelining and max_in_cpu, which only say how one rank stages its own
// memory (a node's NVMe mount may well differ from another's).
static inline uint64_t zero_config_hash(const ZeroConfig* c) {
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

// ----------------------------------------------------------------------------
// description for the log

// 100000 -> "1e5", 500000000 -> "5e8", 1234 -> "1234": DeepSpeed's own way of writing sizes
static inline const char* zero_format_count(long long v, char* buf, size_t cap) {
    int e = 0;
    long long m = v;
    while (m != 0 && m % 10 == 0) { m /= 10; e++; }
    if (e >= 3) { snprintf(buf, cap, "%llde%d", m, e); }
    else { snprintf(buf, cap, "%lld", v); }
    return buf;
}

// appends as much of s as fits: a log line may lose the end of a long path, never its terminator
static inline void zero_append(char* out, size_t len, const char* s) {
    size_t n = strlen(out);
    while (*s != '\0' && n + 1 < len) { out[n++] = *s++; }
    out[n] = '\0';
}

// one line for the log, e.g. "stage 3, prefetch 2, persistence 1e5, offload optimizer none,
// param none, buckets: prefetch 5e7, reduce 5e8"; truncated to fit `len`
static inline void zero_config_describe(const ZeroConfig* c, char* out, size_t len) {
    if (out == NULL || len == 0) { return; }
    char a[32], b[32], d[32], line[512];
    if (c->stage == 3) {
        snprintf(line, sizeof(line), "stage 3, prefetch %d, persistence %s, offload optimizer %s, param %s, buckets: prefetch %s, reduce %s",
                 c->prefetch_depth, zero_format_count(c->param_persistence_threshold, a, sizeof(a)),
                 zero_offload_name(c->offload_optimizer), zero_offload_name(c->offload_param),
                 zero_format_count(c->prefetch_bucket_size, b, sizeof(b)), zero_format_count(c->reduce_bucket_size, d, sizeof(d)));
    } else if (c->stage == 0) {
        snprintf(line, sizeof(line), "stage 0 (plain data parallel), reduce bucket %s", zero_format_count(c->reduce_bucket_size, a, sizeof(a)));
    } else {
        snprintf(line, sizeof(line), "stage %d, offload optimizer %s, buckets: reduce %s", c->stage,
                 zero_offload_name(c->offload_optimizer), zero_format_count(c->reduce_bucket_size, a, sizeof(a)));
    }
    out[0] = '\0';
    zero_append(out, len, line);
    if (c->comm_dtype != ZERO_COMM_MODEL) {
        zero_append(out, len, ", gradients reduced in ");
        zero_append(out, len, zero_comm_dtype_name(c->comm_dtype));
    }
    if (c->mics_shard_size > 0) {
        snprintf(line, sizeof(line), ", MiCS shard groups of %d", c->mics_shard_size);
        zero_append(out, len, line);
    }
    if (c->hpz_partition_size > 1) {
        snprintf(line, sizeof(line), ", hpZ groups of %d", c->hpz_partition_size);
        zero_append(out, len, line);
    }
    if (c->quantized_weights) { zero_append(out, len, ", qwZ (int8 gathers)"); }
    if (c->quantized_gradients) { zero_append(out, len, ", qgZ (int8 reduce-scatters)"); }
    if (c->ranks_per_node > 0) {
        snprintf(line, sizeof(line), ", nodes of %d ranks", c->ranks_per_node);
        zero_append(out, len, line);
    }
    if (c->offload_optimizer == ZERO_OFFLOAD_NVME || c->offload_param == ZERO_OFFLOAD_NVME) {
        zero_append(out, len, ", nvme ");
        zero_append(out, len, c->nvme_path);
    }
}

#endif // ZERO3_CONFIG_H
