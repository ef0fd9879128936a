/*
 Unit tests of the table of options (zero3/options.h): the ZeRO table (zero_options,
 zero3/config.c) and the trainer's (args_option_table, llmc/args.c), row by row, so that a
 row added later is checked without a test written for it: every row is in --help with its
 default; the defaults in the structs are the table's and pass its checks; every ZeRO row
 with a flag and a DeepSpeed key gives the same struct from either; values out of range are
 refused from the flag and from the JSON, the message naming the flag or the key.

 build and run (from the repo root):
   make build/test_options   (links the library, build/lib/opt/lib.a)
   ./build/test_options
*/
#define _DEFAULT_SOURCE           // mkdtemp and open_memstream under -std=c11
#include <criterion/criterion.h>  // Test, cr_assert*, suite fixtures
#include <stdio.h>                // FILE, fopen, snprintf, open_memstream
#include <stdlib.h>               // mkdtemp, system, free
#include <string.h>               // strstr, strcmp, strchr, memcmp
#include <math.h>                 // isnan (a macro)
#include "llmc/args.h"            // args_parse, args_usage, args_option_table, TrainConfig: code under test
#include "zero3/config.h"         // zero_options, zero_config_set_flag, zero_config_validate: code under test
#include "zero3/config_json.h"    // zero_config_load_json: code under test
#include "zero3/util.h"     // zero_error, zero_errmsg, zero_now_ms
#include "llmc/utils.h"     // llmc_error, llmc_errmsg, the checked wrappers

static char tmpdir[64];
static void make_tmpdir(void) {
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/test_options.XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
}
static void remove_tmpdir(void) {
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    cr_assert_eq(system(cmd), 0);
}
TestSuite(options, .init = make_tmpdir, .fini = remove_tmpdir);

// the rows of both tables, the trainer's then ZeRO's; returns how many
static int all_rows(const OptRow** out, int cap) {
    int n = 0, k = 0;
    const OptRow* rows = args_option_table(&n);
    for (int i = 0; i < n && k < cap; i++) { out[k++] = &rows[i]; }
    for (int i = 0; i < zero_num_options && k < cap; i++) { out[k++] = &zero_options[i]; }
    return k;
}

static const char* row_name(const OptRow* r) { return r->long_flag ? r->long_flag : r->short_flag ? r->short_flag : r->key; }

// the JSON that sets `key` (a dotted path; "optimizer.params.betas[1]" an element of the
// array) to `value`, as JSON text, written to a file; the optimizer's type is required
static const char* json_for(const char* key, const char* value) {
    static char path[128];
    char text[2048] = "", tail[512] = "";
    const char* p = key;
    if (strncmp(key, "optimizer.", 10) == 0) { strcat(text, "{\"optimizer\": {\"type\": \"AdamW\", "); p = key + 10; strcat(tail, "}"); }
    else { strcat(text, "{"); }
    for (;;) {
        const char* dot = strchr(p, '.');
        const char* bracket = strchr(p, '[');
        size_t len = dot ? (size_t)(dot - p) : bracket ? (size_t)(bracket - p) : strlen(p);
        char name[128];
        snprintf(name, sizeof(name), "%.*s", (int)len, p);
        if (dot == NULL) {
            if (bracket != NULL) {
                int i = bracket[1] - '0';
                snprintf(text + strlen(text), sizeof(text) - strlen(text), "\"%s\": [%s, %s]", name, i == 0 ? value : "0.5", i == 0 ? "0.5" : value);
            } else {
                snprintf(text + strlen(text), sizeof(text) - strlen(text), "\"%s\": %s", name, value);
            }
            break;
        }
        snprintf(text + strlen(text), sizeof(text) - strlen(text), "\"%s\": {", name);
        strcat(tail, "}");
        p = dot + 1;
    }
    strcat(text, tail);
    strcat(text, "}");
    snprintf(path, sizeof(path), "%s/opt.json", tmpdir);
    FILE* f = fopen(path, "wb");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
    return path;
}

// the value of a row as JSON text
static const char* json_value(const OptRow* r, const char* text, char* buf, size_t cap) {
    if (r->type == OPT_BOOL) { snprintf(buf, cap, "%s", strcmp(text, "1") == 0 ? "true" : "false"); }
    else if (r->type == OPT_ENUM || r->type == OPT_PATH || r->type == OPT_CHOICE || r->type == OPT_STRING) { snprintf(buf, cap, "\"%s\"", text); }
    else { snprintf(buf, cap, "%s", text); }
    return buf;
}

// a value of the row other than its default, in range, as flag text
static const char* other_value(const OptRow* r, char* buf, size_t cap) {
    if (r->type == OPT_BOOL) { snprintf(buf, cap, "%s", strcmp(r->def, "1") == 0 ? "0" : "1"); }
    else if (r->type == OPT_ENUM) { snprintf(buf, cap, "%s", strrchr(r->choices, '|') + 1); }  // the last: never the default here
    else if (r->type == OPT_PATH) { snprintf(buf, cap, "/tmp/opt_path"); }
    else if (r->type == OPT_FLOAT) { snprintf(buf, cap, "%g", r->lo_open || r->lo == strtod(r->def, NULL) ? (r->lo + r->hi) / 7 : r->lo); }
    else { snprintf(buf, cap, "%lld", (long long)r->lo + 1 == (long long)strtod(r->def, NULL) ? (long long)r->lo + 2 : (long long)r->lo + 1); }
    return buf;
}

Test(options, every_row_is_in_help_with_its_default) {
    char* text = NULL;
    size_t len = 0;
    FILE* f = open_memstream(&text, &len);
    args_usage(f, "train");
    fclose(f);
    const OptRow* rows[256];
    int n = all_rows(rows, 256);
    cr_assert_lt(n, 256);
    for (int i = 0; i < n; i++) {
        const OptRow* r = rows[i];
        char head[256];
        // "  -z, --zero-stage <0..3>", "  --prefetch <n>" (not --prefetch-bucket-size), "  train_batch_size"
        if (r->short_flag && r->long_flag) { snprintf(head, sizeof(head), "\n  %s, %s", r->short_flag, r->long_flag); }
        else { snprintf(head, sizeof(head), "\n  %s%s", row_name(r), r->short_flag || r->long_flag ? " " : ""); }
        const char* at = strstr(text, head);
        cr_assert_not_null(at, "--help does not list %s", row_name(r));
        // the row's text runs to the next row's first line
        const char* next = at + strlen(head);
        while ((next = strstr(next, "\n  ")) != NULL && next[3] == ' ') { next++; }
        size_t span = next ? (size_t)(next - at) : strlen(at);
        // its lines joined: the wrapping may fall anywhere
        char row[2048];
        size_t m = 0;
        for (size_t j = 0; j < span && m + 1 < sizeof(row); j++) {
            char ch = at[j] == '\n' ? ' ' : at[j];
            if (ch == ' ' && m > 0 && row[m - 1] == ' ') { continue; }
            row[m++] = ch;
        }
        row[m] = '\0';
        if (r->type == OPT_HELP) { continue; }
        cr_assert(strstr(row, "(default ") != NULL, "%s: no default in '%s'", row_name(r), row);
        if (r->key != NULL) { cr_assert(strstr(row, r->key) != NULL, "%s: its key %s is not in '%s'", row_name(r), r->key, row); }
        if (r->def != NULL && *r->def && !isnan(strtod(r->def, NULL)) && strcmp(r->def, "-1") != 0) {
            char want[128];
            snprintf(want, sizeof(want), "(default %s", r->def);
            cr_assert(strstr(row, want) != NULL, "%s: '%s' does not say %s", row_name(r), row, want);
        }
    }
    free(text);
}

// the default of each row, given as that row's flag, is accepted and changes nothing; the
// defaults pass the table's range checks and the cross-field validation
Test(options, defaults_are_the_tables) {
    ZeroConfig d;
    zero_config_defaults(&d);
    cr_assert_eq(zero_config_validate(&d), 0, "%s", zero_errmsg());
    cr_assert_eq(opt_check_ranges(zero_options, zero_num_options, &d, "defaults"), 0, "%s", zero_errmsg());
    for (int i = 0; i < zero_num_options; i++) {
        const OptRow* r = &zero_options[i];
        ZeroConfig c = d;
        char buf[64];
        if (r->type == OPT_FLOAT) { cr_assert(isnan(*(float*)((char*)&d + r->offset)) || strcmp(opt_format(r, &d, buf, sizeof(buf)), r->def) == 0, "%s", row_name(r)); continue; }
        if (r->type == OPT_PATH) { cr_assert_str_eq((char*)&d + r->offset, r->def); continue; }
        if (r->type == OPT_ENUM) { cr_assert_str_eq(opt_format(r, &d, buf, sizeof(buf)), r->def, "%s", row_name(r)); continue; }
        if (strtod(r->def, NULL) < r->lo && (r->unset == NULL || strcmp(r->unset, r->def) != 0)) { continue; }  // unset: outside the range
        cr_assert_eq(opt_set_text(r, &c, row_name(r), r->def), 0, "%s %s: %s", row_name(r), r->def, zero_errmsg());
        cr_assert(memcmp(&c, &d, sizeof(c)) == 0, "%s: its default %s is not the struct's", row_name(r), r->def);
    }
    TrainConfig t;
    char* argv[] = { "train", NULL };
    cr_assert_eq(args_parse(&t, 1, argv), 0, "%s", llmc_errmsg());
    int n = 0;
    const OptRow* rows = args_option_table(&n);
    for (int i = 0; i < n; i++) {
        const OptRow* r = &rows[i];
        char got[256], want[256];
        if (r->type == OPT_HELP) { continue; }
        if (r->def == NULL) { cr_assert_null(*(const char**)((char*)&t + r->offset), "%s", row_name(r)); continue; }
        TrainConfig c = t;
        cr_assert_eq(opt_set_text(r, &c, row_name(r), r->def), 0, "%s %s: %s", row_name(r), r->def, zero_errmsg());
        cr_assert_str_eq(opt_format(r, &t, got, sizeof(got)), opt_format(r, &c, want, sizeof(want)), "%s", row_name(r));
    }
}

// a ZeRO row with a flag and a key: the same value from either gives the same struct
Test(options, flag_and_json_give_the_same_config) {
    int checked = 0;
    for (int i = 0; i < zero_num_options; i++) {
        const OptRow* r = &zero_options[i];
        if (r->key == NULL || r->long_flag == NULL) { continue; }
        char v[64], jv[80];
        other_value(r, v, sizeof(v));
        ZeroConfig a, b, d;
        zero_config_defaults(&a);
        zero_config_defaults(&b);
        zero_config_defaults(&d);
        cr_assert_eq(zero_config_set_flag(&a, r->long_flag, v), 0, "%s %s: %s", r->long_flag, v, zero_errmsg());
        cr_assert(memcmp(&a, &d, sizeof(a)) != 0, "%s %s is the default: pick another", r->long_flag, v);
        const char* keys[2] = { r->key, r->alias };
        for (int k = 0; k < 2 && keys[k]; k++) {
            zero_config_defaults(&b);
            cr_assert_eq(zero_config_load_json(&b, json_for(keys[k], json_value(r, v, jv, sizeof(jv))), NULL, 0), 0, "%s: %s", keys[k], zero_errmsg());
            cr_assert(memcmp(&a, &b, sizeof(a)) == 0, "%s %s and %s: %s differ", r->long_flag, v, keys[k], jv);
        }
        checked++;
    }
    cr_assert_geq(checked, 15);
    // -z, the stage's short flag, through the trainer's parser
    TrainConfig t1, t2;
    char* z[] = { "train", "-z", "2" };
    char* zl[] = { "train", "--zero-stage=2" };
    cr_assert_eq(args_parse(&t1, 3, z), 0, "%s", llmc_errmsg());
    cr_assert_eq(args_parse(&t2, 2, zl), 0, "%s", llmc_errmsg());
    cr_assert_eq(t1.zero.stage, 2);
    cr_assert(memcmp(&t1.zero, &t2.zero, sizeof(t1.zero)) == 0);
}

// out of range below and above, from the flag and from the JSON, refused naming the flag or the key
Test(options, out_of_range_refused_both_ways) {
    for (int i = 0; i < zero_num_options; i++) {
        const OptRow* r = &zero_options[i];
        if (r->type != OPT_WHOLE && r->type != OPT_FLOAT && r->type != OPT_BOOL) { continue; }
        char bad[2][64];
        if (r->type == OPT_FLOAT) { snprintf(bad[0], 64, "%g", r->lo_open ? r->lo : r->lo - 1); snprintf(bad[1], 64, "%g", r->hi_open ? r->hi : r->hi * 2); }
        else if (r->type == OPT_BOOL) { snprintf(bad[0], 64, "-1"); snprintf(bad[1], 64, "2"); }
        else {
            long long lo = (long long)r->lo - 1;
            if (r->unset != NULL && lo == atoll(r->unset)) { lo--; }
            snprintf(bad[0], 64, "%lld", lo);
            // past 2^53 a JSON double cannot say hi + 1: twice hi then
            snprintf(bad[1], 64, "%lld", r->hi >= 9007199254740992.0 ? 2 * (long long)r->hi : (long long)r->hi + 1);
        }
        for (int b = 0; b < 2; b++) {
            ZeroConfig c, d;
            zero_config_defaults(&c);
            d = c;
            if (r->long_flag != NULL) {
                cr_assert_eq(zero_config_set_flag(&c, r->long_flag, bad[b]), -1, "%s %s accepted", r->long_flag, bad[b]);
                cr_assert(strstr(zero_errmsg(), r->long_flag) != NULL, "'%s' does not name %s", zero_errmsg(), r->long_flag);
                cr_assert(strstr(zero_errmsg(), "out of range") != NULL, "%s %s: '%s'", r->long_flag, bad[b], zero_errmsg());
                cr_assert(memcmp(&c, &d, sizeof(c)) == 0, "%s changed the config on error", r->long_flag);
            }
            if (r->key != NULL) {
                cr_assert_eq(zero_config_load_json(&c, json_for(r->key, bad[b]), NULL, 0), -1, "%s: %s accepted", r->key, bad[b]);
                cr_assert(strstr(zero_errmsg(), r->key) != NULL, "'%s' does not name %s", zero_errmsg(), r->key);
                const char* says = r->type == OPT_BOOL ? "true or false" : "out of range";
                cr_assert(strstr(zero_errmsg(), says) != NULL, "%s %s: '%s'", r->key, bad[b], zero_errmsg());
                cr_assert(memcmp(&c, &d, sizeof(c)) == 0, "%s changed the config on error", r->key);
            }
            // a struct holding it (set by hand) fails validation, naming the row
            if (r->type == OPT_WHOLE && r->size == sizeof(long long)) { *(long long*)((char*)&c + r->offset) = atoll(bad[b]); }
            else if (r->type == OPT_FLOAT) { *(float*)((char*)&c + r->offset) = strtof(bad[b], NULL); }
            else { *(int*)((char*)&c + r->offset) = atoi(bad[b]); }
            if (strcmp(bad[b], r->def) == 0) { continue; }  // bf16.enabled's -1: unset, the default
            cr_assert_eq(zero_config_validate(&c), -1, "%s = %s validates", row_name(r), bad[b]);
            cr_assert(strstr(zero_errmsg(), r->key ? r->key : r->long_flag) != NULL, "'%s' does not name %s", zero_errmsg(), row_name(r));
        }
    }
    // the trainer's numbers: below and above, through args_parse
    int n = 0;
    const OptRow* rows = args_option_table(&n);
    for (int i = 0; i < n; i++) {
        const OptRow* r = &rows[i];
        if (r->type != OPT_INT && r->type != OPT_FLOAT && r->type != OPT_BOOL) { continue; }
        const char* flag = r->short_flag ? r->short_flag : r->long_flag;
        char bad[2][64];
        snprintf(bad[0], 64, "%lld", (long long)r->lo - 1 == (r->unset ? atoll(r->unset) : 0) && r->unset ? (long long)r->lo - 2 : (long long)r->lo - 1);
        snprintf(bad[1], 64, r->type == OPT_FLOAT ? "%g" : "%.0f", r->type == OPT_FLOAT ? r->hi * 2 : r->hi + 1);
        for (int b = 0; b < 2; b++) {
            TrainConfig t;
            char* argv[] = { "train", (char*)flag, bad[b] };
            cr_assert_eq(args_parse(&t, 3, argv), -1, "%s %s accepted", flag, bad[b]);
            cr_assert(strstr(llmc_errmsg(), flag) != NULL, "'%s' does not name %s", llmc_errmsg(), flag);
            cr_assert(strstr(llmc_errmsg(), "out of range") != NULL, "%s %s: '%s'", flag, bad[b], llmc_errmsg());
        }
    }
}

// every flag of both tables is taken in both forms, "--name value" and "--name=value"
Test(options, every_flag_is_parsed) {
    const OptRow* rows[256];
    int n = all_rows(rows, 256);
    for (int i = 0; i < n; i++) {
        const OptRow* r = rows[i];
        const char* flags[2] = { r->short_flag, r->long_flag };
        for (int k = 0; k < 2; k++) {
            if (flags[k] == NULL || r->type == OPT_HELP || strcmp(flags[k], "--ds-config") == 0) { continue; }
            char v[64], eq[128];
            if (r->type == OPT_CHOICE || r->type == OPT_STRING || r->type == OPT_U64) { snprintf(v, sizeof(v), "%s", r->def ? r->def : "x"); }
            else { other_value(r, v, sizeof(v)); }
            TrainConfig c;
            char* argv[] = { "train", (char*)flags[k], v };
            int rc = args_parse(&c, 3, argv);
            // a value may be refused by the cross-field checks (stage 3's) or as one of llm.c's
            // that this trainer cannot honour ("run with" the one it can), never as a flag
            cr_assert(rc == 0 || strstr(llmc_errmsg(), "zero config") != NULL || strstr(llmc_errmsg(), "; run with -") != NULL,
                      "%s %s: %s", flags[k], v, llmc_errmsg());
            if (k == 1) {
                snprintf(eq, sizeof(eq), "%s=%s", flags[k], v);
                char* argv2[] = { "train", eq };
                int rc2 = args_parse(&c, 2, argv2);
                cr_assert_eq(rc2, rc, "%s: %s", eq, llmc_errmsg());
            }
        }
    }
}
