// zero3/config_json.c: the implementation (the interface and its notes: zero3/config_json.h)
#include "zero3/config_json.h"  // this module's types and prototypes

static void zero_json_unknown(ZeroJsonCtx* x, const char* key) {
    zero_json_warn(x, "warning: --ds-config %s: unknown key '%s' ignored", x->path, key);
}

// a key that is read and validated but changes nothing here (see the top of the file)
static void zero_json_no_effect(ZeroJsonCtx* x, const char* key, const char* why) {
    zero_json_warn(x, "warning: --ds-config %s: key '%s' is accepted but has no effect: %s", x->path, key, why);
}

// "a string \"auto\"", "an object", ...: what the file had where we expected something else
static const char* zero_json_type(const cJSON* it, char* buf, size_t cap) {
    if (cJSON_IsString(it)) { snprintf(buf, cap, "a string \"%.40s\"", it->valuestring); }
    else if (cJSON_IsBool(it)) { snprintf(buf, cap, "a boolean"); }
    else if (cJSON_IsNull(it)) { snprintf(buf, cap, "null"); }
    else if (cJSON_IsNumber(it)) { snprintf(buf, cap, "a number"); }
    else if (cJSON_IsArray(it)) { snprintf(buf, cap, "an array"); }
    else if (cJSON_IsObject(it)) { snprintf(buf, cap, "an object"); }
    else { snprintf(buf, cap, "something else"); }
    return buf;
}

// "zero_optimization" + "stage" -> "zero_optimization.stage"
static const char* zero_json_key(char* buf, size_t cap, const char* prefix, const char* key) {
    if (prefix == NULL || *prefix == '\0') { snprintf(buf, cap, "%s", key); }
    else { snprintf(buf, cap, "%s.%s", prefix, key); }
    return buf;
}

static int zero_json_type_error(ZeroJsonCtx* x, const char* key, const char* expected, const cJSON* it) {
    char got[80];
    zero_json_type(it, got, sizeof(got));
    // Hugging Face writes "auto" for values its Trainer fills in; nobody fills them in here
    if (cJSON_IsString(it) && strcmp(it->valuestring, "auto") == 0) {
        return zero_error("--ds-config %s: key '%s': expected %s, got \"auto\" (a Hugging Face placeholder: give the value)",
                          x->path, key, expected);
    }
    return zero_error("--ds-config %s: key '%s': expected %s, got %s", x->path, key, expected, got);
}

static int zero_json_whole(ZeroJsonCtx* x, const cJSON* it, const char* key, long long lo, long long hi, long long* out) {
    if (!cJSON_IsNumber(it)) { return zero_json_type_error(x, key, "a number", it); }
    char what[1400];
    snprintf(what, sizeof(what), "--ds-config %s: key '%s'", x->path, key);
    return zero_check_whole(what, it->valuedouble, lo, hi, out);
}

static int zero_json_int(ZeroJsonCtx* x, const cJSON* it, const char* key, int lo, int hi, int* out) {
    long long v = 0;
    if (zero_json_whole(x, it, key, lo, hi, &v) != 0) { return -1; }
    *out = (int)v;
    return 0;
}

// DeepSpeed configs use true/false; 0 and 1 are taken too, as Python would
static int zero_json_bool(ZeroJsonCtx* x, const cJSON* it, const char* key, int* out) {
    if (cJSON_IsBool(it)) { *out = cJSON_IsTrue(it) ? 1 : 0; return 0; }
    if (cJSON_IsNumber(it) && (it->valuedouble == 0.0 || it->valuedouble == 1.0)) { *out = (int)it->valuedouble; return 0; }
    return zero_json_type_error(x, key, "true or false", it);
}

// a float in [lo, hi], or (lo, hi] when lo_open
static int zero_json_float(ZeroJsonCtx* x, const cJSON* it, const char* key, double lo, int lo_open, double hi, float* out) {
    if (!cJSON_IsNumber(it)) { return zero_json_type_error(x, key, "a number", it); }
    double v = it->valuedouble;
    int ok = isfinite(v) && (lo_open ? v > lo : v >= lo) && v <= hi && v <= FLT_MAX;
    // a positive value that rounds to 0 as a float would pass as > 0 and act as 0: in range
    // as a number, so say what is wrong with it
    if (ok && lo_open && (float)v <= (float)lo) {
        return zero_error("--ds-config %s: key '%s': %g rounds to %g as a float (the smallest positive float is %g), "
                          "which is out of range (%g, %g]", x->path, key, v, (double)(float)v, (double)FLT_TRUE_MIN, lo, hi);
    }
    if (!ok) {
        return zero_error("--ds-config %s: key '%s': %g is out of range %c%g, %g]", x->path, key, v, lo_open ? '(' : '[', lo, hi);
    }
    *out = (float)v;
    return 0;
}

static int zero_json_offload_device(ZeroJsonCtx* x, const cJSON* it, const char* key, ZeroOffload* out) {
    if (!cJSON_IsString(it)) { return zero_json_type_error(x, key, "a string: none, cpu or nvme", it); }
    char what[1400];
    snprintf(what, sizeof(what), "--ds-config %s: key '%s'", x->path, key);
    return zero_parse_offload(what, it->valuestring, out);
}

// by name, then by place in the object: the order is total, so the result does not
// depend on how qsort breaks ties
static int zero_json_key_cmp(const void* pa, const void* pb) {
    const ZeroJsonKey* a = (const ZeroJsonKey*)pa;
    const ZeroJsonKey* b = (const ZeroJsonKey*)pb;
    (*a->compares)++;
    int c = strcmp(a->item->string, b->item->string);
    if (c != 0) { return c; }
    return a->index < b->index ? -1 : a->index > b->index;
}

int zero_json_find_repeat(const cJSON* obj, const cJSON** repeat, size_t* compares) {
    *repeat = NULL;
    size_t n = 0;
    for (const cJSON* it = obj->child; it != NULL; it = it->next) { n += it->string != NULL; }
    if (n < 2) { return 0; }
    ZeroJsonKey* keys = (ZeroJsonKey*)malloc(n * sizeof(ZeroJsonKey));
    if (keys == NULL) { return -1; }
    size_t k = 0;
    for (const cJSON* it = obj->child; it != NULL; it = it->next) {
        if (it->string == NULL) { continue; }
        keys[k].item = it;
        keys[k].index = k;
        keys[k].compares = compares;
        k++;
    }
    qsort(keys, n, sizeof(ZeroJsonKey), zero_json_key_cmp);
    size_t first = n;  // the earliest first occurrence of a repeated name
    for (size_t i = 0; i + 1 < n; i++) {
        (*compares)++;
        if (strcmp(keys[i].item->string, keys[i + 1].item->string) != 0) { continue; }
        if (first == n || keys[i].index < keys[first].index) { first = i; }
        while (i + 1 < n && strcmp(keys[i].item->string, keys[i + 1].item->string) == 0) { i++; }  // the rest of the run
    }
    if (first < n) { *repeat = keys[first].item; }
    free(keys);
    return 0;
}

// cJSON keeps both copies of a repeated key, and which one wins would be our choice,
// not the author's: refuse the file instead
static int zero_json_no_duplicates(ZeroJsonCtx* x, const cJSON* obj, const char* prefix) {
    const cJSON* rep = NULL;
    size_t compares = 0;
    if (zero_json_find_repeat(obj, &rep, &compares) != 0) { return zero_error("--ds-config %s: out of memory", x->path); }
    if (rep != NULL) {
        char key[512];
        return zero_error("--ds-config %s: key '%s' appears more than once", x->path, zero_json_key(key, sizeof(key), prefix, rep->string));
    }
    return 0;
}

static int zero_json_object(ZeroJsonCtx* x, const cJSON* it, const char* key) {
    if (!cJSON_IsObject(it)) { return zero_json_type_error(x, key, "an object", it); }
    return zero_json_no_duplicates(x, it, key);
}

static int zero_json_optimizer(ZeroJsonCtx* x, const cJSON* opt, ZeroConfig* c) {
    char key[512];
    if (zero_json_object(x, opt, "optimizer") != 0) { return -1; }
    const cJSON* type = NULL;
    const cJSON* params = NULL;
    for (const cJSON* it = opt->child; it != NULL; it = it->next) {
        if (strcmp(it->string, "type") == 0) { type = it; }
        else if (strcmp(it->string, "params") == 0) { params = it; }
        else { zero_json_unknown(x, zero_json_key(key, sizeof(key), "optimizer", it->string)); }
    }
    if (type == NULL) { return zero_error("--ds-config %s: key 'optimizer.type' is missing (AdamW or Adam)", x->path); }
    if (!cJSON_IsString(type)) { return zero_json_type_error(x, "optimizer.type", "a string: AdamW or Adam", type); }
    int is_adamw = zero_streq_nocase(type->valuestring, "adamw");
    if (!is_adamw && !zero_streq_nocase(type->valuestring, "adam")) {
        return zero_error("--ds-config %s: key 'optimizer.type': '%s' is not supported (AdamW or Adam)", x->path, type->valuestring);
    }
    int adam_w_mode = -1;  // -1: not given
    if (params != NULL) {
        if (zero_json_object(x, params, "optimizer.params") != 0) { return -1; }
        for (const cJSON* it = params->child; it != NULL; it = it->next) {
            const char* k = zero_json_key(key, sizeof(key), "optimizer.params", it->string);
            int rc = 0;
            if (strcmp(it->string, "lr") == 0) { rc = zero_json_float(x, it, k, 0.0, 1, 1e6, &c->lr); }
            // eps must be > 0: a parameter whose gradient is always zero (an unused vocabulary
            // row) has v = 0, and eps is then all that keeps the update from being 0/0
            else if (strcmp(it->string, "eps") == 0) { rc = zero_json_float(x, it, k, 0.0, 1, 1.0, &c->eps); }
            else if (strcmp(it->string, "weight_decay") == 0) { rc = zero_json_float(x, it, k, 0.0, 0, 1e6, &c->weight_decay); }
            else if (strcmp(it->string, "adam_w_mode") == 0) { rc = zero_json_bool(x, it, k, &adam_w_mode); }
            else if (strcmp(it->string, "betas") == 0) {
                if (!cJSON_IsArray(it) || cJSON_GetArraySize(it) != 2) { return zero_json_type_error(x, k, "an array of 2 numbers in [0, 1)", it); }
                float b[2];
                for (int i = 0; i < 2; i++) {
                    const cJSON* e = cJSON_GetArrayItem(it, i);
                    char ek[560];
                    snprintf(ek, sizeof(ek), "%s[%d]", k, i);
                    if (!cJSON_IsNumber(e)) { return zero_json_type_error(x, ek, "a number in [0, 1)", e); }
                    // a beta of 1 never forgets and divides by 1 - beta^t = 0 in the bias correction
                    if (!(e->valuedouble >= 0.0 && e->valuedouble < 1.0) || (float)e->valuedouble >= 1.0f) {
                        return zero_error("--ds-config %s: key '%s': %g is out of range [0, 1)", x->path, ek, e->valuedouble);
                    }
                    b[i] = (float)e->valuedouble;
                }
                c->beta1 = b[0];
                c->beta2 = b[1];
            }
            else { zero_json_unknown(x, k); }
            if (rc != 0) { return -1; }
        }
    }
    float wd = isnan(c->weight_decay) ? 0.0f : c->weight_decay;
    if (adam_w_mode == 0 && wd > 0.0f) {
        return zero_error("--ds-config %s: key 'optimizer.params.adam_w_mode': false asks for coupled (L2) weight decay %g; "
                          "only decoupled AdamW decay is implemented", x->path, (double)wd);
    }
    if (!is_adamw && wd > 0.0f && adam_w_mode != 1) {
        zero_json_warn(x, "warning: --ds-config %s: optimizer.type '%s' with weight_decay %g: the decay is applied decoupled, "
                       "as AdamW (DeepSpeed's default adam_w_mode for Adam)", x->path, type->valuestring, (double)wd);
    }
    return 0;
}

static int zero_json_offload(ZeroJsonCtx* x, const cJSON* sec, const char* prefix, int is_param, ZeroConfig* c, ZeroJsonShared* sh) {
    char key[512];
    if (zero_json_object(x, sec, prefix) != 0) { return -1; }
    for (const cJSON* it = sec->child; it != NULL; it = it->next) {
        const char* k = zero_json_key(key, sizeof(key), prefix, it->string);
        const char* n = it->string;
        int rc = 0;
        long long v = 0;
        if (strcmp(n, "device") == 0) {
            rc = zero_json_offload_device(x, it, k, is_param ? &c->offload_param : &c->offload_optimizer);
        } else if (strcmp(n, "nvme_path") == 0) {
            // DeepSpeed leaves it null when unused
            if (cJSON_IsNull(it)) { continue; }
            if (!cJSON_IsString(it)) { return zero_json_type_error(x, k, "a string (a directory)", it); }
            if (sh->nvme_key != NULL && strcmp(c->nvme_path, it->valuestring) != 0) {
                return zero_error("--ds-config %s: key '%s' is '%s' but '%s' is '%s': both offloads use one nvme_path",
                                  x->path, k, it->valuestring, sh->nvme_key, c->nvme_path);
            }
            char what[1400];
            snprintf(what, sizeof(what), "--ds-config %s: key '%s'", x->path, k);
            rc = zero_set_path(what, it->valuestring, c->nvme_path, sizeof(c->nvme_path));
            snprintf(sh->nvme_key_buf, sizeof(sh->nvme_key_buf), "%s", k);
            sh->nvme_key = sh->nvme_key_buf;
        } else if (strcmp(n, "pin_memory") == 0) {
            int b = 0;
            rc = zero_json_bool(x, it, k, &b);
            if (rc == 0 && sh->pin_key != NULL && b != c->pin_memory) {
                return zero_error("--ds-config %s: key '%s' is %s but '%s' is %s: both offloads use one pin_memory",
                                  x->path, k, b ? "true" : "false", sh->pin_key, c->pin_memory ? "true" : "false");
            }
            c->pin_memory = b;
            snprintf(sh->pin_key_buf, sizeof(sh->pin_key_buf), "%s", k);
            sh->pin_key = sh->pin_key_buf;
            zero_json_no_effect(x, k, "the host buffers the GPU copies to and from are always pinned");
        } else if (strcmp(n, "buffer_count") == 0) {
            rc = zero_json_int(x, it, k, 1, 1 << 16, is_param ? &c->param_buffer_count : &c->buffer_count);
            if (is_param) { zero_json_no_effect(x, k, "a unit's parameter shard is read from NVMe one at a time"); }
        } else if (!is_param && (strcmp(n, "pipeline_read") == 0 || strcmp(n, "pipeline_write") == 0)) {
            rc = zero_json_bool(x, it, k, strcmp(n, "pipeline_read") == 0 ? &c->pipeline_read : &c->pipeline_write);
            zero_json_no_effect(x, k, "the NVMe step always overlaps its reads, updates and writes");
        } else if (is_param && strcmp(n, "max_in_cpu") == 0) {
            rc = zero_json_whole(x, it, k, 0, ZERO_SIZE_MAX, &v);
            if (rc == 0) { c->max_in_cpu = v; }
        } else {
            zero_json_unknown(x, k);
        }
        if (rc != 0) { return -1; }
    }
    return 0;
}

static int zero_json_zero_optimization(ZeroJsonCtx* x, const cJSON* z, ZeroConfig* c) {
    const char* P = "zero_optimization";
    char key[512];
    if (zero_json_object(x, z, P) != 0) { return -1; }
    // sizes, with the stage3_ prefix optional (DeepSpeed documents the prefixed names;
    // the bare ones are its internal field names and turn up in configs too)
    static const struct ZeroSizeKey { const char* name; int stage3; size_t offset; long long lo; } sizes[] = {
        { "reduce_bucket_size", 0, offsetof(ZeroConfig, reduce_bucket_size), 1 },
        { "allgather_bucket_size", 0, offsetof(ZeroConfig, allgather_bucket_size), 1 },
        { "sub_group_size", 0, offsetof(ZeroConfig, sub_group_size), 1 },
        { "prefetch_bucket_size", 1, offsetof(ZeroConfig, prefetch_bucket_size), 0 },
        { "param_persistence_threshold", 1, offsetof(ZeroConfig, param_persistence_threshold), 0 },
        { "max_live_parameters", 1, offsetof(ZeroConfig, max_live_parameters), 0 },
        { "max_reuse_distance", 1, offsetof(ZeroConfig, max_reuse_distance), 0 },
    };
    enum { NSIZES = sizeof(sizes) / sizeof(sizes[0]) };
    const cJSON* seen[NSIZES] = { 0 };  // which key set each size, to catch both spellings disagreeing
    ZeroJsonShared sh;
    memset(&sh, 0, sizeof(sh));
    for (const cJSON* it = z->child; it != NULL; it = it->next) {
        const char* n = it->string;
        const char* k = zero_json_key(key, sizeof(key), P, n);
        int rc = 0, matched = 0;
        for (int i = 0; i < NSIZES && !matched; i++) {
            const char* bare = n;
            if (sizes[i].stage3 && strncmp(n, "stage3_", 7) == 0) { bare = n + 7; }
            if (strcmp(bare, sizes[i].name) != 0) { continue; }
            matched = 1;
            long long v = 0;
            if (zero_json_whole(x, it, k, sizes[i].lo, ZERO_SIZE_MAX, &v) != 0) { return -1; }
            long long* field = (long long*)((char*)c + sizes[i].offset);
            if (seen[i] != NULL && *field != v) {
                char other[512];
                return zero_error("--ds-config %s: keys '%s' (%lld) and '%s' (%lld) disagree: they are the same setting",
                                  x->path, zero_json_key(other, sizeof(other), P, seen[i]->string), *field, k, v);
            }
            *field = v;
            seen[i] = it;
            if (sizes[i].offset == offsetof(ZeroConfig, allgather_bucket_size)) {
                zero_json_no_effect(x, k, "a unit is gathered whole (the unit is the bucket)");
            }
        }
        if (matched) { continue; }
        if (strcmp(n, "stage") == 0) { rc = zero_json_int(x, it, k, 0, 3, &c->stage); }
        else if (strcmp(n, "mics_shard_size") == 0) { rc = zero_json_int(x, it, k, -1, 1 << 20, &c->mics_shard_size); }
        else if (strcmp(n, "mics_hierarchical_params_gather") == 0) { rc = zero_json_bool(x, it, k, &c->mics_hierarchical_params_gather); }
        else if (strcmp(n, "zero_hpz_partition_size") == 0) { rc = zero_json_int(x, it, k, 1, 1 << 20, &c->hpz_partition_size); }
        else if (strcmp(n, "zero_quantized_weights") == 0) { rc = zero_json_bool(x, it, k, &c->quantized_weights); }
        else if (strcmp(n, "zero_quantized_gradients") == 0) { rc = zero_json_bool(x, it, k, &c->quantized_gradients); }
        else if (strcmp(n, "overlap_comm") == 0) {
            rc = zero_json_bool(x, it, k, &c->overlap_comm);
            zero_json_no_effect(x, k, "communication always overlaps computation (nonblocking collectives, NCCL on its own stream)");
        } else if (strcmp(n, "contiguous_gradients") == 0) {
            rc = zero_json_bool(x, it, k, &c->contiguous_gradients);
            zero_json_no_effect(x, k, "each unit's gradient is one contiguous buffer already");
        } else if (strcmp(n, "reduce_scatter") == 0) {
            rc = zero_json_bool(x, it, k, &c->reduce_scatter);
            zero_json_no_effect(x, k, "stages 1-3 always reduce-scatter, stage 0 all-reduces");
        }
        else if (strcmp(n, "offload_optimizer") == 0) { rc = zero_json_offload(x, it, k, 0, c, &sh); }
        else if (strcmp(n, "offload_param") == 0) { rc = zero_json_offload(x, it, k, 1, c, &sh); }
        else { zero_json_unknown(x, k); }
        if (rc != 0) { return -1; }
    }
    return 0;
}

static int zero_json_bf16(ZeroJsonCtx* x, const cJSON* b, ZeroConfig* c) {
    char key[512];
    if (zero_json_object(x, b, "bf16") != 0) { return -1; }
    for (const cJSON* it = b->child; it != NULL; it = it->next) {
        const char* k = zero_json_key(key, sizeof(key), "bf16", it->string);
        if (strcmp(it->string, "enabled") == 0) {
            if (zero_json_bool(x, it, k, &c->bf16) != 0) { return -1; }
        } else {
            zero_json_unknown(x, k);
        }
    }
    return 0;
}

// line and column (1-based) of byte `pos` of `text`, for parse errors
static void zero_json_position(const char* text, size_t pos, int* line, int* col) {
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < pos && text[i] != '\0'; i++) {
        if (text[i] == '\n') { (*line)++; *col = 1; } else { (*col)++; }
    }
}

// Reads the whole file into a NUL-terminated buffer; -1 with a message naming it: not a
// regular file (file_fopen: a FIFO, a device, a directory), a file over
// ZERO_CONFIG_MAX_BYTES (refused by its size before reading), a file that changed while read
static int zero_read_file(const char* path, char** out) {
    const char* why = NULL;
    FILE* f = file_fopen(path, O_RDONLY, 0, "rb", &why);  // a FIFO, a device or a directory refused, never waited on
    if (f == NULL) { return zero_error("--ds-config %s: cannot open: %s", path, why); }
    struct stat st;
    char* buf = NULL;
    size_t len = 0, cap = 0;
    if (fstat(fileno(f), &st) != 0) { zero_error("--ds-config %s: cannot stat: %s", path, strerror(errno)); goto fail; }
    if ((unsigned long long)st.st_size > ZERO_CONFIG_MAX_BYTES) {
        zero_error("--ds-config %s: %lld bytes, over the limit of %zu bytes (1 MiB) for a config file (a DeepSpeed config "
                   "is a few kilobytes)", path, (long long)st.st_size, ZERO_CONFIG_MAX_BYTES);
        goto fail;
    }
    cap = (size_t)st.st_size + 1;  // one byte more, to see it grown since
    buf = (char*)malloc(cap + 1);
    if (buf == NULL) { zero_error("--ds-config %s: out of memory reading it", path); goto fail; }
    len = fread(buf, 1, cap, f);
    if (ferror(f)) { zero_error("--ds-config %s: read error: %s", path, strerror(errno)); goto fail; }
    if (len > ZERO_CONFIG_MAX_BYTES) {
        zero_error("--ds-config %s: more than the limit of %zu bytes (1 MiB) for a config file (a DeepSpeed config is a "
                   "few kilobytes)", path, ZERO_CONFIG_MAX_BYTES);
        goto fail;
    }
    if (len != (size_t)st.st_size) {
        zero_error("--ds-config %s: changed while it was read (%lld bytes when opened, %zu%s read)", path,
                   (long long)st.st_size, len, len == cap ? " and more" : "");
        goto fail;
    }
    fclose(f);
    buf[len] = '\0';
    if (strlen(buf) != len) { free(buf); return zero_error("--ds-config %s: contains a NUL byte, not JSON text", path); }
    *out = buf;
    return 0;
fail:
    free(buf);
    fclose(f);
    return -1;
}

int zero_config_load_json(ZeroConfig* c, const char* path, char* warnings, size_t warnings_len) {
    if (path == NULL || *path == '\0') { return zero_error("--ds-config: no file given"); }
    char* text = NULL;
    if (zero_read_file(path, &text) != 0) { return -1; }
    // the parse end pointer says where parsing stopped, like cJSON_GetErrorPtr, without
    // the library's global; require_null_terminated rejects trailing garbage
    const char* end = NULL;
    cJSON* root = cJSON_ParseWithOpts(text, &end, 1);
    if (root == NULL) {
        int line = 0, col = 0;
        size_t pos = end != NULL && end >= text ? (size_t)(end - text) : 0;
        zero_json_position(text, pos, &line, &col);
        zero_error("--ds-config %s: malformed JSON at line %d, column %d", path, line, col);
        free(text);
        return -1;
    }
    ZeroJsonCtx x = { path, warnings, warnings_len };
    ZeroConfig tmp = *c;  // committed only when the whole file is good
    int rc = 0;
    char key[512];
    if (!cJSON_IsObject(root)) { rc = zero_json_type_error(&x, "(top level)", "an object", root); }
    if (rc == 0) { rc = zero_json_no_duplicates(&x, root, ""); }
    for (const cJSON* it = rc == 0 ? root->child : NULL; it != NULL && rc == 0; it = it->next) {
        const char* n = it->string;
        long long v = 0;
        if (strcmp(n, "train_batch_size") == 0) {
            rc = zero_json_whole(&x, it, n, 1, ZERO_SIZE_MAX, &v);
            if (rc == 0) { tmp.train_batch_size = v; }
        }
        else if (strcmp(n, "train_micro_batch_size_per_gpu") == 0) { rc = zero_json_int(&x, it, n, 1, INT_MAX, &tmp.train_micro_batch_size_per_gpu); }
        else if (strcmp(n, "gradient_accumulation_steps") == 0) { rc = zero_json_int(&x, it, n, 1, INT_MAX, &tmp.gradient_accumulation_steps); }
        else if (strcmp(n, "gradient_clipping") == 0) { rc = zero_json_float(&x, it, n, 0.0, 0, 1e6, &tmp.gradient_clipping); }
        else if (strcmp(n, "optimizer") == 0) { rc = zero_json_optimizer(&x, it, &tmp); }
        else if (strcmp(n, "bf16") == 0) { rc = zero_json_bf16(&x, it, &tmp); }
        else if (strcmp(n, "communication_data_type") == 0) {
            // DeepSpeed's default is null: the model's type
            if (cJSON_IsNull(it)) { tmp.comm_dtype = ZERO_COMM_MODEL; continue; }
            if (!cJSON_IsString(it)) { rc = zero_json_type_error(&x, n, "a string: fp32 or bf16", it); continue; }
            char what[1400];
            snprintf(what, sizeof(what), "--ds-config %s: key '%s'", path, n);
            rc = zero_parse_comm_dtype(what, it->valuestring, &tmp.comm_dtype);
        }
        else if (strcmp(n, "zero_optimization") == 0) { rc = zero_json_zero_optimization(&x, it, &tmp); }
        else { zero_json_unknown(&x, zero_json_key(key, sizeof(key), "", n)); }
    }
    cJSON_Delete(root);
    free(text);
    if (rc != 0) { return -1; }
    *c = tmp;
    return 0;
}
