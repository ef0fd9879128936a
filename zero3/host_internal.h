// The host engine's helpers that its files (zero3/host*.c) share; not part of its interface.
#ifndef ZERO3_HOST_INTERNAL_H
#define ZERO3_HOST_INTERNAL_H

#include "zero3/host.h"  // ZeroHost
#include <stdlib.h>            // aligned_alloc, free
#include <string.h>            // memset, memcpy
#include <math.h>              // isfinite: a non-finite norm skips the step
#include "zero3/util.h"        // zero_error
#include "zero3/adamw.h"       // grad_norm_squared, adamw_grad_scale
#include "zero3/groups.h"      // zero_groups_split: the shard group, replicas and hpZ groups
#include "zero3/engine.h"      // ZeroOps, zero_create: what an engine implements
#include "zero3/checkpoint.h"  // ZeroStateHeader: this engine's part of a checkpoint
#include "zero3/cpu_adam.h"    // cpu_adam_step: SIMD AdamW over host shards; cpu_adam_grad_add

// zero3/host.c
void* zero_alloc(ZeroHost* e, int kind, size_t elems);

// how many read-ahead buffers of the parameters on NVMe (each zero_swap_param_span_max's
// bytes): offload_param.buffer_count, at most one per unit on NVMe; 0 without any
// (param_file_bytes: zero_param_placement's)
int zero_ahead_count(const ZeroPlan* p, const int* on_host, const ZeroConfig* cfg, size_t param_file_bytes);

// A working-set buffer (ZERO_MEM_BUFFERS): one of the same size from the pool if there
// is one, else a new allocation. zeroed: 0 for buffers that are overwritten whole (a
// gather, a reduce-scatter's receive), 1 for accumulators. Pooled buffers stay counted
// as allocated, so the peak is what the process really holds.
void* zero_buf_get(ZeroHost* e, size_t elems, int zeroed);

void zero_buf_put(ZeroHost* e, void* p, size_t elems);

// Whether a configuration's reductions (stage 0's all-reduces, the reduce-scatters of
// stages 1-3) are staged through a buffer of the pool: zero3/comm.h's [Note: reduce-scatter
// in pieces] (qgZ's stage their own). The engine's size is zero_comm_rs_stage's of the
// unit's shard, --estimate's zero_rs_stage_elems'.
int zero_red_staged(const ZeroConfig* cfg);

// completes every reduction in flight, oldest first (stages 2-3: each is added into the
// accumulator, in memory or in the swap file)
int zero_reduce_drain(ZeroHost* e);


// zero3/host_store.c
// the parameter shard that AdamW updates, for unit u: in the full buffer (stages 1-2)
// or the shard buffer (stage 3; NULL: in the swap file)
float* zero_param_shard(ZeroHost* e, int u);

// copies the first n elements (at most the shard) of unit u's parameter shard into dst,
// from the host or from NVMe
int zero_param_shard_get(ZeroHost* e, int u, float* dst, size_t n);

// stores src as unit u's parameter shard (init, checkpoints)
int zero_param_shard_put(ZeroHost* e, int u, const float* src);

// stage 3: the always-gathered units get their updated shards from every rank
int zero_refresh_persistent(ZeroHost* e);

// largest parameter shard of any unit, in elements
size_t zero_max_shard(const ZeroHost* e);

// The master region from the parameter shards (init, load): unit by unit through one
// shard-sized buffer (zero_swap_master_*); where P is the parameter store, only the
// units held in memory.
int zero_nvme_write_master(ZeroHost* e);


// zero3/host_init.c
// Stage 3: which units' parameter shards stay on the host (on_host[u] = 1) and the rest
// in the swap file: with --offload-param nvme, units stay while max_in_cpu elements allow,
// the schedule's persistent ones first (zero_swap_placement). Returns the host's elements;
// *file_bytes gets the swap file's parameter region (each shard 4 KiB-aligned).
size_t zero_param_placement(const ZeroPlan* p, const ZeroSchedule* sched, const ZeroConfig* cfg, int* on_host,
                                   size_t* file_bytes);

// what the host engine asks of the swap file (zero3/swap.h): the optimizer's regions with
// the optimizer on NVMe, the parameter region for the units on_host leaves out (on_host
// NULL: none), fp32 parameters
ZeroSwapOpen zero_host_swap_open(const ZeroPlan* p, const ZeroConfig* cfg, int rank, const ZeroSegment* segs, int nsegs,
                                 const int* on_host);


#endif // ZERO3_HOST_INTERNAL_H
