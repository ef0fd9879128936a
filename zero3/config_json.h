/*
 The DeepSpeed JSON config (--ds-config FILE.json) over a ZeroConfig (zero3/config.h).

 What we read from the JSON (every other key is reported as a warning, never an error,
 so that a config written for DeepSpeed loads as it is):
   train_batch_size, train_micro_batch_size_per_gpu, gradient_accumulation_steps,
   gradient_clipping, bf16.enabled, communication_data_type,
   optimizer.type ("AdamW" or "Adam", any case), optimizer.params.{lr, betas, eps,
   weight_decay, adam_w_mode},
   zero_optimization.{stage, reduce_bucket_size, allgather_bucket_size, overlap_comm,
   contiguous_gradients, reduce_scatter, [stage3_]prefetch_bucket_size,
   [stage3_]param_persistence_threshold, [stage3_]max_live_parameters,
   [stage3_]max_reuse_distance, sub_group_size, mics_shard_size,
   mics_hierarchical_params_gather, zero_hpz_partition_size, zero_quantized_weights,
   zero_quantized_gradients},
   zero_optimization.offload_optimizer.{device, nvme_path, pin_memory, buffer_count,
   pipeline_read, pipeline_write}, zero_optimization.offload_param.{device, nvme_path,
   pin_memory, buffer_count, max_in_cpu}.

 Decisions worth knowing:
 - The keys are zero_options' (zero3/config.c): each goes through its row's setter with its
   row's range, as its flag does; an object is a section when it is the prefix of some
   row's key. Hand-written: optimizer.type (required), optimizer.params.betas (an array of
   two rows), optimizer.params.adam_w_mode (only checked), and the nulls DeepSpeed writes
   for an unused nvme_path and for the model's communication_data_type.
 - Every key read either works in both engines that run it (zero3/host.h, zero3/device.cuh)
   or is accepted, validated and reported at start-up as having no effect (the warnings
   below say why; docs/USAGE.md lists them): allgather_bucket_size (a unit is gathered
   whole: the unit is the bucket), overlap_comm (communication always overlaps:
   nonblocking collectives, NCCL on its own stream), contiguous_gradients (a unit's
   gradient is one buffer already), reduce_scatter (stages 1-3 always reduce-scatter)
   and pin_memory (the GPU's host buffers are always pinned).
 - A failed load leaves the configuration untouched: keys are applied to a copy that is
   committed only once the whole file has been read without error.
 - Bounded: a file of more than ZERO_CONFIG_MAX_BYTES (1 MiB; a DeepSpeed config is a few
   kilobytes) is refused unread, naming the limit, and a directory by what it is. What is
   read costs time in proportion to its size: cJSON parses in one pass, each key is matched
   against the short list of names of its section (a constant per key), and the check
   that no key of an object appears twice sorts the object's keys (n log n comparisons of
   names, counted for the tests) where it compared every pair (700,000 keys: 20 minutes).
   cJSON itself refuses nesting deeper than CJSON_NESTING_LIMIT (1000) as malformed.
*/
#ifndef ZERO3_CONFIG_JSON_H
#define ZERO3_CONFIG_JSON_H

#include <stddef.h>        // size_t
#include <cjson/cJSON.h>   // cJSON_ParseWithOpts and the tree walk
typedef struct ZeroConfig ZeroConfig;  // zero_config_load_json's (zero3/config.h)

#ifdef __cplusplus
extern "C" {
#endif

// the largest config file read: a DeepSpeed config is a few kilobytes
#define ZERO_CONFIG_MAX_BYTES ((size_t)1 << 20)

// one key of an object, for the sort that finds a repeated one; compares counts every
// comparison of two names (the tests hold it to n log n)
typedef struct { const cJSON* item; size_t index; size_t* compares; } ZeroJsonKey;

// The first key of obj (in the file's order) that appears again later in it, in *repeat
// (NULL when none), found by sorting the keys: n log n comparisons of names, added to
// *compares. Returns 0, or -1 when out of memory.
int zero_json_find_repeat(const cJSON* obj, const cJSON** repeat, size_t* compares);

// Loads a DeepSpeed-style JSON file over c. Keys we do not read are not errors: each adds
// the line "warning: --ds-config FILE: unknown key 'a.b.c' ignored" to `warnings` (a NUL-
// terminated string, appended to; NULL for none). Returns 0, or -1 with zero_errmsg() naming
// the file and the key (or the line of a JSON syntax error); c is then unchanged, though
// warnings found before the error stay in the buffer.
int zero_config_load_json(ZeroConfig* c, const char* path, char* warnings, size_t warnings_len);

#ifdef __cplusplus
}
#endif

#endif // ZERO3_CONFIG_JSON_H
