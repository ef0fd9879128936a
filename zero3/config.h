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

#include <stddef.h>        // size_t
#include <stdint.h>        // uint64_t for the configuration hash
#include "zero3/options.h"  // OptRow: zero_options, the table of every ZeRO option (flag, key, range, default, help)

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { ZERO_OFFLOAD_NONE = 0, ZERO_OFFLOAD_CPU, ZERO_OFFLOAD_NVME } ZeroOffload;
// the type gradients are reduced in: the model's (unset), or named
typedef enum { ZERO_COMM_MODEL = 0, ZERO_COMM_FP32, ZERO_COMM_BF16 } ZeroCommDtype;

typedef struct ZeroConfig {
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
    int param_buffer_count;             // offload_param.buffer_count: buffers parameter shards are read ahead into; 5
    int pipeline_read, pipeline_write;  // offload_optimizer.pipeline_read / pipeline_write: the NVMe step's overlap; 1
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

// Every ZeRO option once: its flags, its DeepSpeed key, type, range, default and help
// (zero3/options.h). The defaults, the flags, the JSON's scalar keys, the range checks,
// --help and the values of zero_config_describe all come from it.
extern const OptRow zero_options[];
extern const int zero_num_options;

// the row whose DeepSpeed key or long flag is `name` ("zero_optimization.stage",
// "--prefetch"); NULL when none
const OptRow* zero_option(const char* name);

// the table's defaults: DeepSpeed's for its keys, ours for prefetch_depth, "absent" for
// the training keys
void zero_config_defaults(ZeroConfig* c);

// "model" (unset: the model's type), "fp32", "bf16"
const char* zero_comm_dtype_name(ZeroCommDtype t);

const char* zero_offload_name(ZeroOffload o);

// ----------------------------------------------------------------------------
// value parsers of the enums, for the table and the trainers. `what` names the source for
// the message: "flag --offload-param" or "--ds-config f.json: key 'zero_optimization.offload_param.device'".

int zero_parse_offload(const char* what, const char* s, ZeroOffload* out);

// ASCII case-insensitive equality: names are matched like DeepSpeed's ("adamw" == "AdamW", "FP32" == "fp32")
int zero_streq_nocase(const char* a, const char* b);

// communication_data_type, any case as DeepSpeed lowercases it ("bfp16": its older name
// for bf16); fp16 is DeepSpeed's too, but nothing here has fp16 gradients to reduce
int zero_parse_comm_dtype(const char* what, const char* s, ZeroCommDtype* out);

// ----------------------------------------------------------------------------
// command-line flags

// One long flag of zero_options, `name` as typed ("--zero-stage"), `value` its argument.
// Returns 0 when applied, 1 when `name` is not a long flag of the table (the caller tries
// its own; --ds-config is the caller's; -z too, which opt_parse_args finds in the same row),
// -1 with zero_errmsg() naming the flag on a bad value, leaving c unchanged. (No flag for the
// keys that have no effect: they exist for configs written for DeepSpeed.)
int zero_config_set_flag(ZeroConfig* c, const char* name, const char* value);

// ----------------------------------------------------------------------------
// warnings: the JSON's unknown and no-effect keys (zero3/config_json.h), settings without
// effect (zero_config_warnings), one line each in the caller's buffer

typedef struct {
    const char* path;     // the file, for messages
    char* warnings;       // appended to; may be NULL
    size_t warnings_len;
    unsigned char* seen;  // per row of zero_options: 0, or given by its key (1) or its alias (2)
} ZeroJsonCtx;

// appends one line to the warnings; when the buffer is full the line is dropped rather
// than cut, so that every line the caller sees is whole
__attribute__((format(printf, 2, 3)))
void zero_json_warn(ZeroJsonCtx* x, const char* fmt, ...);

// ----------------------------------------------------------------------------
// checks across fields, after the file and the flags

// 0 when the fields make sense together; -1 with zero_errmsg() naming the conflict
int zero_config_validate(const ZeroConfig* c);

// Knobs given a value (other than the default) that the configuration leaves without
// effect: stage 3's with -z 0-2, the NVMe step's without NVMe optimizer offload, the
// parameter store's without NVMe parameter offload. One line each appended to warnings
// (cap bytes, whole lines only); nothing is refused: a config may serve several runs.
void zero_config_warnings(const ZeroConfig* c, char* warnings, size_t cap);

// ----------------------------------------------------------------------------
// DeepSpeed's batch rule: train_batch_size = micro * accum * world

// Of train_batch_size, micro (per rank) and accum, any two fix the third for `world` ranks;
// all three must satisfy train = micro * accum * world. Inputs <= 0 mean "not given"; a lone
// train_batch_size or micro means accum 1, as in DeepSpeed. Fills *micro_out and *accum_out,
// or returns -1 (outputs untouched) with a message naming the numbers.
int zero_config_resolve_batch(long long train_batch_size, int micro, int accum, int world, int* micro_out, int* accum_out);

// ----------------------------------------------------------------------------
// the start-up agreement check

uint64_t zero_hash_bytes(uint64_t h, const void* p, size_t n);

// Every field that decides the sequence of collectives or the numbers of the update,
// which must then agree on all ranks. Left out on purpose: nvme_path, pin_memory,
// buffer counts, pipelining and max_in_cpu, which only say how one rank stages its own
// memory (a node's NVMe mount may well differ from another's).
uint64_t zero_config_hash(const ZeroConfig* c);

// ----------------------------------------------------------------------------
// description for the log

// one line for the log, e.g. "stage 3, prefetch 2, persistence 1e5, offload optimizer none,
// param none, buckets: prefetch 5e7, reduce 5e8"; truncated to fit `len`
void zero_config_describe(const ZeroConfig* c, char* out, size_t len);

#ifdef __cplusplus
}
#endif

#endif // ZERO3_CONFIG_H
