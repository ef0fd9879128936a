// zero3/options.c: the implementation (the interface and its notes: zero3/options.h)
#include "zero3/options.h"  // this module's types and prototypes
#include <stdint.h>        // uint64_t: OPT_U64
#include <stdlib.h>        // strtol, strtoll, strtoull, strtod, strtof
#include <string.h>        // strcmp, strlen, strncmp, memcpy, memcmp
#include <errno.h>         // ERANGE
#include <ctype.h>         // isdigit: a negative number after a help_alone flag is its value
#include <float.h>         // FLT_MAX, FLT_MIN, FLT_TRUE_MIN: a value that overflows or underflows a float
#include <math.h>          // isnan, isfinite, fabsf (macros and a builtin: no -lm needed)
#include "zero3/util.h"    // zero_error: the library error convention

// 2^53: every whole number up to here is exact in a double, the type JSON numbers arrive in
#define OPT_WHOLE_MAX 9007199254740992.0

// ----------------------------------------------------------------------------
// the field: stores and loads by the field's size

static void* opt_field(const OptRow* r, void* cfg) { return (char*)cfg + r->offset; }
static const void* opt_cfield(const OptRow* r, const void* cfg) { return (const char*)cfg + r->offset; }

static void opt_store_int(const OptRow* r, void* cfg, long long v) {
    if (r->size == sizeof(long long)) { *(long long*)opt_field(r, cfg) = v; }
    else { *(int*)opt_field(r, cfg) = (int)v; }
}

static long long opt_load_int(const OptRow* r, const void* cfg) {
    if (r->size == sizeof(long long)) { return *(const long long*)opt_cfield(r, cfg); }
    return *(const int*)opt_cfield(r, cfg);
}

static int opt_is_integer(const OptRow* r) {
    return r->type == OPT_INT || r->type == OPT_WHOLE || r->type == OPT_BOOL || r->type == OPT_ENUM;
}

// the row's unset marker as a number (NaN when none)
static double opt_unset(const OptRow* r) { return r->unset != NULL ? strtod(r->unset, NULL) : NAN; }

// "[1, 1099511627776] (or -1)": the range for messages, integers exactly
static const char* opt_range_text(const OptRow* r, char* buf, size_t cap) {
    char lo[32], hi[32];
    if (opt_is_integer(r)) {
        snprintf(lo, sizeof(lo), "%lld", (long long)r->lo);
        snprintf(hi, sizeof(hi), "%lld", (long long)r->hi);
    } else {
        snprintf(lo, sizeof(lo), "%g", r->lo);
        snprintf(hi, sizeof(hi), "%g", r->hi);
    }
    snprintf(buf, cap, "%c%s, %s%c%s%s%s", r->lo_open ? '(' : '[', lo, hi, r->hi_open ? ')' : ']',
             r->unset ? " (or " : "", r->unset ? r->unset : "", r->unset ? ")" : "");
    return buf;
}

static int opt_in_range(const OptRow* r, double v) {
    if (r->unset != NULL && v == opt_unset(r)) { return 1; }
    return (r->lo_open ? v > r->lo : v >= r->lo) && (r->hi_open ? v < r->hi : v <= r->hi);
}

// an integer, compared exactly (2^53 + 1 is 2^53 as a double); the bounds are whole and at
// most 2^53, which a double holds exactly
static int opt_in_range_ll(const OptRow* r, long long v) {
    if (r->unset != NULL && (double)v == opt_unset(r)) { return 1; }
    return v >= (long long)r->lo && v <= (long long)r->hi;
}

static int opt_out_of_range(const OptRow* r, const char* what, const char* v) {
    char range[96];
    return zero_error("%s: %s is out of range %s", what, v, opt_range_text(r, range, sizeof(range)));
}

// ----------------------------------------------------------------------------
// numbers from text

// a decimal integer, the whole string (strtol's: "4", "+4", "-1"; never "4x" or "4e0")
static int opt_parse_int(const OptRow* r, const char* what, const char* s, long long* out) {
    char* end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*s == '\0' || *end != '\0') { return zero_error("%s: '%s' is not an integer", what, s); }
    if (errno == ERANGE || !opt_in_range_ll(r, v)) { return opt_out_of_range(r, what, s); }
    *out = v;
    return 0;
}

// a double that must be a whole number in range: a flag's "5e8", a JSON number
static int opt_check_whole(const OptRow* r, const char* what, double d, long long* out) {
    char num[32];
    snprintf(num, sizeof(num), "%g", d);
    // a double outside [-2^53, 2^53] is no longer exact, and a cast of one outside long
    // long's range is undefined: bound it before converting
    if (!isfinite(d) || d < -OPT_WHOLE_MAX || d > OPT_WHOLE_MAX) { return opt_out_of_range(r, what, num); }
    long long w = (long long)d;
    if ((double)w != d) { return zero_error("%s: %g is not a whole number", what, d); }
    snprintf(num, sizeof(num), "%lld", w);
    if (!opt_in_range_ll(r, w)) { return opt_out_of_range(r, what, num); }
    *out = w;
    return 0;
}

// a whole number that may be written as a count: "500000000", "5e8" and "5.0e8" all give 5e8
static int opt_parse_whole(const OptRow* r, const char* what, const char* s, long long* out) {
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
        if (errno == ERANGE || !opt_in_range_ll(r, v)) { return opt_out_of_range(r, what, s); }
        *out = v;
        return 0;
    }
    errno = 0;
    double d = strtod(s, &end);
    if (end == s || *end != '\0') { return zero_error("%s: '%s' is not a number", what, s); }
    if (errno == ERANGE && d != 0.0) { return opt_out_of_range(r, what, s); }
    if (errno == ERANGE) { return zero_error("%s: %s is not a whole number", what, s); }  // underflow: 1e-400
    return opt_check_whole(r, what, d, out);
}

// strtof's ERANGE is two things: an overflow (inf: out of any range) and an underflow, a
// value below FLT_MIN that comes back subnormal (1e-45: a float of its own, in range like
// any other) or 0 (1e-50: no float holds it, and 0 is not what was asked for)
static int opt_parse_float(const OptRow* r, const char* what, const char* s, float* out) {
    char* end = NULL;
    errno = 0;
    float v = strtof(s, &end);
    if (*s == '\0' || *end != '\0') { return zero_error("%s: '%s' is not a number", what, s); }
    int underflow = errno == ERANGE && fabsf(v) <= FLT_MIN;
    if (underflow && v == 0.0f) {
        return zero_error("%s: %s is too small for a float: it would be 0 (the smallest positive float is %g)", what, s,
                          (double)FLT_TRUE_MIN);
    }
    if ((errno == ERANGE && !underflow) || isnan(v) || !opt_in_range(r, v)) { return opt_out_of_range(r, what, s); }
    *out = v;
    return 0;
}

// a float from a JSON double: in range as a double, and still in range once a float (a
// positive value that rounds to 0 would pass as > 0 and act as 0: say so)
static int opt_check_float(const OptRow* r, const char* what, double v, float* out) {
    char range[96], num[32];
    int ok = isfinite(v) && opt_in_range(r, v) && v <= FLT_MAX;
    if (ok && r->lo_open && (float)v <= (float)r->lo) {
        return zero_error("%s: %g rounds to %g as a float (the smallest positive float is %g), which is out of range %s",
                          what, v, (double)(float)v, (double)FLT_TRUE_MIN, opt_range_text(r, range, sizeof(range)));
    }
    if (ok && r->hi_open && (float)v >= (float)r->hi) { ok = 0; }  // 0.99999999 is 1 as a float
    snprintf(num, sizeof(num), "%g", v);
    if (!ok) { return opt_out_of_range(r, what, num); }
    *out = (float)v;
    return 0;
}

// ----------------------------------------------------------------------------
// the rows

static int opt_choice_index(const char* choices, const char* s) {
    int i = 0;
    for (const char* p = choices; ; i++) {
        const char* bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (strlen(s) == len && strncmp(p, s, len) == 0) { return i; }
        if (bar == NULL) { return -1; }
        p = bar + 1;
    }
}

// (OPT_CHOICE and OPT_STRING keep the pointer given: argv's, which outlives the config; a
// pointer into the row's `choices` would not be terminated)
int opt_set_text(const OptRow* r, void* cfg, const char* what, const char* s) {
    if (s == NULL || (*s == '\0' && r->type != OPT_STRING)) {
        if (r->type == OPT_PATH) { return zero_error("%s: the path is empty", what); }
        return zero_error("%s needs a value", what);
    }
    long long v = 0;
    switch (r->type) {
        case OPT_INT:
        case OPT_BOOL:
            if (opt_parse_int(r, what, s, &v) != 0) { return -1; }
            opt_store_int(r, cfg, v);
            return 0;
        case OPT_WHOLE:
            if (opt_parse_whole(r, what, s, &v) != 0) { return -1; }
            opt_store_int(r, cfg, v);
            return 0;
        case OPT_FLOAT: return opt_parse_float(r, what, s, (float*)opt_field(r, cfg));
        case OPT_ENUM: {
            int e = 0;
            if (r->parse(what, s, &e) != 0) { return -1; }
            *(int*)opt_field(r, cfg) = e;
            return 0;
        }
        case OPT_CHOICE:
            if (opt_choice_index(r->choices, s) < 0) { return zero_error("%s: unknown value '%s' (%s)", what, s, r->choices); }
            *(const char**)opt_field(r, cfg) = s;
            return 0;
        case OPT_PATH:
            if (strlen(s) >= r->size) { return zero_error("%s: the path is longer than %zu characters", what, r->size - 1); }
            memcpy(opt_field(r, cfg), s, strlen(s) + 1);
            return 0;
        case OPT_STRING: *(const char**)opt_field(r, cfg) = s; return 0;
        case OPT_U64: {
            char* end = NULL;
            errno = 0;
            unsigned long long u = strtoull(s, &end, 10);
            if (*end != '\0' || s[0] == '-' || errno == ERANGE) { return zero_error("%s: '%s' is not a non-negative integer", what, s); }
            *(uint64_t*)opt_field(r, cfg) = u;
            return 0;
        }
        case OPT_HELP: return 0;
    }
    return zero_error("%s: unknown option type", what);
}

int opt_set_number(const OptRow* r, void* cfg, const char* what, double v) {
    if (r->type == OPT_FLOAT) { return opt_check_float(r, what, v, (float*)opt_field(r, cfg)); }
    if (r->type == OPT_BOOL) {
        if (v != 0.0 && v != 1.0) { return zero_error("%s: %g is not true or false", what, v); }
        opt_store_int(r, cfg, (long long)v);
        return 0;
    }
    if (r->type != OPT_INT && r->type != OPT_WHOLE) { return zero_error("%s: a number where a string belongs", what); }
    long long w = 0;
    if (opt_check_whole(r, what, v, &w) != 0) { return -1; }
    opt_store_int(r, cfg, w);
    return 0;
}

int opt_set_bool(const OptRow* r, void* cfg, int v) {
    opt_store_int(r, cfg, v ? 1 : 0);
    return 0;
}

void opt_defaults(const OptRow* rows, int n, void* cfg) {
    for (int i = 0; i < n; i++) {
        const OptRow* r = &rows[i];
        const char* d = r->def;
        switch (r->type) {
            case OPT_INT: case OPT_WHOLE: case OPT_BOOL: opt_store_int(r, cfg, (long long)strtod(d, NULL)); break;
            case OPT_FLOAT: *(float*)opt_field(r, cfg) = strtof(d, NULL); break;
            case OPT_U64: *(uint64_t*)opt_field(r, cfg) = strtoull(d, NULL, 10); break;
            case OPT_CHOICE: case OPT_STRING: *(const char**)opt_field(r, cfg) = d; break;
            case OPT_PATH: memcpy(opt_field(r, cfg), d, strlen(d) + 1); break;
            case OPT_ENUM:
                for (int v = 0; v < 64; v++) {
                    if (strcmp(r->name(v), d) == 0) { *(int*)opt_field(r, cfg) = v; break; }
                }
                break;
            case OPT_HELP: break;
        }
    }
}

const OptRow* opt_find_flag(const OptRow* rows, int n, const char* name) {
    if (name == NULL) { return NULL; }
    for (int i = 0; i < n; i++) {
        if ((rows[i].short_flag && strcmp(rows[i].short_flag, name) == 0) || (rows[i].long_flag && strcmp(rows[i].long_flag, name) == 0)) {
            return &rows[i];
        }
    }
    return NULL;
}

const OptRow* opt_find_key(const OptRow* rows, int n, const char* key, int* is_alias) {
    for (int i = 0; i < n; i++) {
        int alias = rows[i].alias != NULL && strcmp(rows[i].alias, key) == 0;
        if ((rows[i].key != NULL && strcmp(rows[i].key, key) == 0) || alias) {
            if (is_alias != NULL) { *is_alias = alias; }
            return &rows[i];
        }
    }
    return NULL;
}

int opt_is_section(const OptRow* rows, int n, const char* prefix) {
    size_t len = strlen(prefix);
    for (int i = 0; i < n; i++) {
        const char* k[2] = { rows[i].key, rows[i].alias };
        for (int j = 0; j < 2; j++) {
            if (k[j] != NULL && strncmp(k[j], prefix, len) == 0 && k[j][len] == '.') { return 1; }
        }
    }
    return 0;
}

// 100000 -> "1e5", 500000000 -> "5e8", 1234 -> "1234": DeepSpeed's own way of writing sizes
static const char* opt_format_count(long long v, char* buf, size_t cap) {
    int e = 0;
    long long m = v;
    while (m != 0 && m % 10 == 0) { m /= 10; e++; }
    if (e >= 3) { snprintf(buf, cap, "%llde%d", m, e); }
    else { snprintf(buf, cap, "%lld", v); }
    return buf;
}

const char* opt_format(const OptRow* r, const void* cfg, char* buf, size_t cap) {
    const void* p = opt_cfield(r, cfg);
    switch (r->type) {
        case OPT_INT: case OPT_BOOL: snprintf(buf, cap, "%lld", opt_load_int(r, cfg)); break;
        // counts of elements (long long) as DeepSpeed writes them; ranks and stages plainly
        case OPT_WHOLE:
            if (r->size == sizeof(long long)) { opt_format_count(opt_load_int(r, cfg), buf, cap); }
            else { snprintf(buf, cap, "%lld", opt_load_int(r, cfg)); }
            break;
        case OPT_FLOAT: snprintf(buf, cap, "%g", (double)*(const float*)p); break;
        case OPT_ENUM: snprintf(buf, cap, "%s", r->name(*(const int*)p)); break;
        case OPT_CHOICE: case OPT_STRING: snprintf(buf, cap, "%s", *(const char* const*)p ? *(const char* const*)p : "(none)"); break;
        case OPT_PATH: snprintf(buf, cap, "%s", (const char*)p); break;
        case OPT_U64: snprintf(buf, cap, "%llu", (unsigned long long)*(const uint64_t*)p); break;
        case OPT_HELP: snprintf(buf, cap, "-"); break;
    }
    return buf;
}

int opt_same(const OptRow* r, const void* a, const void* b) {
    if (r->type == OPT_PATH) { return strcmp((const char*)opt_cfield(r, a), (const char*)opt_cfield(r, b)) == 0; }
    return memcmp(opt_cfield(r, a), opt_cfield(r, b), r->size) == 0;
}

int opt_check_ranges(const OptRow* rows, int n, const void* cfg, const char* prefix) {
    char range[96], val[48];
    for (int i = 0; i < n; i++) {
        const OptRow* r = &rows[i];
        double v = 0.0, d = strtod(r->def ? r->def : "0", NULL);
        if (opt_is_integer(r) && r->type != OPT_ENUM) { v = (double)opt_load_int(r, cfg); }
        else if (r->type == OPT_ENUM) { v = *(const int*)opt_cfield(r, cfg); d = NAN; }  // its default is a name
        else if (r->type == OPT_FLOAT) { v = *(const float*)opt_cfield(r, cfg); }
        else { continue; }
        int ok = opt_is_integer(r) && r->type != OPT_ENUM ? opt_in_range_ll(r, opt_load_int(r, cfg)) : !isnan(v) && opt_in_range(r, v);
        if (ok || v == d || (isnan(v) && isnan(d))) { continue; }
        const char* name = r->key ? r->key : r->long_flag ? r->long_flag : r->short_flag;
        if (r->type == OPT_FLOAT) { snprintf(val, sizeof(val), "%g", v); }
        else if (r->type == OPT_ENUM) { snprintf(val, sizeof(val), "%d", *(const int*)opt_cfield(r, cfg)); }
        else { snprintf(val, sizeof(val), "%lld", opt_load_int(r, cfg)); }
        return zero_error("%s: %s %s is out of range %s", prefix, name, val, opt_range_text(r, range, sizeof(range)));
    }
    return 0;
}

// ----------------------------------------------------------------------------
// the command line

static const OptRow* opt_lookup(OptSet* sets, int nsets, const char* name, int* set, int* index) {
    for (int s = 0; s < nsets; s++) {
        const OptRow* r = opt_find_flag(sets[s].rows, sets[s].n, name);
        if (r != NULL) { *set = s; *index = (int)(r - sets[s].rows); return r; }
    }
    return NULL;
}

int opt_parse_args(OptSet* sets, int nsets, int argc, char** argv) {
    for (int i = 1; i < argc; i++) {
        const char* flag = argv[i];
        int s = 0, k = 0;
        const OptRow* help = opt_lookup(sets, nsets, flag, &s, &k);
        if (help != NULL && help->type == OPT_HELP) { return 1; }
        // (a flag after it, not a negative number, means it came alone)
        if (help != NULL && help->help_alone &&
            (i + 1 >= argc || (argv[i + 1][0] == '-' && !isdigit((unsigned char)argv[i + 1][1]) && argv[i + 1][1] != '.'))) {
            return 1;
        }
        if (flag[0] != '-' || flag[1] == '\0') { return zero_error("unexpected argument '%s' (flags look like -b 4 or --seed 1)", flag); }
        // "--name=value" or "--name value" / "-x value"
        char name[64];
        const char* val = NULL;
        const char* eq = strncmp(flag, "--", 2) == 0 ? strchr(flag, '=') : NULL;
        if (eq != NULL) {
            size_t len = (size_t)(eq - flag);
            if (len >= sizeof(name)) { return zero_error("unknown flag %s", flag); }
            memcpy(name, flag, len);
            name[len] = '\0';
            val = eq + 1;
        } else {
            if (strlen(flag) >= sizeof(name)) { return zero_error("unknown flag %s", flag); }
            strcpy(name, flag);
            if (i + 1 >= argc) { return zero_error("flag %s needs a value", flag); }
            val = argv[++i];
        }
        const OptRow* r = opt_lookup(sets, nsets, name, &s, &k);
        if (r == NULL) { return zero_error("unknown flag %s (see --help)", name); }
        char what[80];
        snprintf(what, sizeof(what), "flag %s", name);
        if (opt_set_text(r, sets[s].cfg, what, val) != 0) { return -1; }
        if (sets[s].given != NULL) { sets[s].given[k] = 1; }
    }
    return 0;
}

// ----------------------------------------------------------------------------
// --help

#define OPT_HELP_COL 38    // where the help text starts
#define OPT_HELP_WIDTH 118 // where it wraps

// `text` from column `col` on, wrapped at OPT_HELP_WIDTH at the spaces
static void opt_print_wrapped(FILE* f, const char* text, int col) {
    int at = col;
    const char* p = text;
    while (*p) {
        const char* w = p;
        while (*w && *w != ' ') { w++; }
        int len = (int)(w - p);
        if (at > col && at + 1 + len > OPT_HELP_WIDTH) { fprintf(f, "\n%*s", col, ""); at = col; }
        else if (at > col) { fputc(' ', f); at++; }
        fprintf(f, "%.*s", len, p);
        at += len;
        p = w;
        while (*p == ' ') { p++; }
    }
    fputc('\n', f);
}

static const char* opt_arg_name(const OptRow* r) {
    if (r->arg != NULL) { return r->arg; }
    switch (r->type) {
        case OPT_INT: case OPT_U64: return "<int>";
        case OPT_WHOLE: return "<n>";
        case OPT_FLOAT: return "<float>";
        case OPT_BOOL: return "0|1";
        case OPT_ENUM: case OPT_CHOICE: return r->choices;
        case OPT_PATH: return "<dir>";
        case OPT_STRING: return "<str>";
        case OPT_HELP: return "";
    }
    return "";
}

static void opt_print_row(FILE* f, const OptRow* r) {
    char head[128], text[1200];
    const char* name = r->short_flag && r->long_flag ? "" : r->short_flag ? r->short_flag : r->long_flag ? r->long_flag : r->key;
    if (r->short_flag && r->long_flag) { snprintf(head, sizeof(head), "  %s, %s %s", r->short_flag, r->long_flag, opt_arg_name(r)); }
    else if (r->short_flag || r->long_flag) { snprintf(head, sizeof(head), "  %s %s", name, opt_arg_name(r)); }
    else { snprintf(head, sizeof(head), "  %s", name); }
    int n = fprintf(f, "%s", head);
    if (n >= OPT_HELP_COL - 1) { fprintf(f, "\n%*s", OPT_HELP_COL, ""); } else { fprintf(f, "%*s", OPT_HELP_COL - n, ""); }
    const char* tag = r->trainer == OPT_GPU ? "GPU trainer: " : r->trainer == OPT_CPU ? "CPU trainer: " : "";
    int len = snprintf(text, sizeof(text), "%s%s", tag, r->help);
    // a number whose default is outside its range (-1, NaN) is unset by default: the key's absence
    int unset = (opt_is_integer(r) || r->type == OPT_FLOAT) && r->type != OPT_ENUM && r->def != NULL && !opt_in_range(r, strtod(r->def, NULL));
    if (r->type != OPT_HELP && len < (int)sizeof(text)) {
        len += snprintf(text + len, sizeof(text) - (size_t)len, " (default %s%s%s)", unset ? "unset" : r->def && *r->def ? r->def : "none",
                        r->key && (r->short_flag || r->long_flag) ? "; --ds-config key " : "",
                        r->key && (r->short_flag || r->long_flag) ? r->key : "");
    }
    if (r->alias != NULL && len < (int)sizeof(text)) { len += snprintf(text + len, sizeof(text) - (size_t)len, "; also %s", r->alias); }
    if (r->no_effect != NULL && len < (int)sizeof(text)) { snprintf(text + len, sizeof(text) - (size_t)len, "; no effect here: %s", r->no_effect); }
    opt_print_wrapped(f, text, OPT_HELP_COL);
}

void opt_print_help(FILE* f, const OptRow* rows, int n, int keys_too) {
    for (int pass = 0; pass < (keys_too ? 2 : 1); pass++) {
        if (pass == 1) { fprintf(f, "\nDeepSpeed keys of --ds-config without a flag:\n"); }
        for (int i = 0; i < n; i++) {
            int flagged = rows[i].short_flag != NULL || rows[i].long_flag != NULL;
            if (flagged != (pass == 0) || (!flagged && rows[i].key == NULL)) { continue; }
            if (pass == 0 && rows[i].group != NULL) { fprintf(f, "\n%s:\n", rows[i].group); }
            opt_print_row(f, &rows[i]);
        }
    }
}
