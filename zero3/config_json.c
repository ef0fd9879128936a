// zero3/config_json.c: the implementation (the interface and its notes: zero3/config_json.h)
#include "zero3/config_json.h"  // this module's types and prototypes
#include <stdio.h>         // FILE, fread, snprintf
#include <fcntl.h>         // O_RDONLY
#include <stdlib.h>        // malloc, free, qsort
#include <string.h>        // strcmp, strlen, strerror
#include <errno.h>         // errno
#include <math.h>          // isnan: the weight decay the file left unset (a macro: no -lm needed)
#include <sys/stat.h>      // fstat: a directory or a file over the size limit, before reading it
#include "common/file.h"   // file_fopen: --ds-config opened without blocking on a FIFO or a device
#include "zero3/config.h"  // ZeroConfig, zero_options (each key's row: setter, range), zero_json_warn: what the file sets
#include "zero3/util.h"     // zero_error, zero_errmsg

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

// what a key of the file should have held, for the type error
static const char* zero_json_expected(const OptRow* r, char* buf, size_t cap) {
    switch (r->type) {
        case OPT_BOOL: return "true or false";
        case OPT_INT: case OPT_WHOLE: case OPT_FLOAT: return "a number";
        case OPT_PATH: return "a string (a directory)";
        default: snprintf(buf, cap, "a string: %s", r->arg ? r->arg : r->choices); return buf;
    }
}

// One key of the file through its row of the table: the same setters and range checks as
// the flag. A row given twice, by its key and its alias (stage3_prefetch_bucket_size and
// prefetch_bucket_size; the two offload sections' nvme_path), must say the same both times.
static int zero_json_scalar(ZeroJsonCtx* x, const OptRow* r, int is_alias, const cJSON* it, const char* key, ZeroConfig* c) {
    char what[1400], exp[80];
    snprintf(what, sizeof(what), "--ds-config %s: key '%s'", x->path, key);
    // DeepSpeed writes null for an unused nvme_path and for the model's communication type
    if (cJSON_IsNull(it) && r->offset == offsetof(ZeroConfig, nvme_path)) { return 0; }
    if (cJSON_IsNull(it) && r->offset == offsetof(ZeroConfig, comm_dtype)) { c->comm_dtype = ZERO_COMM_MODEL; return 0; }
    ZeroConfig probe = *c;
    int rc = 0;
    if (r->type == OPT_BOOL && cJSON_IsBool(it)) { rc = opt_set_bool(r, &probe, cJSON_IsTrue(it)); }
    else if (r->type == OPT_BOOL && cJSON_IsNumber(it) && (it->valuedouble == 0.0 || it->valuedouble == 1.0)) {
        rc = opt_set_number(r, &probe, what, it->valuedouble);
    } else if ((r->type == OPT_INT || r->type == OPT_WHOLE || r->type == OPT_FLOAT) && cJSON_IsNumber(it)) {
        rc = opt_set_number(r, &probe, what, it->valuedouble);
    } else if (r->type != OPT_BOOL && r->type != OPT_INT && r->type != OPT_WHOLE && r->type != OPT_FLOAT && cJSON_IsString(it)) {
        rc = opt_set_text(r, &probe, what, it->valuestring);
    } else {
        return zero_json_type_error(x, key, zero_json_expected(r, exp, sizeof(exp)), it);
    }
    if (rc != 0) { return -1; }
    int row = (int)(r - zero_options);
    if (x->seen[row] != 0 && !opt_same(r, c, &probe)) {
        char before[1100], now[1100];
        const char* other = x->seen[row] == 2 ? r->alias : r->key;
        return zero_error("--ds-config %s: keys '%s' (%s) and '%s' (%s) disagree: %s", x->path, other,
                          opt_format(r, c, before, sizeof(before)), key, opt_format(r, &probe, now, sizeof(now)),
                          r->alias_why ? r->alias_why : "they are the same setting");
    }
    x->seen[row] = (unsigned char)(is_alias ? 2 : 1);
    *c = probe;
    if (r->no_effect != NULL) { zero_json_no_effect(x, key, r->no_effect); }
    return 0;
}

static int zero_json_section(ZeroJsonCtx* x, const cJSON* obj, const char* prefix, ZeroConfig* c);

// optimizer: its type is required and not a setting of ours (AdamW, or Adam decoupled as
// DeepSpeed does); params.betas is an array of two rows; params.adam_w_mode is only checked
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
            if (strcmp(it->string, "adam_w_mode") == 0) {
                if (cJSON_IsBool(it)) { adam_w_mode = cJSON_IsTrue(it); }
                else if (cJSON_IsNumber(it) && (it->valuedouble == 0.0 || it->valuedouble == 1.0)) { adam_w_mode = (int)it->valuedouble; }
                else { return zero_json_type_error(x, k, "true or false", it); }
            } else if (strcmp(it->string, "betas") == 0) {
                if (!cJSON_IsArray(it) || cJSON_GetArraySize(it) != 2) { return zero_json_type_error(x, k, "an array of 2 numbers in [0, 1)", it); }
                ZeroConfig probe = *c;
                for (int i = 0; i < 2 && rc == 0; i++) {
                    const cJSON* e = cJSON_GetArrayItem(it, i);
                    char ek[560];
                    snprintf(ek, sizeof(ek), "%s[%d]", k, i);
                    if (!cJSON_IsNumber(e)) { return zero_json_type_error(x, ek, "a number in [0, 1)", e); }
                    rc = zero_json_scalar(x, zero_option(ek), 0, e, ek, &probe);
                }
                if (rc == 0) { *c = probe; }
            } else {
                int alias = 0;
                const OptRow* r = opt_find_key(zero_options, zero_num_options, k, &alias);
                if (r != NULL) { rc = zero_json_scalar(x, r, alias, it, k, c); }
                else { zero_json_unknown(x, k); }
            }
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

// The keys of one object (its check for repeated keys done): a key of the table through
// its row, a section (the prefix of some row's key: zero_optimization, its offload_*, bf16)
// in turn, optimizer by hand; anything else is a warning.
static int zero_json_section(ZeroJsonCtx* x, const cJSON* obj, const char* prefix, ZeroConfig* c) {
    char key[512];
    for (const cJSON* it = obj->child; it != NULL; it = it->next) {
        const char* k = zero_json_key(key, sizeof(key), prefix, it->string);
        int alias = 0, rc = 0;
        const OptRow* r = opt_find_key(zero_options, zero_num_options, k, &alias);
        if (strcmp(k, "optimizer") == 0) { rc = zero_json_optimizer(x, it, c); }
        else if (r != NULL) { rc = zero_json_scalar(x, r, alias, it, k, c); }
        else if (opt_is_section(zero_options, zero_num_options, k)) {
            char sub[512];
            snprintf(sub, sizeof(sub), "%s", k);
            rc = zero_json_object(x, it, sub);
            if (rc == 0) { rc = zero_json_section(x, it, sub, c); }
        }
        else { zero_json_unknown(x, k); }
        if (rc != 0) { return -1; }
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
    ZeroJsonCtx x;
    memset(&x, 0, sizeof(x));
    x.path = path;
    x.warnings = warnings;
    x.warnings_len = warnings_len;
    x.seen = (unsigned char*)calloc((size_t)zero_num_options, 1);
    ZeroConfig tmp = *c;  // committed only when the whole file is good
    int rc = 0;
    if (x.seen == NULL) { rc = zero_error("--ds-config %s: out of memory", path); }
    if (rc == 0 && !cJSON_IsObject(root)) { rc = zero_json_type_error(&x, "(top level)", "an object", root); }
    if (rc == 0) { rc = zero_json_no_duplicates(&x, root, ""); }
    if (rc == 0) { rc = zero_json_section(&x, root, "", &tmp); }
    free(x.seen);
    cJSON_Delete(root);
    free(text);
    if (rc != 0) { return -1; }
    *c = tmp;
    return 0;
}
