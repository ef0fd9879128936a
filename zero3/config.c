// zero3/config.c: the implementation (the interface and its notes: zero3/config.h)
#include "zero3/config.h"  // this module's types and prototypes

void zero_config_defaults(ZeroConfig* c) {
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

int zero_check_whole(const char* what, double v, long long lo, long long hi, long long* out) {
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
static int zero_parse_whole(const char* what, const char* s, long long lo, long long hi, long long* out) {
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

int zero_set_path(const char* what, const char* s, char* dst, size_t cap) {
    if (s == NULL || *s == '\0') { return zero_error("%s: the path is empty", what); }
    if (strlen(s) >= cap) { return zero_error("%s: the path is longer than %zu characters", what, cap - 1); }
    memcpy(dst, s, strlen(s) + 1);
    return 0;
}

int zero_config_set_flag(ZeroConfig* c, const char* name, const char* value) {
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

void zero_config_warnings(const ZeroConfig* c, char* warnings, size_t cap) {
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

// 100000 -> "1e5", 500000000 -> "5e8", 1234 -> "1234": DeepSpeed's own way of writing sizes
static const char* zero_format_count(long long v, char* buf, size_t cap) {
    int e = 0;
    long long m = v;
    while (m != 0 && m % 10 == 0) { m /= 10; e++; }
    if (e >= 3) { snprintf(buf, cap, "%llde%d", m, e); }
    else { snprintf(buf, cap, "%lld", v); }
    return buf;
}

// appends as much of s as fits: a log line may lose the end of a long path, never its terminator
static void zero_append(char* out, size_t len, const char* s) {
    size_t n = strlen(out);
    while (*s != '\0' && n + 1 < len) { out[n++] = *s++; }
    out[n] = '\0';
}

void zero_config_describe(const ZeroConfig* c, char* out, size_t len) {
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
