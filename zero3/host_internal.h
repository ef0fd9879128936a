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
#include "zero3/cpu_adam.h"    // cpu_adam_step: SIMD AdamW over host shards

// zero3/host.c
void* zero_alloc(ZeroHost* e, int kind, size_t elems);

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
// or the shard buffer (stage 3)
float* zero_param_shard(ZeroHost* e, int u);

size_t zero_align4k(size_t bytes);

// copies the first n elements (at most the shard) of unit u's parameter shard into dst,
// from the host or from NVMe
int zero_param_shard_get(ZeroHost* e, int u, float* dst, size_t n);

// stores src as unit u's parameter shard (init, checkpoints)
int zero_param_shard_put(ZeroHost* e, int u, const float* src);

// stage 3: the always-gathered units get their updated shards from every rank
int zero_refresh_persistent(ZeroHost* e);

// the gradient staging buffer's write, if one is in flight, is done (it is the only
// asynchronous request outside the step: the parameter reads wait for themselves)
int zero_grad_nvme_settle(ZeroHost* e);

// Adds unit u's reduced gradient shard (got) into the swap file's gradient region. The
// shard's bytes [lo, hi) rarely fall on 4 KiB blocks, and O_DIRECT moves whole blocks,
// so the span written is [lo, hi) widened to blocks; the neighbours' parts of its first
// and last block are read first and written back as they were. The first add of a step
// starts from zero (0 + got, as the in-memory accumulator does: -0 becomes +0); later
// micro-steps read the span, add and write it back. On the last micro-step the sum's
// squared norm is added to grad_sumsq for the step's clipping. One write is left in
// flight, overlapping the backward of the next units; the next add waits for it first,
// since two spans may share a block.
int zero_grad_nvme_add(ZeroHost* e, int u, const float* got);

// Streams a region of the swap file to a checkpoint (to_swap 0) or from one into the
// file (to_swap 1; fp NULL: zeroes), group by group through buffer 0: checkpoints and
// init hold one group, never the region.
int zero_nvme_stream(ZeroHost* e, int region, FILE* fp, int to_swap);

// largest parameter shard of any unit, in elements
size_t zero_max_shard(const ZeroHost* e);

// The master region from the parameter shards (init, load): unit by unit through one
// shard-sized buffer into group buffer 0, each group written once it is full.
int zero_nvme_write_master(ZeroHost* e);


// zero3/host_init.c
// Stage 3: which units' parameter shards stay on the host (on_host[u] = 1) and the rest
// in the swap file: with --offload-param nvme, units stay while max_in_cpu elements allow,
// the schedule's persistent ones first. Returns the host's elements; *file_bytes gets the
// swap file's parameter region (each shard 4 KiB-aligned).
size_t zero_param_placement(const ZeroPlan* p, const ZeroSchedule* sched, const ZeroConfig* cfg, int* on_host,
                                   size_t* file_bytes);

// the NVMe step's sub-group: sub_group_size elements in whole 4 KiB blocks, at most the
// (4 KiB-padded) shard and the 1 GiB one registered buffer may hold
size_t zero_nvme_group_size(const ZeroConfig* cfg, size_t shard_total);

// sets of group buffers (p, m, v, g each): buffer_count, at least 2 (one read ahead while one updates)
int zero_nvme_buffer_sets(const ZeroConfig* cfg);

// a shard's span in the gradient region: its bytes widened to 4 KiB blocks at both ends
size_t zero_grad_stage_bytes(size_t max_shard);


#endif // ZERO3_HOST_INTERNAL_H
