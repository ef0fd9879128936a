/*
 The NVMe tier of ZeRO-Infinity, written once for every engine: this rank's swap file
 (zero3/nvme.h: DIR/zero3_rank%05d.swp, one per rank) with
   - the optimizer's four regions, each one fp32 array of the shard buffer's layout
     (plan->shard_total elements padded to 4 KiB): P the master, M and V AdamW's
     moments, G the reduced gradient shards; and/or
   - a parameter region: the shards of the units not kept in host memory, each
     4 KiB-aligned, in units of `param_elem_bytes` (the host engine's fp32 shards, 4; the
     device engine's compute copy, 2 in the bf16 build), in unit order after the
     optimizer's regions; or, where the compute copy is the fp32 master itself
     (`param_in_master`: the host engine with both on NVMe), no region of its own: a
     unit's shard is read from P, where it lies at its shard-buffer offset (the
     [Note: the parameters in the master] in swap_param.c).
 It knows nothing of the engines: it is given a plan, the segments (a tensor's part of
 the shard buffer, with its weight decay), a few knobs and the rank, and says in bytes
 what it holds in host memory and on disk, for each engine to account its own way.

 What it does:
   init      the master written unit by unit into P (zero_swap_master_*), M and V zeroed
   backward  each unit's reduced gradient shard added into G as its reduction completes,
             through one staging buffer whose write overlaps the next units' backward
   step      sub-group by sub-group (sub_group_size elements, whole 4 KiB blocks) through
             buffer_count sets of buffers: group i+1 read and earlier groups written while
             group i is updated by the SIMD CPU Adam, which writes the compute copy where
             the engine says (a callback: its own memory, or this module's staging of a
             unit whose shard lives in the parameter region, or in the master: then a
             copy kept only for the unit's next reads)
   checkpoints  P, M, V streamed a group at a time to or from a FILE*
   parameters   a unit's shard read or written synchronously, or read ahead into the
             caller's buffer and waited for later (prefetch)

 Requests on the one NvmeFile carry tags that say whose they are (the gradient's write,
 a unit's read ahead, a group of the step), so that waiting for one never loses the
 completion of another: each wait takes completions in whatever order they come and
 records them for their owner.

 One thread at a time (the engine's main thread). Errors: 0 / -1 and one zero_error
 line, as everywhere in zero3/. No CUDA here: the device engine includes it from C++.
*/
#ifndef ZERO3_SWAP_H
#define ZERO3_SWAP_H

#include "zero3/nvme.h"      // first: _GNU_SOURCE; NvmeFile, NVME_ALIGN
#include "zero3/plan.h"      // ZeroPlan: units, shards, shard-buffer offsets
#include "zero3/cpu_adam.h"  // CpuAdamParams, CpuAdamDtype: the step's update
#include <stddef.h>          // size_t
#include <stdio.h>           // FILE: checkpoint streams

#ifdef __cplusplus
extern "C" {
#endif

// A tensor's part of this rank's shard, in shard-buffer offsets [begin, end): what AdamW
// walks (weight decay is per tensor). unit_lo: where it starts in its unit's shard.
typedef struct { size_t begin, end; int unit; size_t unit_lo; int decay; } ZeroSegment;

// the optimizer's regions, in file order
enum { ZERO_SWAP_P, ZERO_SWAP_M, ZERO_SWAP_V, ZERO_SWAP_G, ZERO_SWAP_REGIONS };

// What to open. plan and segs must outlive the ZeroSwap (they are not copied).
typedef struct {
    const ZeroPlan* plan;         // this rank's view of the units
    const char* dir;              // nvme_path
    int rank;                     // names the file
    int optimizer;                // 1: the P, M, V, G regions
    const ZeroSegment* segs;      // (nsegs) the optimizer's walk, in shard-buffer order
    int nsegs;
    long long sub_group_size;     // elements of a step group (rounded, see zero_swap_group_size)
    int buffer_count;             // sets of step buffers (at least 2)
    int pipeline_read;            // 1: group i+1 is read while group i is updated; 0: each
                                  // group is read when its update needs it
    int pipeline_write;           // 1: group i's writes overlap the later groups' updates;
                                  // 0: each group's writes are waited for before the next update
    const int* on_host;           // (num_units) 0: the unit's shard lives in the parameter
                                  // region; NULL: no parameter region
    size_t param_elem_bytes;      // bytes of a parameter element: 4 (fp32) or 2 (bf16)
    int param_in_master;          // 1: the compute copy is the fp32 master (needs optimizer
                                  // and param_elem_bytes 4): the units on NVMe are read
                                  // from P, and the step writes no second copy of them
} ZeroSwapOpen;

// bytes moved and time blocked, cumulative from open
typedef struct {
    double read_bytes, write_bytes;  // requests submitted (whole 4 KiB blocks)
    double out_bytes;                // written by the steps through `out` (the compute copy)
    double stage_hit_bytes;          // parameter reads served by a staging buffer, not the disk
    double wait_ms;                  // blocked on the file, anywhere
    double step_ms;                  // inside the step's calls (zero_swap_step_begin/through)
    double step_wait_ms;             // of which blocked on the file
} ZeroSwapCounters;

// Where unit u's updated shard of the compute copy goes (elements of out_dtype, the
// unit's whole shard): the engine's memory, or zero_swap_param_out's staging. NULL fails
// the step (with a zero_error line).
typedef void* (*ZeroSwapOut)(void* ctx, int unit);
// after the last group: the engine writes back what it staged (0 / -1)
typedef int (*ZeroSwapFlush)(void* ctx);

// a step in progress (zero_swap_step_begin): its arguments and where it is
typedef struct {
    int on;                 // begun, not yet through every group
    int ngroups;
    int* order;             // (ngroups) the groups in the order they are updated
    unsigned char* done;    // (ngroups) updated, its writes started
    int pos;                // the next position of the order to update
    int rd;                 // the next position of the order to read
    CpuAdamParams hp;
    float weight_decay;
    ZeroSwapOut out;
    CpuAdamDtype out_dtype;
    ZeroSwapFlush flush;
    void* ctx;
} ZeroSwapRun;

typedef struct {
    NvmeFile nvme;
    int is_open;
    const ZeroPlan* plan;
    const ZeroSegment* segs;
    int nsegs;
    size_t host_bytes, file_bytes;   // what open allocated: host buffers and checksums; the file
    // the optimizer's regions
    int optimizer;
    size_t region;          // bytes of each region, a multiple of 4 KiB
    size_t group;           // elements of a step group
    int nbufs;              // sets of step buffers, ZERO_SWAP_REGIONS buffers each
    int pipeline_read, pipeline_write;  // ZeroSwapOpen's
    void** bufs;
    int* left;              // during a step: requests not yet done, 2 per group (read, write)
    int* slot;              // during a step: the buffer set each group was read into
    ZeroSwapRun run;
    int step_left;          // during a step: of every group
    int master_group, master_next;   // the master's writer: the group being filled, the next unit
    // the gradient region: one unit's span staged, its write in flight until the next add
    char* grad_stage;
    size_t grad_stage_bytes;
    int grad_pending;
    unsigned char* grad_in_file;     // (num_units) the shard in G is this step's sum so far
    size_t grad_last;       // the G offset of the block at the staging's start, as last written ((size_t)-1: none)
    double grad_sumsq;
    // the parameter region
    size_t param_elem;
    size_t* param_off;      // (num_units) byte offset of a unit's shard, or (size_t)-1 on the host
    char* param_stage[2];   // one shard each, 4 KiB-aligned: the step fills one while the
                            // other's write is in flight
    size_t param_stage_bytes;
    int stage_cur;          // the one being filled
    int staged_unit;        // the unit whose shard param_stage[stage_cur] holds for writing, -1 if none
    int stage_writing[2];   // a write from param_stage[i] is in flight
    int stage_holds[2];     // the unit whose current shard param_stage[i] holds (put from it
                            // or read into it), -1 if none: its reads need no disk
    unsigned char* reading; // (num_units) 1: a read ahead is in flight, 2: done, not yet waited for
    unsigned char* staged_once;  // (num_units) staged before by the step in progress
    int in_master;          // ZeroSwapOpen's param_in_master: param_off[u] is u's byte offset in P
    int stage_part;         // in_master: the unit being staged was staged before by this step,
                            // so its staging holds only part of it and serves no reads
    ZeroSwapCounters c;
} ZeroSwap;

// ----------------------------------------------------------------------------
// sizes

// 4 KiB-rounded bytes: every request's offset, size and buffer are multiples of it
size_t zero_swap_align(size_t bytes);

// Which units' parameter shards stay on the host (on_host[u] = 1, the rest go to NVMe):
// the persistent ones (persistent may be NULL: none), then the others in order while
// max_in_cpu elements allow (1e300: all). Returns the host's elements; *file_bytes gets
// the bytes of the shards on NVMe, each 4 KiB-aligned, elem_bytes each (0: none): the
// parameter region's, unless the parameters are in the master.
size_t zero_swap_placement(const ZeroPlan* p, const int* persistent, double max_in_cpu, size_t elem_bytes,
                           int* on_host, size_t* file_bytes);

// a step group: sub_group_size elements in whole 4 KiB blocks, at most the (1024-padded)
// shard_total and the 1 GiB a registered buffer may hold
size_t zero_swap_group_size(long long sub_group_size, size_t shard_total);

// the most bytes a read ahead of one of o's units on NVMe fills: what each of the
// caller's read-ahead buffers needs (0: no unit on NVMe)
size_t zero_swap_param_span_max(const ZeroSwapOpen* o);

// What zero_swap_open would allocate for o, without opening: *host_bytes the host buffers
// (step buffers, gradient and parameter staging, the blocks' checksums), *file_bytes the
// swap file. What --estimate reports.
void zero_swap_size(const ZeroSwapOpen* o, size_t* host_bytes, size_t* file_bytes);

// ----------------------------------------------------------------------------
// open, close

// Opens this rank's swap file with the regions o asks for (at least one) and allocates
// their buffers; s->host_bytes and s->file_bytes say how much. The regions hold zeros.
// On failure nothing stays open or allocated.
int zero_swap_open(ZeroSwap* s, const ZeroSwapOpen* o);

// Waits for every request still in flight, removes the file, frees everything. Harmless
// on a zeroed or closed ZeroSwap.
void zero_swap_close(ZeroSwap* s);

// the counters, wait_ms taken from the file now
ZeroSwapCounters zero_swap_counters(const ZeroSwap* s);

// ----------------------------------------------------------------------------
// the optimizer's regions: the master

// Starts writing the whole master into P: then zero_swap_master_unit for units in
// increasing order (a unit left out is zeros), then zero_swap_master_end. Each group is
// written once it is complete, so only one group is ever held.
int zero_swap_master_begin(ZeroSwap* s);

// Unit u's fp32 master shard (plan->units[u].shard elements, padding included) into P.
// u must be greater than the last unit given.
int zero_swap_master_unit(ZeroSwap* s, int u, const float* shard);

// writes the groups not yet written
int zero_swap_master_end(ZeroSwap* s);

// Elements [begin, begin + n) of unit u's fp32 shard of region P (the master), M, V or G
// (the step's sum so far; zeros where none was added) into out (a checkpoint's model
// file, zero_state_shard). Settles the gradient's write (it shares the staging).
int zero_swap_state_read(ZeroSwap* s, int region, int u, size_t begin, size_t n, float* out);

// The same range written from in (zero_tensor_set); G only where this step's sum is in the
// file, its squared norm (zero_swap_grad_sumsq) mended by the change. Of P, M and V only
// the first and last 4 KiB blocks, which the range may share, are read first.
int zero_swap_state_write(ZeroSwap* s, int region, int u, size_t begin, size_t n, const float* in);

// ----------------------------------------------------------------------------
// the optimizer's regions: the gradient

// Adds unit u's reduced shard `got` (plan->units[u].shard elements, fp32, or bf16 bits
// widened when got_bf16) into G. The
// first add of a step starts from zero (0 + got: -0 becomes +0, as an accumulator in
// memory does) and reads at most the 4 KiB blocks it shares with units already added
// this step (none when the units come in decreasing order, as in a backward); later ones
// read, add, write back. last_micro: the sum's squared norm is
// added to the step's (zero_swap_grad_sumsq). The write is left in flight; the next add,
// a read of G or zero_swap_grad_settle waits for it.
int zero_swap_grad_add(ZeroSwap* s, int u, const void* got, int got_bf16, int last_micro);

// waits for the gradient's write in flight, if any
int zero_swap_grad_settle(ZeroSwap* s);

// the squared norm of this step's gradient shards, summed as they were added
double zero_swap_grad_sumsq(const ZeroSwap* s);

// A new step: the next add of each unit overwrites G, the sum of squares is 0 (after the
// update, or a skipped step). Moves no bytes.
void zero_swap_grad_clear(ZeroSwap* s);

// ----------------------------------------------------------------------------
// the optimizer step

// AdamW over every segment, sub-group by sub-group: P, M, V and G of group i+1 read
// (pipeline_read) and P, M, V of earlier groups written (pipeline_write) while group i is
// updated (buffer_count sets, a set reused once its writes are done); without them each
// group's reads are waited for, and its writes, around its update (DeepSpeed's meaning). hp->weight_decay is set per segment: weight_decay
// where the segment decays, 0 elsewhere; hp's other fields are the caller's. The updated
// parameters go to out(ctx, unit) + the segment's place, as out_dtype (CPU_ADAM_FP32 or
// CPU_ADAM_BF16), and flush(ctx) runs once every group is written. The gradient's write
// is settled first; G is left as it is (zero_swap_grad_clear).
int zero_swap_step(ZeroSwap* s, CpuAdamParams* hp, float weight_decay, ZeroSwapOut out, CpuAdamDtype out_dtype,
                   ZeroSwapFlush flush, void* ctx);

// The same step, begun now and carried on by zero_swap_step_through, so that the update
// of the units the next forward needs last overlaps the compute of those it needs first:
// the groups holding a unit flagged in `first` (num_units; NULL: none) go first, then
// the rest in shard order. Only the first reads start here. Until the step is through,
// the optimizer's regions are the step's (no gradient add, checkpoint or master access),
// and the parameter region's reads of a unit wait for zero_swap_step_through of it.
int zero_swap_step_begin(ZeroSwap* s, const CpuAdamParams* hp, float weight_decay, ZeroSwapOut out,
                         CpuAdamDtype out_dtype, ZeroSwapFlush flush, void* ctx, const int* first);

// Carries the step on until unit u's shard is updated (and, staged for the parameter
// region, its write started), or with u = -1 to the end: every group written, flush run,
// the step over. The reads the buffers allow are left in flight either way. Nothing to do
// without a step in progress. On failure the step is over (a zero_error line).
int zero_swap_step_through(ZeroSwap* s, int u);

// whether a step is in progress
int zero_swap_step_pending(const ZeroSwap* s);

// ----------------------------------------------------------------------------
// checkpoints

// Region r (P, M or V) to fp (shard_total fp32 elements, no padding), a group at a time.
int zero_swap_region_save(ZeroSwap* s, int r, FILE* fp);

// Region r from fp, as saved; fp NULL: zeros. A group at a time.
int zero_swap_region_load(ZeroSwap* s, int r, FILE* fp);

// ----------------------------------------------------------------------------
// the parameter region

// whether unit u's shard lives in the parameter region
int zero_swap_param_on_nvme(const ZeroSwap* s, int u);

// bytes of unit u's shard in the region, 4 KiB-rounded (in the master: the 4 KiB blocks
// it touches): what a read ahead fills
size_t zero_swap_param_bytes(const ZeroSwap* s, int u);

// where u's shard starts in a buffer its read ahead filled: 0, or in the master its
// offset in its first 4 KiB block
size_t zero_swap_param_skew(const ZeroSwap* s, int u);

// The first n elements (at most the shard) of unit u's shard into dst (any memory),
// through a staging buffer (not the one a step in progress is filling). Waits for a read
// ahead of u first.
int zero_swap_param_read(ZeroSwap* s, int u, void* dst, size_t n);

// Unit u's whole shard from src into the region, or into P (init, checkpoints; not
// while a step is in progress). Waits for a read ahead of u first.
int zero_swap_param_write(ZeroSwap* s, int u, const void* src);

// Starts reading unit u's shard into buf (4 KiB-aligned, zero_swap_param_bytes(s, u)
// bytes, untouched by the caller until zero_swap_param_wait; the shard at
// buf + zero_swap_param_skew(s, u)). One read ahead per unit. From the master while a
// step is in progress, only once u is carried through (zero_swap_step_through).
int zero_swap_param_read_start(ZeroSwap* s, int u, void* buf);

// whether unit u's read ahead has completed (1), is in flight (0), without waiting; -1 on error
int zero_swap_param_read_test(ZeroSwap* s, int u);

// Waits for unit u's read ahead (started by zero_swap_param_read_start): buf holds the
// shard (from its skew) when it returns 0.
int zero_swap_param_wait(ZeroSwap* s, int u);

// The step's staging of a unit on NVMe (a ZeroSwapOut for such units): unit u's shard
// zeroed in a staging buffer (or, staged before by this step, whose order split it, read
// back from the region). The unit staged before it is written back asynchronously
// from the other buffer (two of them: the update of one unit overlaps the write of the
// previous one), whose earlier write is waited for first. In the master nothing is
// written back (the step's writes of P are the parameters'): the staging only serves
// the next reads of the unit, unless this step staged it before.
void* zero_swap_param_out(ZeroSwap* s, int u);

// writes the staged unit back, if any, and waits for every parameter write (a
// ZeroSwapFlush with ctx the ZeroSwap)
int zero_swap_param_flush(ZeroSwap* s);

#ifdef __cplusplus
}
#endif

#endif // ZERO3_SWAP_H
