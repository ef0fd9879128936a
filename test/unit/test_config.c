/*
 Unit tests of zero3/config.h and zero3/config_json.h (the ZeRO configuration from
 --ds-config JSON and long flags), zero3/estimate.h (model-state memory per stage and offload)
 and zero3/dev_estimate.h (the device engine's memory per tier, worked out by hand).

 build and run (from the repo root):
   make build/test_config   (links the library, build/lib/opt/lib.a)
   ./build/test_config
*/
#define _DEFAULT_SOURCE           // mkdtemp and open_memstream under -std=c11
#include <criterion/criterion.h>  // Test, cr_assert*, suite fixtures
#include <stdio.h>                // FILE, fopen, fputs, snprintf, open_memstream
#include <stdlib.h>               // mkdtemp, system, free
#include <string.h>               // strstr, strcmp, memcmp
#include <math.h>                 // isnan (a macro)
#include "zero3/config.h"         // ZeroConfig, its flags and checks: code under test
#include "zero3/config_json.h"    // zero_config_load_json, zero_json_find_repeat: code under test
#include "zero3/estimate.h"       // zero_estimate: code under test
#include "zero3/dev_estimate.h"   // zero_dev_estimate: code under test
#include "zero3/nvme.h"           // nvme_sums_bytes: the swap file's checksums, counted on the host
#include "zero3/util.h"     // zero_error, zero_errmsg, zero_now_ms

// ----------------------------------------------------------------------------
// a fresh temp directory per test; Criterion runs each test in its own process

static char tmpdir[64];
static void make_tmpdir(void) {
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/test_config.XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
}

static void remove_tmpdir(void) {
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    cr_assert_eq(system(cmd), 0);
}

// writes `text` to tmpdir/name and returns the path (a static buffer per call slot)
static const char* write_json(const char* name, const char* text) {
    static char paths[4][256];
    static int slot = 0;
    char* p = paths[slot++ % 4];
    snprintf(p, 256, "%s/%s", tmpdir, name);
    FILE* f = fopen(p, "wb");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
    return p;
}

// number of lines in a warnings buffer
static int count_lines(const char* s) {
    int n = 0;
    for (; *s; s++) { n += *s == '\n'; }
    return n;
}

TestSuite(config, .init = make_tmpdir, .fini = remove_tmpdir);

// ----------------------------------------------------------------------------
// defaults and the full file

Test(config, defaults_are_deepspeeds) {
    ZeroConfig c;
    zero_config_defaults(&c);
    cr_assert_eq(c.stage, 0);
    cr_assert_eq(c.reduce_bucket_size, 500000000LL);
    cr_assert_eq(c.allgather_bucket_size, 500000000LL);
    cr_assert_eq(c.overlap_comm, 0);
    cr_assert_eq(c.contiguous_gradients, 1);
    cr_assert_eq(c.reduce_scatter, 1);
    cr_assert_eq(c.prefetch_bucket_size, 50000000LL);
    cr_assert_eq(c.param_persistence_threshold, 100000LL);
    cr_assert_eq(c.max_live_parameters, 1000000000LL);
    cr_assert_eq(c.max_reuse_distance, 1000000000LL);
    cr_assert_eq(c.sub_group_size, 1000000000LL);
    cr_assert_eq(c.prefetch_depth, 2);
    cr_assert_eq(c.offload_optimizer, ZERO_OFFLOAD_NONE);
    cr_assert_eq(c.offload_param, ZERO_OFFLOAD_NONE);
    cr_assert_str_eq(c.nvme_path, "");
    cr_assert_eq(c.buffer_count, 4);
    cr_assert_eq(c.param_buffer_count, 5);
    cr_assert_eq(c.max_in_cpu, 1000000000LL);
    cr_assert_eq(c.train_batch_size, -1);
    cr_assert_eq(c.train_micro_batch_size_per_gpu, -1);
    cr_assert_eq(c.gradient_accumulation_steps, -1);
    cr_assert(isnan(c.lr) && isnan(c.beta1) && isnan(c.beta2) && isnan(c.eps) && isnan(c.weight_decay));
    cr_assert(isnan(c.gradient_clipping));
    cr_assert_eq(c.bf16, -1);
    cr_assert_eq(c.comm_dtype, ZERO_COMM_MODEL);  // DeepSpeed's null: the model's type
    cr_assert_eq(zero_config_validate(&c), 0, "%s", zero_errmsg());
}

static const char* FULL_JSON =
    "{\n"
    "  \"train_batch_size\": 64,\n"
    "  \"train_micro_batch_size_per_gpu\": 4,\n"
    "  \"gradient_accumulation_steps\": 8,\n"
    "  \"gradient_clipping\": 1.0,\n"
    "  \"steps_per_print\": 10,\n"
    "  \"optimizer\": {\n"
    "    \"type\": \"AdamW\",\n"
    "    \"params\": { \"lr\": 6e-4, \"betas\": [0.9, 0.95], \"eps\": 1e-8, \"weight_decay\": 0.1 }\n"
    "  },\n"
    "  \"bf16\": { \"enabled\": true },\n"
    "  \"zero_optimization\": {\n"
    "    \"stage\": 3,\n"
    "    \"overlap_comm\": true,\n"
    "    \"contiguous_gradients\": false,\n"
    "    \"reduce_scatter\": false,\n"
    "    \"reduce_bucket_size\": 2e8,\n"
    "    \"allgather_bucket_size\": 3E+8,\n"
    "    \"stage3_prefetch_bucket_size\": 4.5e7,\n"
    "    \"stage3_param_persistence_threshold\": 2e4,\n"
    "    \"stage3_max_live_parameters\": 3e9,\n"
    "    \"stage3_max_reuse_distance\": 2e9,\n"
    "    \"sub_group_size\": 1e8,\n"
    "    \"offload_optimizer\": { \"device\": \"nvme\", \"nvme_path\": \"/local_nvme\", \"pin_memory\": true,\n"
    "                           \"buffer_count\": 6, \"pipeline_read\": true, \"pipeline_write\": false },\n"
    "    \"offload_param\": { \"device\": \"cpu\", \"nvme_path\": \"/local_nvme\", \"pin_memory\": true,\n"
    "                       \"buffer_count\": 7, \"max_in_cpu\": 2e9 }\n"
    "  }\n"
    "}\n";

Test(config, full_deepspeed_json) {
    ZeroConfig c;
    zero_config_defaults(&c);
    char warn[4096] = "";
    const char* path = write_json("ds.json", FULL_JSON);
    cr_assert_eq(zero_config_load_json(&c, path, warn, sizeof(warn)), 0, "%s", zero_errmsg());
    cr_assert_eq(c.train_batch_size, 64);
    cr_assert_eq(c.train_micro_batch_size_per_gpu, 4);
    cr_assert_eq(c.gradient_accumulation_steps, 8);
    cr_assert_float_eq(c.gradient_clipping, 1.0f, 0.0f);
    cr_assert_float_eq(c.lr, 6e-4f, 0.0f);
    cr_assert_float_eq(c.beta1, 0.9f, 0.0f);
    cr_assert_float_eq(c.beta2, 0.95f, 0.0f);
    cr_assert_float_eq(c.eps, 1e-8f, 0.0f);
    cr_assert_float_eq(c.weight_decay, 0.1f, 0.0f);
    cr_assert_eq(c.bf16, 1);
    cr_assert_eq(c.stage, 3);
    cr_assert_eq(c.overlap_comm, 1);
    cr_assert_eq(c.contiguous_gradients, 0);
    cr_assert_eq(c.reduce_scatter, 0);
    cr_assert_eq(c.reduce_bucket_size, 200000000LL);
    cr_assert_eq(c.allgather_bucket_size, 300000000LL);
    cr_assert_eq(c.prefetch_bucket_size, 45000000LL);
    cr_assert_eq(c.param_persistence_threshold, 20000LL);
    cr_assert_eq(c.max_live_parameters, 3000000000LL);
    cr_assert_eq(c.max_reuse_distance, 2000000000LL);
    cr_assert_eq(c.sub_group_size, 100000000LL);
    cr_assert_eq(c.offload_optimizer, ZERO_OFFLOAD_NVME);
    cr_assert_eq(c.offload_param, ZERO_OFFLOAD_CPU);
    cr_assert_str_eq(c.nvme_path, "/local_nvme");
    cr_assert_eq(c.pin_memory, 1);
    cr_assert_eq(c.buffer_count, 6);
    cr_assert_eq(c.param_buffer_count, 7);
    cr_assert_eq(c.pipeline_read, 1);
    cr_assert_eq(c.pipeline_write, 0);
    cr_assert_eq(c.max_in_cpu, 2000000000LL);
    cr_assert_eq(c.prefetch_depth, 2);  // not a DeepSpeed key: untouched
    cr_assert_eq(zero_config_validate(&c), 0, "%s", zero_errmsg());
    // the one key we do not read
    char expect[512];
    snprintf(expect, sizeof(expect), "warning: --ds-config %s: unknown key 'steps_per_print' ignored\n", path);
    cr_assert(strstr(warn, expect) != NULL, "%s", warn);
    // and the keys read and validated that change nothing here, each named once
    const char* no_effect[] = {
        "zero_optimization.overlap_comm", "zero_optimization.contiguous_gradients", "zero_optimization.reduce_scatter",
        "zero_optimization.allgather_bucket_size", "zero_optimization.offload_optimizer.pin_memory",
        "zero_optimization.offload_param.pin_memory",
    };
    for (size_t i = 0; i < sizeof(no_effect) / sizeof(no_effect[0]); i++) {
        snprintf(expect, sizeof(expect), "key '%s' is accepted but has no effect: ", no_effect[i]);
        cr_assert(strstr(warn, expect) != NULL, "missing: %s\nin: %s", expect, warn);
    }
    cr_assert_eq(count_lines(warn), 1 + (int)(sizeof(no_effect) / sizeof(no_effect[0])), "%s", warn);
    cr_assert(strstr(warn, "offload_param.buffer_count") == NULL, "it sets the reads ahead: %s", warn);
}

// Knobs of a mode that is off are reported, once each, and only when given: the
// defaults never warn
Test(config, settings_without_effect_warn) {
    ZeroConfig c;
    zero_config_defaults(&c);
    char warn[2048] = "";
    zero_config_warnings(&c, warn, sizeof(warn));
    cr_assert_str_eq(warn, "");
    c.stage = 2;
    c.prefetch_bucket_size = 7;
    c.max_reuse_distance = 0;
    c.sub_group_size = 1000;
    c.max_in_cpu = 5;
    c.param_buffer_count = 2;
    c.offload_optimizer = ZERO_OFFLOAD_CPU;
    zero_config_warnings(&c, warn, sizeof(warn));
    cr_assert(strstr(warn, "prefetch_bucket_size has no effect without ZeRO stage 3") != NULL, "%s", warn);
    cr_assert(strstr(warn, "max_reuse_distance has no effect without ZeRO stage 3") != NULL, "%s", warn);
    cr_assert(strstr(warn, "sub_group_size has no effect without offload_optimizer nvme") != NULL, "%s", warn);
    cr_assert(strstr(warn, "max_in_cpu has no effect without offload_param nvme") != NULL, "%s", warn);
    cr_assert(strstr(warn, "offload_param.buffer_count has no effect without offload_param nvme") != NULL, "%s", warn);
    cr_assert_eq(count_lines(warn), 5, "%s", warn);
    // the same settings where they apply: no warning
    warn[0] = '\0';
    c.stage = 3;
    c.offload_optimizer = ZERO_OFFLOAD_NVME;
    c.offload_param = ZERO_OFFLOAD_NVME;
    zero_config_warnings(&c, warn, sizeof(warn));
    cr_assert_str_eq(warn, "");
}

Test(config, sizes_without_stage3_prefix) {
    ZeroConfig c;
    zero_config_defaults(&c);
    const char* path = write_json("bare.json",
        "{\"zero_optimization\": {\"stage\": 3, \"prefetch_bucket_size\": 1e6, \"param_persistence_threshold\": 5,"
        " \"max_live_parameters\": 7, \"max_reuse_distance\": 0}}");
    char warn[256] = "";
    cr_assert_eq(zero_config_load_json(&c, path, warn, sizeof(warn)), 0, "%s", zero_errmsg());
    cr_assert_eq(c.prefetch_bucket_size, 1000000LL);
    cr_assert_eq(c.param_persistence_threshold, 5);
    cr_assert_eq(c.max_live_parameters, 7);
    cr_assert_eq(c.max_reuse_distance, 0);
    cr_assert_str_eq(warn, "");
}

Test(config, both_spellings_must_agree) {
    ZeroConfig c;
    zero_config_defaults(&c);
    const char* same = write_json("same.json",
        "{\"zero_optimization\": {\"stage3_prefetch_bucket_size\": 1e6, \"prefetch_bucket_size\": 1000000}}");
    cr_assert_eq(zero_config_load_json(&c, same, NULL, 0), 0, "%s", zero_errmsg());
    cr_assert_eq(c.prefetch_bucket_size, 1000000LL);
    const char* differ = write_json("differ.json",
        "{\"zero_optimization\": {\"stage3_prefetch_bucket_size\": 1e6, \"prefetch_bucket_size\": 2e6}}");
    cr_assert_eq(zero_config_load_json(&c, differ, NULL, 0), -1);
    cr_assert(strstr(zero_errmsg(), "zero_optimization.stage3_prefetch_bucket_size") != NULL, "%s", zero_errmsg());
    cr_assert(strstr(zero_errmsg(), "zero_optimization.prefetch_bucket_size") != NULL, "%s", zero_errmsg());
}

Test(config, flags_override_the_file) {
    ZeroConfig c;
    zero_config_defaults(&c);
    const char* path = write_json("ds.json", FULL_JSON);
    cr_assert_eq(zero_config_load_json(&c, path, NULL, 0), 0, "%s", zero_errmsg());
    struct { const char* flag; const char* value; } flags[] = {
        { "--zero-stage", "2" }, { "--prefetch", "4" }, { "--offload-optimizer", "cpu" }, { "--offload-param", "none" },
        { "--nvme-path", "/other" }, { "--reduce-bucket-size", "5e8" },
        { "--prefetch-bucket-size", "0" }, { "--param-persistence-threshold", "1.5e3" }, { "--max-live-parameters", "1e10" },
        { "--max-reuse-distance", "7" }, { "--sub-group-size", "2E9" }, { "--max-in-cpu", "3e4" },
    };
    for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
        cr_assert_eq(zero_config_set_flag(&c, flags[i].flag, flags[i].value), 0, "%s %s: %s", flags[i].flag, flags[i].value, zero_errmsg());
    }
    cr_assert_eq(c.stage, 2);
    cr_assert_eq(c.prefetch_depth, 4);
    cr_assert_eq(c.offload_optimizer, ZERO_OFFLOAD_CPU);
    cr_assert_eq(c.offload_param, ZERO_OFFLOAD_NONE);
    cr_assert_str_eq(c.nvme_path, "/other");
    cr_assert_eq(c.reduce_bucket_size, 500000000LL);
    cr_assert_eq(c.prefetch_bucket_size, 0);
    cr_assert_eq(c.param_persistence_threshold, 1500);
    cr_assert_eq(c.max_live_parameters, 10000000000LL);
    cr_assert_eq(c.max_in_cpu, 30000);  // the file says 2e9
    cr_assert_eq(c.max_reuse_distance, 7);
    cr_assert_eq(c.sub_group_size, 2000000000LL);
    // the keys without effect have no flags
    cr_assert_eq(zero_config_set_flag(&c, "--overlap-comm", "1"), 1);
    cr_assert_eq(zero_config_set_flag(&c, "--allgather-bucket-size", "5e8"), 1);
    // what no flag touched keeps the file's value
    cr_assert_eq(c.train_batch_size, 64);
    // pipelining belongs to NVMe offload, which the flag switched off: still loads (DeepSpeed ignores it then)
    cr_assert_eq(zero_config_validate(&c), 0, "%s", zero_errmsg());
}

// ----------------------------------------------------------------------------
// unknown keys and the Adam warning

Test(config, unknown_keys_warn_by_full_path) {
    ZeroConfig c, before;
    zero_config_defaults(&c);
    const char* path = write_json("unknown.json",
        "{\"fp16\": {\"enabled\": false}, \"bf16\": {\"enabled\": false, \"foo\": 1},\n"
        " \"optimizer\": {\"type\": \"adamw\", \"params\": {\"lr\": 1e-3, \"torch_adam\": true}},\n"
        " \"zero_optimization\": {\"stage\": 2, \"stage4_foo\": 1,\n"
        "   \"offload_param\": {\"buffer_size\": 1e8}, \"offload_optimizer\": {\"fast_init\": false}}}");
    char warn[2048] = "";
    before = c;
    cr_assert_eq(zero_config_load_json(&c, path, warn, sizeof(warn)), 0, "%s", zero_errmsg());
    cr_assert_eq(c.stage, 2);
    cr_assert_eq(c.bf16, 0);
    cr_assert_float_eq(c.lr, 1e-3f, 0.0f);
    const char* keys[] = { "fp16", "bf16.foo", "optimizer.params.torch_adam", "zero_optimization.stage4_foo",
                           "zero_optimization.offload_param.buffer_size", "zero_optimization.offload_optimizer.fast_init" };
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        char line[512];
        snprintf(line, sizeof(line), "warning: --ds-config %s: unknown key '%s' ignored\n", path, keys[i]);
        cr_assert(strstr(warn, line) != NULL, "missing: %s\nin: %s", line, warn);
    }
    cr_assert_eq(count_lines(warn), 6, "%s", warn);
    (void)before;
}

Test(config, warnings_append_and_never_overflow) {
    ZeroConfig c;
    zero_config_defaults(&c);
    const char* path = write_json("u.json", "{\"a\": 1, \"b\": 2, \"c\": 3}");
    char warn[64] = "earlier\n";
    cr_assert_eq(zero_config_load_json(&c, path, warn, sizeof(warn)), 0, "%s", zero_errmsg());
    cr_assert(strncmp(warn, "earlier\n", 8) == 0, "%s", warn);  // appended, not replaced
    cr_assert(strlen(warn) < sizeof(warn));
    // each line in the buffer is whole: lines that do not fit are dropped
    cr_assert_eq(warn[strlen(warn) - 1], '\n');
}

Test(config, adam_with_weight_decay_warns) {
    ZeroConfig c;
    zero_config_defaults(&c);
    char warn[1024] = "";
    const char* adam = write_json("adam.json", "{\"optimizer\": {\"type\": \"Adam\", \"params\": {\"lr\": 1e-4, \"weight_decay\": 0.01}}}");
    cr_assert_eq(zero_config_load_json(&c, adam, warn, sizeof(warn)), 0, "%s", zero_errmsg());
    cr_assert(strstr(warn, "optimizer.type 'Adam'") != NULL, "%s", warn);
    cr_assert(strstr(warn, "decoupled") != NULL, "%s", warn);
    warn[0] = '\0';
    const char* adamw = write_json("adamw.json", "{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 1e-4, \"weight_decay\": 0.01}}}");
    cr_assert_eq(zero_config_load_json(&c, adamw, warn, sizeof(warn)), 0, "%s", zero_errmsg());
    cr_assert_str_eq(warn, "");
    const char* nodecay = write_json("nodecay.json", "{\"optimizer\": {\"type\": \"Adam\", \"params\": {\"lr\": 1e-4}}}");
    zero_config_defaults(&c);  // the decay of the earlier files would still count
    cr_assert_eq(zero_config_load_json(&c, nodecay, warn, sizeof(warn)), 0, "%s", zero_errmsg());
    cr_assert_str_eq(warn, "");
}

// ----------------------------------------------------------------------------
// invalid values: -1, a message naming the key, and the configuration untouched

Test(config, invalid_values_name_the_key) {
    static const struct { const char* json; const char* key; const char* also; } cases[] = {
        { "{\"zero_optimization\": {\"stage\": 4}}", "'zero_optimization.stage'", "out of range" },
        { "{\"zero_optimization\": {\"stage\": -1}}", "'zero_optimization.stage'", "out of range" },
        { "{\"zero_optimization\": {\"stage\": 2.5}}", "'zero_optimization.stage'", "not a whole number" },
        { "{\"zero_optimization\": {\"stage\": \"3\"}}", "'zero_optimization.stage'", "string" },
        { "{\"zero_optimization\": {\"reduce_bucket_size\": -1}}", "'zero_optimization.reduce_bucket_size'", "-1" },
        { "{\"zero_optimization\": {\"reduce_bucket_size\": 0}}", "'zero_optimization.reduce_bucket_size'", "out of range" },
        { "{\"zero_optimization\": {\"allgather_bucket_size\": 1e300}}", "'zero_optimization.allgather_bucket_size'", "out of range" },
        { "{\"zero_optimization\": {\"stage3_max_live_parameters\": -5}}", "'zero_optimization.stage3_max_live_parameters'", "-5" },
        { "{\"zero_optimization\": {\"stage3_prefetch_bucket_size\": \"auto\"}}", "'zero_optimization.stage3_prefetch_bucket_size'", "auto" },
        { "{\"zero_optimization\": {\"sub_group_size\": null}}", "'zero_optimization.sub_group_size'", "null" },
        { "{\"zero_optimization\": {\"overlap_comm\": \"yes\"}}", "'zero_optimization.overlap_comm'", "yes" },
        { "{\"zero_optimization\": {\"offload_optimizer\": {\"device\": \"gpu\"}}}", "'zero_optimization.offload_optimizer.device'", "'gpu'" },
        { "{\"zero_optimization\": {\"offload_param\": {\"device\": 3}}}", "'zero_optimization.offload_param.device'", "number" },
        { "{\"zero_optimization\": {\"offload_param\": {\"buffer_count\": 0}}}", "'zero_optimization.offload_param.buffer_count'", "out of range" },
        { "{\"zero_optimization\": {\"offload_param\": {\"max_in_cpu\": -1}}}", "'zero_optimization.offload_param.max_in_cpu'", "out of range" },
        { "{\"zero_optimization\": {\"offload_optimizer\": {\"nvme_path\": \"/a\"}, \"offload_param\": {\"nvme_path\": \"/b\"}}}",
          "'zero_optimization.offload_param.nvme_path'", "/a" },
        { "{\"zero_optimization\": {\"offload_optimizer\": {\"pin_memory\": true}, \"offload_param\": {\"pin_memory\": false}}}",
          "'zero_optimization.offload_param.pin_memory'", "one pin_memory" },
        { "{\"zero_optimization\": {\"offload_param\": []}}", "'zero_optimization.offload_param'", "array" },
        { "{\"zero_optimization\": true}", "'zero_optimization'", "boolean" },
        { "{\"zero_optimization\": {\"stage\": 1, \"stage\": 2}}", "'zero_optimization.stage'", "more than once" },
        { "{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"betas\": [0.9]}}}", "'optimizer.params.betas'", "2 numbers" },
        { "{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"betas\": [0.9, 1.0]}}}", "'optimizer.params.betas[1]'", "[0, 1)" },
        { "{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"betas\": [-0.1, 0.99]}}}", "'optimizer.params.betas[0]'", "[0, 1)" },
        { "{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"betas\": [0.9, \"x\"]}}}", "'optimizer.params.betas[1]'", "string" },
        { "{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"betas\": 0.9}}}", "'optimizer.params.betas'", "a number" },
        { "{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0}}}", "'optimizer.params.lr'", "out of range" },
        { "{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": -1e-3}}}", "'optimizer.params.lr'", "out of range" },
        { "{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": \"auto\"}}}", "'optimizer.params.lr'", "Hugging Face" },
        { "{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"eps\": 0}}}", "'optimizer.params.eps'", "out of range" },
        { "{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"weight_decay\": -0.1}}}", "'optimizer.params.weight_decay'", "out of range" },
        { "{\"optimizer\": {\"type\": \"Adam\", \"params\": {\"weight_decay\": 0.1, \"adam_w_mode\": false}}}", "'optimizer.params.adam_w_mode'", "L2" },
        { "{\"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 0.1}}}", "'optimizer.type'", "'SGD'" },
        { "{\"optimizer\": {\"params\": {\"lr\": 0.1}}}", "'optimizer.type'", "missing" },
        { "{\"optimizer\": {\"type\": 1}}", "'optimizer.type'", "number" },
        { "{\"train_batch_size\": 0}", "'train_batch_size'", "out of range" },
        { "{\"train_batch_size\": \"auto\"}", "'train_batch_size'", "auto" },
        { "{\"train_micro_batch_size_per_gpu\": 3e10}", "'train_micro_batch_size_per_gpu'", "out of range" },
        { "{\"gradient_accumulation_steps\": 1.5}", "'gradient_accumulation_steps'", "not a whole number" },
        { "{\"gradient_clipping\": -1}", "'gradient_clipping'", "out of range" },
        { "{\"bf16\": true}", "'bf16'", "an object" },
        { "{\"bf16\": {\"enabled\": \"true\"}}", "'bf16.enabled'", "true or false" },
        { "[1, 2]", "(top level)", "an array" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ZeroConfig c, before;
        zero_config_defaults(&c);
        c.stage = 1;  // something a failed load must not undo
        before = c;
        char name[32];
        snprintf(name, sizeof(name), "bad%zu.json", i);
        const char* path = write_json(name, cases[i].json);
        char warn[512] = "";
        cr_assert_eq(zero_config_load_json(&c, path, warn, sizeof(warn)), -1, "case %zu loaded: %s", i, cases[i].json);
        const char* msg = zero_errmsg();
        cr_assert(strstr(msg, cases[i].key) != NULL, "case %zu: '%s' does not name %s", i, msg, cases[i].key);
        cr_assert(strstr(msg, cases[i].also) != NULL, "case %zu: '%s' does not say %s", i, msg, cases[i].also);
        cr_assert(strstr(msg, path) != NULL, "case %zu: '%s' does not name the file", i, msg);
        cr_assert(memcmp(&c, &before, sizeof(c)) == 0, "case %zu changed the configuration", i);
    }
}

Test(config, malformed_json_reports_the_line) {
    ZeroConfig c;
    zero_config_defaults(&c);
    const char* p1 = write_json("m1.json", "{\n  \"train_batch_size\": 8,\n  \"bf16\": ,\n  \"x\": 1\n}\n");
    cr_assert_eq(zero_config_load_json(&c, p1, NULL, 0), -1);
    cr_assert(strstr(zero_errmsg(), "line 3") != NULL, "%s", zero_errmsg());
    cr_assert(strstr(zero_errmsg(), p1) != NULL, "%s", zero_errmsg());
    // a trailing comma is not JSON
    const char* p2 = write_json("m2.json", "{\n  \"a\": 1,\n  \"b\": 2,\n}\n");
    cr_assert_eq(zero_config_load_json(&c, p2, NULL, 0), -1);
    cr_assert(strstr(zero_errmsg(), "line 4") != NULL, "%s", zero_errmsg());
    // trailing garbage after the object
    const char* p3 = write_json("m3.json", "{\"a\": 1}\n\n}\n");
    cr_assert_eq(zero_config_load_json(&c, p3, NULL, 0), -1);
    cr_assert(strstr(zero_errmsg(), "line 3") != NULL, "%s", zero_errmsg());
    const char* p4 = write_json("m4.json", "");
    cr_assert_eq(zero_config_load_json(&c, p4, NULL, 0), -1);
    cr_assert(strstr(zero_errmsg(), "line 1") != NULL, "%s", zero_errmsg());
}

Test(config, missing_file) {
    ZeroConfig c;
    zero_config_defaults(&c);
    char path[256];
    snprintf(path, sizeof(path), "%s/no_such.json", tmpdir);
    cr_assert_eq(zero_config_load_json(&c, path, NULL, 0), -1);
    cr_assert(strstr(zero_errmsg(), path) != NULL, "%s", zero_errmsg());
    cr_assert(strstr(zero_errmsg(), "cannot open") != NULL, "%s", zero_errmsg());
    cr_assert_eq(zero_config_load_json(&c, "", NULL, 0), -1);
    cr_assert_eq(zero_config_load_json(&c, NULL, NULL, 0), -1);
}

// a directory is named as one (fopen takes it; the read then failed with "read error")
Test(config, directory_is_named) {
    ZeroConfig c;
    zero_config_defaults(&c);
    cr_assert_eq(zero_config_load_json(&c, tmpdir, NULL, 0), -1);
    cr_assert(strstr(zero_errmsg(), tmpdir) != NULL, "%s", zero_errmsg());
    cr_assert(strstr(zero_errmsg(), "is a directory") != NULL, "%s", zero_errmsg());
}

// writes a JSON object of exactly `bytes` bytes: unique keys "k000000": 0 while they fit
// (repeat: the last one again), padded with blanks; returns the number of keys
static size_t write_sized_json(const char* path, size_t bytes, int repeat) {
    FILE* f = fopen(path, "wb");
    cr_assert_not_null(f);
    size_t n = 0, len = 1;
    fputc('{', f);
    for (; len + 15 + 1 <= bytes; n++) {  // ', "k000000": 0' and the closing brace
        len += (size_t)fprintf(f, "%s\"k%06zu\": 0", n ? ", " : "", repeat && len + 30 > bytes ? n - 1 : n);
    }
    for (; len + 1 < bytes; len++) { fputc(' ', f); }
    fputc('}', f);
    fclose(f);
    return n;
}

// The size limit, documented in docs/USAGE.md: a file of ZERO_CONFIG_MAX_BYTES (1 MiB,
// about 75,000 keys) loads, one byte more is refused naming the limit, whatever it holds;
// a repeated key among the 75,000 is found and named
Test(config, size_limit) {
    ZeroConfig c;
    zero_config_defaults(&c);
    char path[256];
    snprintf(path, sizeof(path), "%s/big.json", tmpdir);
    size_t n = write_sized_json(path, ZERO_CONFIG_MAX_BYTES, 0);
    cr_assert_gt(n, 70000);
    cr_assert_eq(zero_config_load_json(&c, path, NULL, 0), 0, "%s", zero_errmsg());
    write_sized_json(path, ZERO_CONFIG_MAX_BYTES + 1, 0);
    cr_assert_eq(zero_config_load_json(&c, path, NULL, 0), -1);
    cr_assert(strstr(zero_errmsg(), "1048577 bytes, over the limit of 1048576 bytes (1 MiB)") != NULL, "%s", zero_errmsg());
    cr_assert(strstr(zero_errmsg(), path) != NULL, "%s", zero_errmsg());
    write_sized_json(path, ZERO_CONFIG_MAX_BYTES, 1);
    cr_assert_eq(zero_config_load_json(&c, path, NULL, 0), -1);
    char want[64];
    snprintf(want, sizeof(want), "key 'k%06zu' appears more than once", n - 2);
    cr_assert(strstr(zero_errmsg(), want) != NULL, "%s (want %s)", zero_errmsg(), want);
}

// The repeated-key check's work, counted in comparisons of two names: n log n for an object
// of n keys (the sort), where the check that compared every pair made n (n - 1) / 2 (a
// config of 700,000 keys took 20 minutes). Its answer: the first key, in the file's order,
// that appears again, as the pairwise check named it.
Test(config, repeated_keys_found_in_n_log_n) {
    static const size_t sizes[] = { 2, 100, 5000, 40000 };
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        size_t n = sizes[s], log2n = 0;
        while (((size_t)1 << log2n) < n) { log2n++; }
        cJSON* obj = cJSON_CreateObject();
        char name[32];
        for (size_t i = 0; i < n; i++) {  // in descending order, as a worst case for a naive sort
            snprintf(name, sizeof(name), "key%08zu", n - i);
            cJSON_AddItemToObject(obj, name, cJSON_CreateNumber(0));
        }
        const cJSON* rep = NULL;
        size_t compares = 0;
        cr_assert_eq(zero_json_find_repeat(obj, &rep, &compares), 0);
        cr_assert_null(rep, "n %zu: %s", n, rep != NULL ? rep->string : "");
        cr_assert_leq(compares, 2 * n * log2n + n, "n %zu: %zu comparisons of names, more than 2 n log2 n + n = %zu",
                      n, compares, 2 * n * log2n + n);
        // two repeated names: the one whose first copy comes first is named
        cJSON_AddItemToObject(obj, "key00000001", cJSON_CreateNumber(1));  // the last key again
        snprintf(name, sizeof(name), "key%08zu", n);  // the first key in the file
        cJSON_AddItemToObject(obj, name, cJSON_CreateNumber(2));
        cr_assert_eq(zero_json_find_repeat(obj, &rep, &compares), 0);
        cr_assert_not_null(rep);
        cr_assert_str_eq(rep->string, name);
        cr_assert_eq(rep, obj->child, "n %zu: not the first copy", n);
        cJSON_Delete(obj);
    }
}

// a value in range as a number that a float cannot hold says so, not "out of range"
Test(config, float_underflow_says_so) {
    ZeroConfig c;
    zero_config_defaults(&c);
    const char* path = write_json("tiny_lr.json", "{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 1e-50}}}");
    cr_assert_eq(zero_config_load_json(&c, path, NULL, 0), -1);
    cr_assert(strstr(zero_errmsg(), "'optimizer.params.lr': 1e-50 rounds to 0 as a float") != NULL, "%s", zero_errmsg());
    path = write_json("small_lr.json", "{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 1e-45}}}");
    cr_assert_eq(zero_config_load_json(&c, path, NULL, 0), 0, "%s", zero_errmsg());
    cr_assert_gt(c.lr, 0.0f);
}

// ----------------------------------------------------------------------------
// flags

Test(config, set_flag_leaves_other_flags_to_the_caller) {
    ZeroConfig c, before;
    zero_config_defaults(&c);
    before = c;
    const char* others[] = { "--seed", "-z", "--ds-config", "--zero_stage", "zero-stage", "--grad-clip", "" };
    for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
        cr_assert_eq(zero_config_set_flag(&c, others[i], "1"), 1, "%s", others[i]);
    }
    cr_assert_eq(zero_config_set_flag(&c, NULL, "1"), 1);
    cr_assert(memcmp(&c, &before, sizeof(c)) == 0);
}

Test(config, set_flag_rejects_bad_values) {
    static const struct { const char* flag; const char* value; const char* also; } cases[] = {
        { "--zero-stage", "4", "out of range" }, { "--zero-stage", "-1", "out of range" },
        { "--zero-stage", "x", "not a number" }, { "--zero-stage", "", "needs a value" },
        { "--zero-stage", NULL, "needs a value" }, { "--zero-stage", " 3", "not a number" },
        { "--zero-stage", "3x", "not a number" }, { "--zero-stage", "0x3", "not a number" },
        { "--zero-stage", "2.5", "not a whole number" },
        { "--prefetch", "65", "out of range" }, { "--prefetch", "-1", "out of range" },
        { "--reduce-bucket-size", "0", "out of range" }, { "--reduce-bucket-size", "5e-1", "not a whole number" },
        { "--reduce-bucket-size", "inf", "not a number" }, { "--reduce-bucket-size", "nan", "not a number" },
        { "--sub-group-size", "1e20", "out of range" }, { "--sub-group-size", "0", "out of range" },
        { "--max-live-parameters", "-5", "out of range" }, { "--max-reuse-distance", "99999999999999999999", "out of range" },
        { "--param-persistence-threshold", "1e-400", "not a whole number" }, { "--prefetch-bucket-size", "1e", "not a number" },
        { "--offload-optimizer", "gpu", "'gpu'" }, { "--offload-param", "CPU", "'CPU'" }, { "--offload-param", NULL, "needs a value" },
        { "--nvme-path", "", "empty" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ZeroConfig c, before;
        zero_config_defaults(&c);
        before = c;
        cr_assert_eq(zero_config_set_flag(&c, cases[i].flag, cases[i].value), -1, "%s '%s' accepted", cases[i].flag,
                     cases[i].value ? cases[i].value : "(null)");
        cr_assert(strstr(zero_errmsg(), cases[i].flag) != NULL, "'%s' does not name %s", zero_errmsg(), cases[i].flag);
        cr_assert(strstr(zero_errmsg(), cases[i].also) != NULL, "%s '%s': '%s' does not say %s", cases[i].flag,
                  cases[i].value ? cases[i].value : "(null)", zero_errmsg(), cases[i].also);
        cr_assert(memcmp(&c, &before, sizeof(c)) == 0, "%s changed the configuration on error", cases[i].flag);
    }
    char longpath[1100];
    memset(longpath, 'a', sizeof(longpath) - 1);
    longpath[sizeof(longpath) - 1] = '\0';
    ZeroConfig c;
    zero_config_defaults(&c);
    cr_assert_eq(zero_config_set_flag(&c, "--nvme-path", longpath), -1);
}

Test(config, set_flag_number_forms) {
    ZeroConfig c;
    zero_config_defaults(&c);
    cr_assert_eq(zero_config_set_flag(&c, "--reduce-bucket-size", "5e8"), 0);
    cr_assert_eq(c.reduce_bucket_size, 500000000LL);
    cr_assert_eq(zero_config_set_flag(&c, "--reduce-bucket-size", "2.5E+3"), 0);
    cr_assert_eq(c.reduce_bucket_size, 2500);
    cr_assert_eq(zero_config_set_flag(&c, "--reduce-bucket-size", "+12"), 0);
    cr_assert_eq(c.reduce_bucket_size, 12);
    // exact beyond what a double holds would be 2^53 + 1; the limit is 2^53 itself
    cr_assert_eq(zero_config_set_flag(&c, "--max-live-parameters", "9007199254740992"), 0);
    cr_assert_eq(c.max_live_parameters, 9007199254740992LL);
    cr_assert_eq(zero_config_set_flag(&c, "--max-live-parameters", "9007199254740993"), -1);
    cr_assert_eq(zero_config_set_flag(&c, "--zero-stage", "3e0"), 0);
    cr_assert_eq(c.stage, 3);
    cr_assert_eq(zero_config_set_flag(&c, "--offload-param", "nvme"), 0);
    cr_assert_eq(c.offload_param, ZERO_OFFLOAD_NVME);
    cr_assert_eq(zero_config_set_flag(&c, "--prefetch", "0"), 0);
    cr_assert_eq(c.prefetch_depth, 0);
}

// ----------------------------------------------------------------------------
// cross-field validation

Test(config, validate_cross_field) {
    ZeroConfig c;
    zero_config_defaults(&c);
    c.offload_param = ZERO_OFFLOAD_CPU;
    c.stage = 2;
    cr_assert_eq(zero_config_validate(&c), -1);
    cr_assert(strstr(zero_errmsg(), "offload_param") && strstr(zero_errmsg(), "stage 3"), "%s", zero_errmsg());
    c.stage = 3;
    cr_assert_eq(zero_config_validate(&c), 0, "%s", zero_errmsg());

    zero_config_defaults(&c);
    c.offload_optimizer = ZERO_OFFLOAD_CPU;  // stage 0
    cr_assert_eq(zero_config_validate(&c), -1);
    cr_assert(strstr(zero_errmsg(), "offload_optimizer") != NULL, "%s", zero_errmsg());
    c.stage = 1;
    cr_assert_eq(zero_config_validate(&c), 0, "%s", zero_errmsg());

    c.offload_optimizer = ZERO_OFFLOAD_NVME;
    c.stage = 2;
    strcpy(c.nvme_path, "/nvme");
    cr_assert_eq(zero_config_validate(&c), -1);
    cr_assert(strstr(zero_errmsg(), "nvme") != NULL, "%s", zero_errmsg());
    c.stage = 3;
    cr_assert_eq(zero_config_validate(&c), 0, "%s", zero_errmsg());
    c.nvme_path[0] = '\0';
    cr_assert_eq(zero_config_validate(&c), -1);
    cr_assert(strstr(zero_errmsg(), "nvme-path") != NULL, "%s", zero_errmsg());

    zero_config_defaults(&c);
    c.stage = 3;
    c.offload_param = ZERO_OFFLOAD_NVME;
    cr_assert_eq(zero_config_validate(&c), -1);  // no path
    strcpy(c.nvme_path, "/nvme");
    cr_assert_eq(zero_config_validate(&c), 0, "%s", zero_errmsg());

    zero_config_defaults(&c);
    c.prefetch_depth = 65;
    cr_assert_eq(zero_config_validate(&c), -1);
    cr_assert(strstr(zero_errmsg(), "prefetch") != NULL, "%s", zero_errmsg());
    c.prefetch_depth = -1;
    cr_assert_eq(zero_config_validate(&c), -1);
    c.prefetch_depth = 64;
    cr_assert_eq(zero_config_validate(&c), 0, "%s", zero_errmsg());

    zero_config_defaults(&c);
    c.stage = 4;
    cr_assert_eq(zero_config_validate(&c), -1);
    zero_config_defaults(&c);
    c.reduce_bucket_size = 0;
    cr_assert_eq(zero_config_validate(&c), -1);
    zero_config_defaults(&c);
    c.lr = 0.0f;
    cr_assert_eq(zero_config_validate(&c), -1);
    zero_config_defaults(&c);
    c.beta2 = 1.0f;
    cr_assert_eq(zero_config_validate(&c), -1);
    zero_config_defaults(&c);
    c.train_micro_batch_size_per_gpu = 0;
    cr_assert_eq(zero_config_validate(&c), -1);
}

// ----------------------------------------------------------------------------
// the batch rule: train = micro * accum * world

static void batch_ok(long long t, int m, int a, int w, int want_m, int want_a) {
    int mo = -7, ao = -7;
    cr_assert_eq(zero_config_resolve_batch(t, m, a, w, &mo, &ao), 0, "(%lld, %d, %d, %d): %s", t, m, a, w, zero_errmsg());
    cr_assert_eq(mo, want_m, "(%lld, %d, %d, %d): micro %d, want %d", t, m, a, w, mo, want_m);
    cr_assert_eq(ao, want_a, "(%lld, %d, %d, %d): accum %d, want %d", t, m, a, w, ao, want_a);
}

static void batch_bad(long long t, int m, int a, int w, const char* msg) {
    int mo = -7, ao = -7;
    cr_assert_eq(zero_config_resolve_batch(t, m, a, w, &mo, &ao), -1, "(%lld, %d, %d, %d) accepted", t, m, a, w);
    cr_assert(strstr(zero_errmsg(), msg) != NULL, "'%s' does not say '%s'", zero_errmsg(), msg);
    cr_assert(mo == -7 && ao == -7, "outputs written on error");
}

Test(config, resolve_batch_all_combinations) {
    batch_ok(64, 4, 8, 2, 4, 8);     // all three, consistent: 4 * 8 * 2 = 64
    batch_ok(64, 4, -1, 2, 4, 8);    // train + micro
    batch_ok(64, 0, 8, 2, 4, 8);     // train + accum
    batch_ok(-1, 4, 8, 2, 4, 8);     // micro + accum
    batch_ok(64, -1, -1, 2, 32, 1);  // train alone: accum 1
    batch_ok(-1, 4, -1, 2, 4, 1);    // micro alone: accum 1
    batch_ok(12, 3, 4, 1, 3, 4);     // world 1
    batch_ok(24, 1, -1, 24, 1, 1);
    batch_bad(64, 4, 4, 2, "train_batch_size 64 != micro 4 x accum 4 x world 2");
    batch_bad(30, 4, -1, 2, "train_batch_size 30 is not divisible by micro 4 x world 2");
    batch_bad(30, -1, 4, 2, "train_batch_size 30 is not divisible by accum 4 x world 2");
    batch_bad(30, -1, -1, 4, "train_batch_size 30 is not divisible by world 4");
    batch_bad(64, 4, 8, 3, "train_batch_size 64 != micro 4 x accum 8 x world 3");
    batch_bad(64, 4, -1, 3, "not divisible by micro 4 x world 3");
    batch_bad(-1, -1, 8, 2, "gradient_accumulation_steps 8 alone");
    batch_bad(-1, -1, -1, 2, "none of");
    batch_bad(64, 4, 8, 0, "world size 0");
    // a 2^40 train batch over 1 rank with micro 1 would need accum 2^40: does not fit an int
    batch_bad(1LL << 40, 1, -1, 1, "too large");
}

// ----------------------------------------------------------------------------
// the agreement hash

Test(config, hash_tracks_the_relevant_fields) {
    ZeroConfig a, b;
    zero_config_defaults(&a);
    zero_config_defaults(&b);
    cr_assert_eq(zero_config_hash(&a), zero_config_hash(&b));
    uint64_t base = zero_config_hash(&a);
    for (int field = 0; field < 26; field++) {
        zero_config_defaults(&b);
        switch (field) {
            case 0: b.stage = 3; break;
            case 1: b.reduce_bucket_size += 1; break;
            case 2: b.allgather_bucket_size += 1; break;
            case 3: b.overlap_comm = 1; break;
            case 4: b.contiguous_gradients = 0; break;
            case 5: b.reduce_scatter = 0; break;
            case 6: b.prefetch_bucket_size += 1; break;
            case 7: b.param_persistence_threshold += 1; break;
            case 8: b.max_live_parameters += 1; break;
            case 9: b.max_reuse_distance += 1; break;
            case 10: b.sub_group_size += 1; break;
            case 11: b.prefetch_depth = 3; break;
            case 12: b.offload_optimizer = ZERO_OFFLOAD_CPU; break;
            case 13: b.offload_param = ZERO_OFFLOAD_CPU; break;
            case 14: b.train_batch_size = 64; break;
            case 15: b.train_micro_batch_size_per_gpu = 4; break;
            case 16: b.gradient_accumulation_steps = 2; break;
            case 17: b.bf16 = 1; break;
            case 18: b.lr = 1e-3f; break;
            case 19: b.beta1 = 0.9f; break;
            case 20: b.beta2 = 0.95f; break;
            case 21: b.eps = 1e-8f; break;
            case 22: b.weight_decay = 0.1f; break;
            case 23: b.gradient_clipping = 1.0f; break;
            case 24: b.comm_dtype = ZERO_COMM_FP32; break;  // other collectives: all ranks must agree
            case 25: b.comm_dtype = ZERO_COMM_BF16; break;
        }
        cr_assert_neq(zero_config_hash(&b), base, "field case %d does not change the hash", field);
    }
    // rank-local staging choices may differ between nodes: same hash
    zero_config_defaults(&b);
    strcpy(b.nvme_path, "/mnt/local");
    b.pin_memory = 1;
    b.buffer_count = 8;
    b.param_buffer_count = 9;
    b.pipeline_read = 0;
    b.pipeline_write = 0;
    b.max_in_cpu = 5;
    cr_assert_eq(zero_config_hash(&b), base);
    // -0 and 0 are the same weight decay
    a.weight_decay = 0.0f;
    b = a;
    b.weight_decay = -0.0f;
    cr_assert_eq(zero_config_hash(&a), zero_config_hash(&b));
    // a loaded file and the same values set by hand agree
    const char* path = write_json("h.json", FULL_JSON);
    zero_config_defaults(&a);
    zero_config_defaults(&b);
    cr_assert_eq(zero_config_load_json(&a, path, NULL, 0), 0, "%s", zero_errmsg());
    cr_assert_eq(zero_config_load_json(&b, path, NULL, 0), 0, "%s", zero_errmsg());
    cr_assert_eq(zero_config_hash(&a), zero_config_hash(&b));
    cr_assert_neq(zero_config_hash(&a), base);
}

Test(config, describe) {
    ZeroConfig c;
    zero_config_defaults(&c);
    c.stage = 3;
    char out[256];
    zero_config_describe(&c, out, sizeof(out));
    cr_assert_str_eq(out, "stage 3, prefetch 2, persistence 1e5, offload optimizer none, param none, buckets: prefetch 5e7, reduce 5e8");
    c.offload_param = ZERO_OFFLOAD_NVME;
    c.offload_optimizer = ZERO_OFFLOAD_CPU;
    c.param_persistence_threshold = 1234;
    strcpy(c.nvme_path, "/nvme");
    zero_config_describe(&c, out, sizeof(out));
    cr_assert(strstr(out, "persistence 1234, offload optimizer cpu, param nvme") != NULL, "%s", out);
    cr_assert(strstr(out, "nvme /nvme") != NULL, "%s", out);
    c.stage = 2;
    c.offload_param = ZERO_OFFLOAD_NONE;
    c.overlap_comm = 1;  // no effect, so not described
    zero_config_describe(&c, out, sizeof(out));
    cr_assert_str_eq(out, "stage 2, offload optimizer cpu, buckets: reduce 5e8");
    c.comm_dtype = ZERO_COMM_FP32;
    zero_config_describe(&c, out, sizeof(out));
    cr_assert_str_eq(out, "stage 2, offload optimizer cpu, buckets: reduce 5e8, gradients reduced in fp32");
    char tiny[8];
    zero_config_describe(&c, tiny, sizeof(tiny));  // truncated, terminated
    cr_assert_eq(strlen(tiny), 7);
}

// ----------------------------------------------------------------------------
// the gradients' reduction type: --communication-data-type, communication_data_type

Test(config, communication_data_type) {
    ZeroConfig c;
    zero_config_defaults(&c);
    cr_assert_eq(zero_config_set_flag(&c, "--communication-data-type", "fp32"), 0, "%s", zero_errmsg());
    cr_assert_eq(c.comm_dtype, ZERO_COMM_FP32);
    cr_assert_eq(zero_config_set_flag(&c, "--communication-data-type", "bf16"), 0, "%s", zero_errmsg());
    cr_assert_eq(c.comm_dtype, ZERO_COMM_BF16);
    // DeepSpeed lowercases the value, and once called bf16 "bfp16"
    static const struct { const char* json; ZeroCommDtype want; } good[] = {
        { "{\"communication_data_type\": \"fp32\"}", ZERO_COMM_FP32 },
        { "{\"communication_data_type\": \"FP32\"}", ZERO_COMM_FP32 },
        { "{\"communication_data_type\": \"bf16\"}", ZERO_COMM_BF16 },
        { "{\"communication_data_type\": \"bfp16\"}", ZERO_COMM_BF16 },
        { "{\"communication_data_type\": null}", ZERO_COMM_MODEL },
    };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        zero_config_defaults(&c);
        c.comm_dtype = ZERO_COMM_BF16;  // null resets it to the model's
        char warnings[256] = "";
        cr_assert_eq(zero_config_load_json(&c, write_json("comm.json", good[i].json), warnings, sizeof(warnings)), 0,
                     "%s: %s", good[i].json, zero_errmsg());
        cr_assert_eq(c.comm_dtype, good[i].want, "%s", good[i].json);
        cr_assert_str_eq(warnings, "", "%s", good[i].json);  // a key we read: no unknown-key warning
    }
    // a flag beats the file
    zero_config_defaults(&c);
    cr_assert_eq(zero_config_load_json(&c, write_json("comm.json", good[0].json), NULL, 0), 0);
    cr_assert_eq(zero_config_set_flag(&c, "--communication-data-type", "bf16"), 0);
    cr_assert_eq(c.comm_dtype, ZERO_COMM_BF16);
    // fp16 is DeepSpeed's, but no engine here has fp16 gradients: refused, saying so; the
    // configuration is left as it was
    static const struct { const char* json; const char* also; } bad[] = {
        { "{\"communication_data_type\": \"fp16\"}", "fp16 is not supported" },
        { "{\"communication_data_type\": \"fp8\"}", "unknown data type 'fp8'" },
        { "{\"communication_data_type\": 32}", "expected a string" },
        { "{\"communication_data_type\": \"auto\"}", "unknown data type 'auto'" },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        zero_config_defaults(&c);
        cr_assert_eq(zero_config_load_json(&c, write_json("comm.json", bad[i].json), NULL, 0), -1, "%s accepted", bad[i].json);
        cr_assert(strstr(zero_errmsg(), "communication_data_type") != NULL, "%s", zero_errmsg());
        cr_assert(strstr(zero_errmsg(), bad[i].also) != NULL, "%s: %s", bad[i].json, zero_errmsg());
        cr_assert_eq(c.comm_dtype, ZERO_COMM_MODEL);
    }
    zero_config_defaults(&c);
    cr_assert_eq(zero_config_set_flag(&c, "--communication-data-type", "fp16"), -1);
    cr_assert(strstr(zero_errmsg(), "--communication-data-type") != NULL && strstr(zero_errmsg(), "fp16 is not supported") != NULL,
              "%s", zero_errmsg());
    cr_assert_eq(zero_config_set_flag(&c, "--communication-data-type", NULL), -1);
    cr_assert_eq(c.comm_dtype, ZERO_COMM_MODEL);
    c.comm_dtype = (ZeroCommDtype)7;
    cr_assert_eq(zero_config_validate(&c), -1);
}

// ----------------------------------------------------------------------------
// the estimator

// GPT-2 124M: 12 layers of 12 d^2 + 13 d parameters (qkv 3d^2+3d, proj d^2+d, fc 4d^2+4d,
// fc proj 4d^2+d, two layernorms 4d), d = 768, plus wte 50257 x d, wpe 1024 x d, ln_f 2d.
#define GPT2_PSI (12.0 * (12.0 * 768 * 768 + 13.0 * 768) + 50257.0 * 768 + 1024.0 * 768 + 2.0 * 768)
#define GPT2_L (50257.0 * 768)  // the token embedding is the largest single tensor
// GPT-3 175B: 96 layers, d = 12288, 2048 positions
#define GPT3_PSI (96.0 * (12.0 * 12288 * 12288 + 13.0 * 12288) + 50257.0 * 12288 + 2048.0 * 12288 + 2.0 * 12288)
#define GPT3_L (50257.0 * 12288)

static void est(double psi, double L, int nodes, int gpus, int stage, ZeroOffload o, ZeroOffload p, ZeroEstimate* e) {
    cr_assert_eq(zero_estimate(psi, L, nodes, gpus, stage, o, p, e), 0, "%s", zero_errmsg());
}

static void near(double got, double want, const char* what) {
    double tol = 1e-12 * (want > 1 ? want : 1);
    cr_assert(got >= want - tol && got <= want + tol, "%s: got %.6f, want %.6f", what, got, want);
}

Test(estimate, counts_are_the_known_ones) {
    near(GPT2_PSI, 124439808.0, "GPT-2 small has 124,439,808 parameters");
    cr_assert(GPT3_PSI > 174.5e9 && GPT3_PSI < 175.0e9, "GPT-3 is the 175B model: %.0f", GPT3_PSI);
}

#define MIN2(a, b) ((a) < (b) ? (a) : (b))

static void check_model(double psi, double L, const char* name) {
    // N = 1 (1 x 1), 8 (1 node x 8), 64 (8 nodes x 8)
    int nodes[] = { 1, 1, 8 }, gpus[] = { 1, 8, 8 };
    for (int i = 0; i < 3; i++) {
        double N = (double)nodes[i] * gpus[i], G = gpus[i];
        ZeroEstimate e;
        char what[128];
        #define CHECK(stage, o, p, gpu, host, nvme) do { \
            est(psi, L, nodes[i], gpus[i], stage, o, p, &e); \
            snprintf(what, sizeof(what), "%s N=%g stage %d %s/%s gpu", name, N, stage, zero_offload_name(o), zero_offload_name(p)); \
            near(e.gpu_bytes, gpu, what); \
            snprintf(what, sizeof(what), "%s N=%g stage %d %s/%s host", name, N, stage, zero_offload_name(o), zero_offload_name(p)); \
            near(e.host_bytes_per_node, host, what); \
            snprintf(what, sizeof(what), "%s N=%g stage %d %s/%s nvme", name, N, stage, zero_offload_name(o), zero_offload_name(p)); \
            near(e.nvme_bytes_per_node, nvme, what); \
        } while (0)
        const ZeroOffload NO = ZERO_OFFLOAD_NONE, CPU = ZERO_OFFLOAD_CPU, NV = ZERO_OFFLOAD_NVME;
        // stage 0: bf16 params 2 + bf16 grads 2 + fp32 master/m/v 12, all replicated
        CHECK(0, NO, NO, 16 * psi, 0, 0);
        // stage 1: params and grads replicated (2 + 2), the 12 bytes of optimizer state split N ways
        CHECK(1, NO, NO, 4 * psi + 12 * psi / N, 0, 0);
        // stage 1, optimizer on the CPU: the 12/N leave; the host holds 12/N of state + 4/N of fp32 grads per rank
        CHECK(1, CPU, NO, 4 * psi, G * 16 * psi / N, 0);
        // stage 2: params replicated (2), grads and optimizer state split (2 + 12) / N
        CHECK(2, NO, NO, 2 * psi + 14 * psi / N, 0, 0);
        CHECK(2, CPU, NO, 2 * psi + 2 * psi / N, G * 16 * psi / N, 0);
        // stage 3: everything split, 16/N, plus 4 bf16 buffers (2 bytes) of the largest layer
        CHECK(3, NO, NO, 16 * psi / N + 4 * L * 2, 0, 0);
        CHECK(3, CPU, NO, 4 * psi / N + 8 * L, G * 16 * psi / N, 0);
        // params on the CPU too: 2/N more leaves the GPU for the host
        CHECK(3, CPU, CPU, 2 * psi / N + 8 * L, G * 18 * psi / N, 0);
        // optimizer state on NVMe: 12/N to disk, the host keeps 4/N of fp32 grads and 4 swap buffers
        // of the rank's share of the largest layer at 12 bytes per element, at most the whole
        // partition (Psi/N elements) they stage
        double opt_swap = MIN2(4 * L / N, psi / N) * 12;
        CHECK(3, NV, CPU, 2 * psi / N + 8 * L, G * (4 * psi / N + 2 * psi / N + opt_swap), G * 12 * psi / N);
        // params on NVMe as well: 2/N more to disk, the host stages them in 5 bf16 buffers of L / N
        double param_swap = MIN2(5 * L / N, psi / N) * 2;
        CHECK(3, NV, NV, 2 * psi / N + 8 * L, G * (4 * psi / N + opt_swap + param_swap), G * 14 * psi / N);
        #undef CHECK
    }
}

Test(estimate, gpt2_124m_by_hand) { check_model(GPT2_PSI, GPT2_L, "GPT-2 124M"); }
Test(estimate, gpt3_175b_by_hand) { check_model(GPT3_PSI, GPT3_L, "GPT-3 175B"); }

Test(estimate, a_number_worked_out) {
    // GPT-3 at stage 0 on one GPU: 16 bytes x 174,604,259,328 = 2,793,668,149,248 bytes (2.79 TB)
    ZeroEstimate e;
    est(GPT3_PSI, GPT3_L, 1, 1, 0, ZERO_OFFLOAD_NONE, ZERO_OFFLOAD_NONE, &e);
    near(e.gpu_bytes, 2793668149248.0, "GPT-3 stage 0");
    // GPT-2 at stage 3 over 64 GPUs: 16 x 124439808 / 64 = 31,109,952, + 8 x 38,597,376 = 308,779,008
    est(GPT2_PSI, GPT2_L, 8, 8, 3, ZERO_OFFLOAD_NONE, ZERO_OFFLOAD_NONE, &e);
    near(e.gpu_bytes, 31109952.0 + 308779008.0, "GPT-2 stage 3 N=64");
}

Test(estimate, monotone_in_N) {
    double models[][2] = { { GPT2_PSI, GPT2_L }, { GPT3_PSI, GPT3_L } };
    for (int m = 0; m < 2; m++) {
        for (int stage = 0; stage <= 3; stage++) {
            double prev = 0;
            for (int N = 1; N <= 1024; N *= 2) {
                ZeroEstimate e;
                est(models[m][0], models[m][1], 1, N, stage, ZERO_OFFLOAD_NONE, ZERO_OFFLOAD_NONE, &e);
                if (N > 1) {
                    if (stage == 0) { near(e.gpu_bytes, prev, "stage 0 does not depend on N"); }
                    else { cr_assert_lt(e.gpu_bytes, prev, "model %d stage %d: N=%d is not below N=%d", m, stage, N, N / 2); }
                }
                prev = e.gpu_bytes;
            }
        }
    }
}

static void stages_ordered(double psi, double L, int N) {
    ZeroEstimate e[4];
    for (int s = 0; s <= 3; s++) { est(psi, L, 1, N, s, ZERO_OFFLOAD_NONE, ZERO_OFFLOAD_NONE, &e[s]); }
    cr_assert_lt(e[3].gpu_bytes, e[2].gpu_bytes, "N=%d: stage 3 %.0f !< stage 2 %.0f", N, e[3].gpu_bytes, e[2].gpu_bytes);
    cr_assert_lt(e[2].gpu_bytes, e[1].gpu_bytes, "N=%d", N);
    cr_assert_lt(e[1].gpu_bytes, e[0].gpu_bytes, "N=%d", N);
}

Test(estimate, stages_ordered_for_N_above_1) {
    int Ns[] = { 2, 8, 64, 512 };
    for (int i = 0; i < 4; i++) {
        stages_ordered(GPT3_PSI, GPT3_L, Ns[i]);
        // the model states alone (no working set) are ordered for any model
        stages_ordered(GPT2_PSI, 0.0, Ns[i]);
    }
    // ... but GPT-2 small's embedding is 31% of the model: stage 3's working set, 4 bf16
    // copies of it (8 L = 309 MB), outweighs all stage 3 saves over stage 2 (2 Psi (N-1)/N
    // <= 249 MB), at every N. Stage 3 pays off for models whose largest layer is small.
    for (int i = 0; i < 4; i++) {
        ZeroEstimate s2, s3;
        est(GPT2_PSI, GPT2_L, 1, Ns[i], 2, ZERO_OFFLOAD_NONE, ZERO_OFFLOAD_NONE, &s2);
        est(GPT2_PSI, GPT2_L, 1, Ns[i], 3, ZERO_OFFLOAD_NONE, ZERO_OFFLOAD_NONE, &s3);
        cr_assert_gt(s3.gpu_bytes, s2.gpu_bytes, "N=%d", Ns[i]);
    }
}

Test(estimate, nvme_never_needs_more_host_memory_than_cpu) {
    int Ns[] = { 1, 8, 64 };
    double models[][2] = { { GPT2_PSI, GPT2_L }, { GPT3_PSI, GPT3_L } };
    for (int m = 0; m < 2; m++) {
        for (int i = 0; i < 3; i++) {
            ZeroEstimate cpu, nv;
            est(models[m][0], models[m][1], 1, Ns[i], 3, ZERO_OFFLOAD_CPU, ZERO_OFFLOAD_CPU, &cpu);
            est(models[m][0], models[m][1], 1, Ns[i], 3, ZERO_OFFLOAD_NVME, ZERO_OFFLOAD_NVME, &nv);
            cr_assert_leq(nv.host_bytes_per_node, cpu.host_bytes_per_node, "model %d N=%d", m, Ns[i]);
        }
    }
}

Test(estimate, offload_reduces_gpu_bytes) {
    int Ns[] = { 1, 8, 64 };
    for (int i = 0; i < 3; i++) {
        ZeroEstimate none, cpu, both, nv;
        for (int s = 1; s <= 3; s++) {
            est(GPT3_PSI, GPT3_L, 1, Ns[i], s, ZERO_OFFLOAD_NONE, ZERO_OFFLOAD_NONE, &none);
            est(GPT3_PSI, GPT3_L, 1, Ns[i], s, ZERO_OFFLOAD_CPU, ZERO_OFFLOAD_NONE, &cpu);
            cr_assert_lt(cpu.gpu_bytes, none.gpu_bytes, "stage %d N=%d", s, Ns[i]);
            cr_assert_gt(cpu.host_bytes_per_node, none.host_bytes_per_node);
        }
        est(GPT3_PSI, GPT3_L, 1, Ns[i], 3, ZERO_OFFLOAD_CPU, ZERO_OFFLOAD_NONE, &cpu);
        est(GPT3_PSI, GPT3_L, 1, Ns[i], 3, ZERO_OFFLOAD_CPU, ZERO_OFFLOAD_CPU, &both);
        est(GPT3_PSI, GPT3_L, 1, Ns[i], 3, ZERO_OFFLOAD_NVME, ZERO_OFFLOAD_NVME, &nv);
        cr_assert_lt(both.gpu_bytes, cpu.gpu_bytes);
        near(nv.gpu_bytes, both.gpu_bytes, "NVMe frees the GPU as much as CPU offload");
        cr_assert_lt(nv.host_bytes_per_node, both.host_bytes_per_node, "NVMe takes the states off the host");
        cr_assert_gt(nv.nvme_bytes_per_node, 0.0);
    }
}

Test(estimate, rejects_what_deepspeed_lacks) {
    ZeroEstimate e;
    const ZeroOffload NO = ZERO_OFFLOAD_NONE, CPU = ZERO_OFFLOAD_CPU, NV = ZERO_OFFLOAD_NVME;
    cr_assert_eq(zero_estimate(GPT2_PSI, GPT2_L, 1, 8, 0, CPU, NO, &e), -1);
    cr_assert_eq(zero_estimate(GPT2_PSI, GPT2_L, 1, 8, 2, NO, CPU, &e), -1);
    cr_assert_eq(zero_estimate(GPT2_PSI, GPT2_L, 1, 8, 2, NV, NO, &e), -1);
    cr_assert_eq(zero_estimate(GPT2_PSI, GPT2_L, 1, 8, 4, NO, NO, &e), -1);
    cr_assert_eq(zero_estimate(GPT2_PSI, GPT2_L, 0, 8, 3, NO, NO, &e), -1);
    cr_assert_eq(zero_estimate(GPT2_PSI, GPT2_L, 1, 0, 3, NO, NO, &e), -1);
    cr_assert_eq(zero_estimate(0, 0, 1, 8, 3, NO, NO, &e), -1);
    cr_assert_eq(zero_estimate(GPT2_PSI, GPT2_PSI * 2, 1, 8, 3, NO, NO, &e), -1);
    cr_assert(strstr(zero_errmsg(), "largest_layer") != NULL, "%s", zero_errmsg());
}

Test(estimate, print_table) {
    char* buf = NULL;
    size_t len = 0;
    FILE* f = open_memstream(&buf, &len);
    cr_assert_not_null(f);
    zero_estimate_print(f, "GPT-3 175B", GPT3_PSI, GPT3_L, 8, 8, 0);
    fclose(f);
    cr_assert(strstr(buf, "GPT-3 175B") != NULL, "%s", buf);
    cr_assert(strstr(buf, "Psi = 174.60B") != NULL, "%s", buf);
    cr_assert(strstr(buf, "N = 8 node(s) x 8 GPU(s) = 64 ranks") != NULL, "%s", buf);
    cr_assert(strstr(buf, "cannot estimate") == NULL, "%s", buf);
    cr_assert_eq(count_lines(buf), 12, "%s", buf);  // header, column names, 10 rows
    free(buf);
}

// --communication-data-type fp32: the fp32 buffers of zero3/device.cuh, per GPU
Test(estimate, fp32_reductions) {
    const double psi = GPT2_PSI, L = GPT2_L;
    cr_assert_float_eq(zero_estimate_comm_fp32(psi, L, 1, 8, 0), 4.0 * psi, 1.0);        // the whole gradient
    cr_assert_float_eq(zero_estimate_comm_fp32(psi, L, 1, 1, 0), 0.0, 1e-9);             // one rank reduces nothing
    cr_assert_float_eq(zero_estimate_comm_fp32(psi, L, 1, 8, 1), 4.0 * psi / 8 + 4.0 * L, 1.0);
    cr_assert_float_eq(zero_estimate_comm_fp32(psi, L, 2, 4, 2), 4.0 * L + 4.0 * L / 8, 1.0);
    cr_assert_float_eq(zero_estimate_comm_fp32(psi, L, 1, 8, 3), 4.0 * L + 4.0 * L / 8, 1.0);
    // the table adds them to the GPU column of every row
    char* with = NULL; char* without = NULL;
    size_t len = 0;
    FILE* f = open_memstream(&without, &len);
    zero_estimate_print(f, "GPT-2 124M", psi, L, 1, 8, 0);
    fclose(f);
    f = open_memstream(&with, &len);
    zero_estimate_print(f, "GPT-2 124M", psi, L, 1, 8, 1);
    fclose(f);
    cr_assert(strstr(with, "gradients reduced in fp32") != NULL, "%s", with);
    cr_assert(strstr(without, "gradients reduced in fp32") == NULL, "%s", without);
    ZeroEstimate e;
    est(psi, L, 1, 8, 0, ZERO_OFFLOAD_NONE, ZERO_OFFLOAD_NONE, &e);
    char row[128];
    snprintf(row, sizeof(row), "%12.2f", (e.gpu_bytes + 4.0 * psi) / (1024.0 * 1024.0 * 1024.0));
    cr_assert(strstr(with, row) != NULL, "stage 0 row with %s GiB: %s", row, with);
    free(with);
    free(without);
}

// MiCS and ZeRO++: DeepSpeed's keys and our flags set them, stage 3 only, the combinations
// that cannot work are refused by name
Test(config, mics_and_zeropp) {
    ZeroConfig c;
    zero_config_defaults(&c);
    cr_assert_eq(c.mics_shard_size, -1);
    cr_assert_eq(c.hpz_partition_size, 1);
    char warnings[256] = "";
    const char* json = "{\"zero_optimization\": {\"stage\": 3, \"mics_shard_size\": 8, \"mics_hierarchical_params_gather\": true,"
                       " \"zero_quantized_weights\": true, \"zero_quantized_gradients\": true}}";
    cr_assert_eq(zero_config_load_json(&c, write_json("zpp.json", json), warnings, sizeof(warnings)), 0, "%s", zero_errmsg());
    cr_assert_str_eq(warnings, "");  // every key read
    cr_assert(c.mics_shard_size == 8 && c.mics_hierarchical_params_gather == 1 && c.quantized_weights == 1 && c.quantized_gradients == 1);
    cr_assert_eq(zero_config_validate(&c), 0, "%s", zero_errmsg());
    // flags beat the file
    cr_assert_eq(zero_config_set_flag(&c, "--mics-shard-size", "-1"), 0);
    cr_assert_eq(zero_config_set_flag(&c, "--mics-hierarchical-params-gather", "0"), 0);
    cr_assert_eq(zero_config_set_flag(&c, "--zero-hpz-partition-size", "4"), 0);
    cr_assert_eq(zero_config_set_flag(&c, "--zero-quantized-weights", "0"), 0);
    cr_assert_eq(zero_config_set_flag(&c, "--ranks-per-node", "2"), 0);
    cr_assert(c.mics_shard_size == -1 && c.hpz_partition_size == 4 && c.quantized_weights == 0 && c.quantized_gradients == 1 && c.ranks_per_node == 2);
    cr_assert_eq(zero_config_validate(&c), 0, "%s", zero_errmsg());
    char desc[512];
    zero_config_describe(&c, desc, sizeof(desc));
    cr_assert(strstr(desc, "hpZ groups of 4") && strstr(desc, "qgZ") && strstr(desc, "nodes of 2"), "%s", desc);
    // bad values
    cr_assert_eq(zero_config_set_flag(&c, "--zero-quantized-weights", "2"), -1);
    cr_assert_eq(zero_config_set_flag(&c, "--zero-hpz-partition-size", "0"), -1);
    cr_assert_eq(zero_config_set_flag(&c, "--mics-shard-size", "-2"), -1);
    // what validate refuses, each with its reason
    static const struct { const char* flag; const char* value; int stage; const char* also; const char* also_value; const char* needle; } bad[] = {
        { "--zero-quantized-gradients", "1", 2, NULL, NULL, "need ZeRO stage 3" },
        { "--mics-shard-size", "2", 1, NULL, NULL, "need ZeRO stage 3" },
        { "--mics-shard-size", "2", 3, "--zero-hpz-partition-size", "2", "choose one" },
        { "--mics-shard-size", "2", 3, "--offload-optimizer", "cpu", "not supported" },
        { "--mics-hierarchical-params-gather", "1", 3, NULL, NULL, "needs mics_shard_size" },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        zero_config_defaults(&c);
        c.stage = bad[i].stage;
        cr_assert_eq(zero_config_set_flag(&c, bad[i].flag, bad[i].value), 0);
        if (bad[i].also) { cr_assert_eq(zero_config_set_flag(&c, bad[i].also, bad[i].also_value), 0); }
        cr_assert_eq(zero_config_validate(&c), -1, "case %zu", i);
        cr_assert(strstr(zero_errmsg(), bad[i].needle), "case %zu: %s", i, zero_errmsg());
    }
}

// ----------------------------------------------------------------------------
// the device engine's memory by tier (zero3/dev_estimate.h)

// A GPT-2-shaped model small enough to work out by hand: the embedding (5000 elements),
// 4 blocks of 3000, the final norm (20), used as gpt2_schedule uses them. Over 4 ranks in
// bf16 (X = 2: shards of 128 elements) the padded units are 5120, 4 x 3072 and 512, their
// shards 1280, 768 and 128: P = 17920, S = 4480, Lmax 5120, Smax 1280.
static const size_t DEV_NUMEL[6] = {5000, 3000, 3000, 3000, 3000, 20};
static const int DEV_TRAIN[13] = {0, 1, 2, 3, 4, 5, 0, 0, 5, 4, 3, 2, 1};
static const int DEV_FWD[7] = {0, 1, 2, 3, 4, 5, 0};
#define DEV_P 17920.0
#define DEV_S 4480.0

static ZeroModel dev_model(void) {
    ZeroModel m;
    memset(&m, 0, sizeof(m));
    m.num_units = 6;
    m.unit_numel = DEV_NUMEL;
    m.uses[ZERO_PASS_TRAIN] = DEV_TRAIN;
    m.num_uses[ZERO_PASS_TRAIN] = 13;
    m.uses[ZERO_PASS_FORWARD] = DEV_FWD;
    m.num_uses[ZERO_PASS_FORWARD] = 7;
    return m;
}

static ZeroDevEstimate dev_est(int stage, ZeroOffload opt, ZeroOffload param, int dpu, ZeroConfig* knobs) {
    ZeroConfig c;
    zero_config_defaults(&c);
    if (knobs != NULL) { c = *knobs; }
    c.stage = stage;
    c.offload_optimizer = opt;
    c.offload_param = param;
    c.param_persistence_threshold = 100;  // the final norm is persistent, the rest gathered
    ZeroModel m = dev_model();
    ZeroDevEstimate e;
    cr_assert_eq(zero_dev_estimate(&m, &c, 4, 2, dpu, &e), 0, "stage %d %s/%s: %s", stage, zero_offload_name(opt),
                 zero_offload_name(param), zero_errmsg());
    return e;
}

#define NO_ ZERO_OFFLOAD_NONE
#define CPU_ ZERO_OFFLOAD_CPU
#define NV_ ZERO_OFFLOAD_NVME

// stages 0-2 by hand (zero3/device_init.cuh's allocations)
Test(dev_estimate, stages_by_hand) {
    ZeroDevEstimate e = dev_est(0, NO_, NO_, 0, NULL);
    near(e.gpu, 2 * DEV_P + 2 * DEV_P + 12 * DEV_P, "stage 0: parameters, gradients, master and moments, all whole");
    near(e.host + e.nvme, 0, "stage 0: nothing on the host");
    e = dev_est(1, NO_, NO_, 0, NULL);
    near(e.gpu, 2 * DEV_P + 2 * DEV_P + 2 * DEV_S + 12 * DEV_S, "stage 1: + the reduced bf16 shards, the optimizer sharded");
    e = dev_est(2, NO_, NO_, 0, NULL);
    // gradient pools: 5120 (one unit: 1 buffer), 3072 (four: 2), 512 (one: 1), each with a
    // reduce-scatter output of its shard, bf16
    double pools = 1.25 * 2 * (5120.0 + 2 * 3072.0 + 512.0);
    near(e.gpu_grad_pools, pools, "stage 2: the gradient pools");
    near(e.gpu, 2 * DEV_P + 4 * DEV_S + 12 * DEV_S + pools, "stage 2: fp32 accumulators instead of whole gradients");
    cr_assert_eq(e.npools, 0, "no gather pools below stage 3");
    near(e.gpu_init, 4.0 * 5120, "the init's fp32 unit");
    // reduced in fp32: one fp32 unit and its shard, the pools without their bf16 outputs
    ZeroConfig c;
    zero_config_defaults(&c);
    c.comm_dtype = ZERO_COMM_FP32;
    e = dev_est(2, NO_, NO_, 0, &c);
    near(e.gpu_comm, 4.0 * 5120 + 4.0 * 1280, "fp32 reductions: 4 Lmax + 4 Smax");
    near(e.gpu_grad_pools, 2 * (5120.0 + 2 * 3072.0 + 512.0), "fp32 reductions: no bf16 outputs");
    e = dev_est(1, NO_, NO_, 0, &c);
    near(e.gpu, 2 * DEV_P + 2 * DEV_P + 4 * DEV_S + 12 * DEV_S + 4.0 * 5120, "stage 1 in fp32: fp32 shards and one fp32 unit");
}

// stage 3: the shards, the persistent norm, the gather pools (their count is
// test_schedule.c's), and each tier's shard arrays leaving the GPU
Test(dev_estimate, offload_takes_the_shard_arrays_off_the_gpu) {
    ZeroDevEstimate none = dev_est(3, NO_, NO_, 0, NULL);
    double gather = 0;
    for (int i = 0; i < none.npools; i++) { gather += 2.0 * none.pool_elems[i] * none.pool_count[i]; }
    cr_assert(none.npools == 2 && none.pool_count[0] >= 1 && none.pool_count[1] >= 1, "%d pools", none.npools);
    near(none.gpu_units, 2.0 * 512 + gather, "the persistent norm and the gather pools");
    near(none.gpu, 2 * DEV_S + 4 * DEV_S + 12 * DEV_S + none.gpu_units + none.gpu_grad_pools, "stage 3 without offload");
    ZeroDevEstimate opt = dev_est(3, CPU_, NO_, 0, NULL);
    near(none.gpu - opt.gpu, 12 * DEV_S, "optimizer cpu: the 12 S of master and moments leave");
    near(opt.host, 12 * DEV_S + 4 * DEV_S + 2 * DEV_S, "optimizer cpu: master, m, v, fp32 gradient shards, the compute copy");
    cr_assert_eq(opt.shard_free, 0);
    ZeroOffload tiers[4][2] = {{CPU_, CPU_}, {CPU_, NV_}, {NV_, NO_}, {NV_, NV_}};
    for (int k = 0; k < 4; k++) {
        ZeroDevEstimate e = dev_est(3, tiers[k][0], tiers[k][1], 0, NULL);
        cr_assert_eq(e.shard_free, 1);
        // the shard arrays below optimizer offload alone: the 4 S accumulators, and with the
        // parameters offloaded the X S parameter shards (the optimizer on NVMe alone keeps
        // them on the GPU, where its updated copy is uploaded)
        double params = tiers[k][1] == NO_ ? 2 * DEV_S : 0.0;
        cr_assert_geq(opt.gpu - e.gpu, 2 * DEV_S - params + 4 * DEV_S, "tier %d: %.0f", k, opt.gpu - e.gpu);
        near(none.gpu - e.gpu, 18 * DEV_S - params, "the shard-free mode: the shard arrays off the GPU");
        near(e.gpu_units, none.gpu_units, "the gather pools and the persistent units stay");
        near(e.gpu_params + e.gpu_grads + e.gpu_optimizer, params, "nothing else shard-sized on the GPU");
    }
    // the gradient shards leave through 4 fp32 staging slots of the largest shard
    ZeroDevEstimate pc = dev_est(3, CPU_, CPU_, 0, NULL);
    near(pc.host, 12 * DEV_S + 4 * DEV_S + 2 * DEV_S + 4 * 4 * 1280.0, "optimizer and parameters cpu: the copy is the shards");
    ZeroDevEstimate dpu = dev_est(3, CPU_, CPU_, 1, NULL);
    near(dpu.host - pc.host, 4 * DEV_S + 2 * DEV_S, "--dpu: a second gradient and compute copy");
    // reduced in fp32, a gradient buffer's shard output is fp32
    ZeroConfig c;
    zero_config_defaults(&c);
    c.comm_dtype = ZERO_COMM_FP32;
    ZeroDevEstimate w = dev_est(3, CPU_, CPU_, 0, &c);
    near(w.gpu_grad_pools, 2 * (5120.0 + 2 * 3072.0 + 512.0) + 4 * (1280.0 + 2 * 768.0 + 128.0), "fp32 shard outputs");
    near(w.gpu_comm, 4.0 * 5120, "fp32 reductions: the widened unit, no shard of its own");
}

// NVMe: the swap file and what the host keeps, worked out by hand
Test(dev_estimate, nvme_by_hand) {
    ZeroConfig c;
    zero_config_defaults(&c);
    c.max_in_cpu = 0;  // only the persistent norm's shard stays on the host
    ZeroDevEstimate e = dev_est(3, NV_, NV_, 0, &c);
    // 4 regions of S rounded to 1024 (5120) fp32; the parameter region: 5 shards of 1280 or
    // 768 bf16, each 4 KiB-aligned
    double nvme = 16.0 * 5120 + 5 * 4096.0;
    near(e.nvme, nvme, "the swap file");
    double host = 2.0 * 128                 // the cached norm's shard
                + 4 * 4 * 1280.0            // the gradients' staging slots
                + 5 * 4096.0                // the engine's 5 pinned buffers (offload_param.buffer_count) a shard read is uploaded from (bf16, 4 KiB blocks)
                + 2 * 4096.0                // the swap module's two staging buffers of a shard (bf16, 4 KiB-aligned)
                + 4 * 4 * 5120 * 4.0        // 4 sets of 4 group buffers, a group the whole (1024-rounded) shard
                + (8192.0 + 4096)           // one gradient shard's span staged for the file
                + (double)nvme_sums_bytes((size_t)nvme);
    near(e.host, host, "the host");
    c.param_buffer_count = 2;
    near(dev_est(3, NV_, NV_, 0, &c).host, host - 3 * 4096.0, "offload_param.buffer_count 2: 2 pinned buffers");
    c.param_buffer_count = 1000;  // (more than the units: one per unit)
    near(dev_est(3, NV_, NV_, 0, &c).host, host + (dev_model().num_units - 5) * 4096.0, "one buffer per unit at most");
    ZeroDevEstimate np = dev_est(3, NV_, NO_, 0, NULL);
    near(np.nvme, 16.0 * 5120, "optimizer nvme alone: the optimizer's regions");
    near(np.host_params, 2 * DEV_S, "the parameter shards the NVMe step writes stay on the host");
    cr_assert_lt(np.host, e.host + 2 * DEV_S, "%.0f", np.host);
}

Test(dev_estimate, refuses_what_the_engine_does_not_run) {
    ZeroConfig c;
    zero_config_defaults(&c);
    ZeroModel m = dev_model();
    ZeroDevEstimate e;
    int bad[][3] = {{0, CPU_, NO_}, {2, NO_, CPU_}, {2, NV_, NO_}, {3, NO_, CPU_}, {3, NO_, NV_}, {4, NO_, NO_}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        c.stage = bad[i][0];
        c.offload_optimizer = (ZeroOffload)bad[i][1];
        c.offload_param = (ZeroOffload)bad[i][2];
        cr_assert_eq(zero_dev_tier_valid(c.stage, c.offload_optimizer, c.offload_param), 0, "row %zu", i);
        cr_assert_eq(zero_dev_estimate(&m, &c, 4, 2, 0, &e), -1, "row %zu", i);
        cr_assert(strstr(zero_errmsg(), "not a tier of the device engine") != NULL, "%s", zero_errmsg());
    }
    c.stage = 3;
    c.offload_optimizer = ZERO_OFFLOAD_NONE;
    c.offload_param = ZERO_OFFLOAD_NONE;
    cr_assert_eq(zero_dev_estimate(&m, &c, 4, 2, 1, &e), -1, "--dpu without optimizer offload");
    cr_assert_eq(zero_dev_estimate(&m, &c, 4, 3, 0, &e), -1, "3 bytes a parameter");
    cr_assert_eq(zero_dev_estimate(&m, &c, 0, 2, 0, &e), -1, "no ranks");
    int valid = 0;
    for (int s = 0; s <= 3; s++) {
        for (int o = 0; o <= 2; o++) {
            for (int p = 0; p <= 2; p++) { valid += zero_dev_tier_valid(s, (ZeroOffload)o, (ZeroOffload)p); }
        }
    }
    cr_assert_eq(valid, 12, "1 + 2 + 2 + 7 tiers: %d", valid);
}
