/*
 One table of options: each option once, as a row that names its short and long flag,
 its DeepSpeed JSON key, its type, range and default, its help text, the trainer it is
 for, and where it lives in its configuration struct (offsetof). From the rows come the
 defaults (opt_defaults), the command line (opt_parse_args: strict, every problem one
 line naming the flag), --help (opt_print_help), the JSON's scalar keys (opt_set_number,
 opt_set_bool, opt_set_text with the same range checks: zero3/config_json.c walks the
 file), the validation of ranges (opt_check_ranges) and the values of the run's
 description (opt_format).

 Two tables use it: the ZeRO options (zero_options, zero3/config.c, over ZeroConfig) and
 the trainer's own (llmc/args.c, over TrainConfig). This file knows neither struct.

 Decisions worth knowing:
 - A default is text, as it would be typed ("5e8", "none", "nan"), stored without the
   range check: the JSON-only keys default to an "unset" marker (-1, NaN) outside their
   range, which the checks then accept as the default.
 - `unset` names one more value a flag accepts outside the range (-d -1: B*T*ranks).
 - OPT_INT is a decimal integer (llm.c's flags: "-b 4", never "4e0"); OPT_WHOLE a count
   that may use scientific notation ("5e8"), as DeepSpeed's sizes do, bounded by 2^53
   (what a JSON double holds exactly). OPT_BOOL is 0 or 1 on the command line, true or
   false (or 0 or 1) in JSON.
 - A failed set leaves the struct unchanged.
*/
#ifndef ZERO3_OPTIONS_H
#define ZERO3_OPTIONS_H

#include <stdio.h>         // FILE for the help, snprintf
#include <stddef.h>        // size_t, offsetof for OPT_FIELD

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    OPT_INT,     // a decimal integer, int or long
    OPT_WHOLE,   // a whole count, int or long long; "5e8" allowed
    OPT_FLOAT,   // a float
    OPT_BOOL,    // an int, 0 or 1
    OPT_ENUM,    // an int-sized enum, one of `choices`, read by `parse`, named by `name`
    OPT_CHOICE,  // a const char* into argv, one of `choices` ("cosine|linear|constant"): flags only
    OPT_PATH,    // a char array: a non-empty path that fits
    OPT_STRING,  // a const char* into argv: flags only (a JSON string dies with its tree)
    OPT_U64,     // a uint64_t, non-negative
    OPT_HELP,    // -h, --help: opt_parse_args returns 1
} OptType;

// which trainer an option is for (--help says so when it is one of them)
enum { OPT_CPU = 1, OPT_GPU = 2, OPT_BOTH = 3 };

typedef struct {
    const char* short_flag;  // "-b", or NULL
    const char* long_flag;   // "--seed", or NULL
    const char* key;         // DeepSpeed JSON key path ("zero_optimization.stage"), or NULL
    const char* alias;       // another spelling of the key, the same setting (both given: must agree), or NULL
    const char* alias_why;   // what the disagreement message says ("they are the same setting" when NULL)
    OptType type;
    size_t offset, size;     // the field: OPT_FIELD(Struct, member)
    double lo, hi;           // the range of a number or an enum's value
    int lo_open, hi_open;    // (lo, ...] or [..., hi)
    const char* unset;       // a value accepted outside the range, meaning unset/off/all ("-1"), or NULL
    const char* def;         // the default as typed; NULL: a NULL string
    const char* choices;     // OPT_ENUM, OPT_CHOICE: "none|cpu|nvme"
    const char* arg;         // the value's name in --help; NULL: from the type
    const char* help;        // one sentence or a few; --help wraps it
    int trainer;             // OPT_BOTH, OPT_CPU, OPT_GPU
    const char* group;       // the --help section this row starts, or NULL
    const char* no_effect;   // a JSON key accepted but without effect here: why (a warning when read)
    int help_alone;          // a flag that, given without a value (last, or before another flag), asks
                             // for help (llm.c's -h 0|1 beside the usual -h)
    int (*parse)(const char* what, const char* s, int* out);  // OPT_ENUM: the value's parser
    const char* (*name)(int v);                                // OPT_ENUM: the value's name
} OptRow;

#define OPT_FIELD(T, m) offsetof(T, m), sizeof(((T*)0)->m)

// one table over one struct, for opt_parse_args: several are searched in order.
// given[i] is set when row i was given on the command line (may be NULL)
typedef struct { const OptRow* rows; int n; void* cfg; unsigned char* given; } OptSet;

// the defaults of every row into cfg (the fields no row names are left as they are)
void opt_defaults(const OptRow* rows, int n, void* cfg);

// the row whose short or long flag is `name` (NULL when none)
const OptRow* opt_find_flag(const OptRow* rows, int n, const char* name);
// the row whose key or alias is `key`; *is_alias says which (may be NULL)
const OptRow* opt_find_key(const OptRow* rows, int n, const char* key, int* is_alias);
// whether `prefix` is a section of some row's key ("zero_optimization.offload_param")
int opt_is_section(const OptRow* rows, int n, const char* prefix);

// Sets a row's field from text (a flag's value, a JSON string). `what` names the source
// for messages: "flag --zero-stage", "--ds-config f.json: key 'x'". 0, or -1 with
// zero_errmsg() starting with `what`, cfg unchanged.
int opt_set_text(const OptRow* r, void* cfg, const char* what, const char* s);
// from a JSON number: whole, int, bool (0 or 1) and float rows; the same ranges
int opt_set_number(const OptRow* r, void* cfg, const char* what, double v);
// from a JSON boolean: bool rows
int opt_set_bool(const OptRow* r, void* cfg, int v);

// the row's value in cfg as text: counts as DeepSpeed writes them (1e5, 5e8), enums by name
const char* opt_format(const OptRow* r, const void* cfg, char* buf, size_t cap);
// whether two structs hold the same value in the row's field
int opt_same(const OptRow* r, const void* a, const void* b);

// every numeric and enum field in its range (or its default, or `unset`); -1 with
// zero_errmsg() "PREFIX: NAME V is out of range [lo, hi]" naming the key or the flag
int opt_check_ranges(const OptRow* rows, int n, const void* cfg, const char* prefix);

// The command line: "-x V", "--name V", "--name=V". Rows are looked up in the sets in
// order. 0, 1 for -h/--help, -1 with zero_errmsg() naming the flag (unknown flags,
// missing or bad values, values out of range). argv[0] is skipped.
int opt_parse_args(OptSet* sets, int nsets, int argc, char** argv);

// --help: every row with a flag, grouped by the rows' `group`, each with its value, its
// default and its DeepSpeed key; when `keys_too`, then the rows with only a key
void opt_print_help(FILE* f, const OptRow* rows, int n, int keys_too);

#ifdef __cplusplus
}
#endif

#endif // ZERO3_OPTIONS_H
