/*
 The per-op timer of the training step (--profile-ops N): where the step's time goes, op by
 op, on any machine (no nsys needed), and how far each op is from what its bytes and FLOPs
 allow. The trainers time their ops (train_gpt2_zero3.cu with CUDA events on the compute
 stream, train_gpt2_zero3.c with the host's clock) and hand this module spans; it sums
 them over the profiled steps and writes:
   - a table (op, calls a step, ms a step, share of the step, and from the op's shapes its
     FLOPs and bytes a call, the floor they imply at the device's peak rates, and the op's
     time over that floor), with a row for the rest of the step (no op running: launch
     gaps, the host, the engine's waits outside any op), so the shares sum to the step;
   - the same rows as main.jsonl lines ({"step", "op", ...}) and in --report's "ops";
   - the spans as a timeline in the Chrome trace format (one track per stream and host
     thread), which Perfetto and chrome://tracing open.
 An op's name says what it computes ("qkv", "residual+ln2", "attention_bwd"); its cost
 comes from gpt2_op_cost. Nothing here costs anything while the timer is off: the trainers
 check for a profile before they record anything.
*/
#ifndef LLMC_PROFILE_H
#define LLMC_PROFILE_H

#include <stdio.h>          // FILE
#include "llmc/gpt2.h"      // GPT2Config: the ops' shapes

#ifdef __cplusplus
extern "C" {
#endif

// the timeline's tracks (the Chrome trace's threads): the host's step, the model's ops (the
// GPU's compute stream, or the CPU trainer's ops on the host), and the training engine's
// movers (the trainer hands them over: its collectives, its copies, its work on the host).
// A mover's span is on the timeline and in a table of its own; it overlaps the ops and has
// no share of the step.
enum { OP_TRACK_HOST, OP_TRACK_COMPUTE, OP_TRACK_COLLECTIVES, OP_TRACK_COPIES, OP_TRACK_ENGINE_HOST, OP_TRACK_COUNT };

// Times one op of a trainer's model code: `OP(m, "qkv", l, matmul_forward(...));` runs the
// statement between the trainer's op_begin(m, name, layer) and op_end(m), which record
// nothing while --profile-ops is off (a pointer's test)
#define OP(m, name, layer, ...) do { op_begin((m), (name), (layer)); __VA_ARGS__; op_end(m); } while (0)

typedef struct OpProfile OpProfile;

// One op's cost for the model c at B x T with elem bytes per activation and parameter (2:
// bf16, 4: fp32), per call: the FLOPs it must do and the fewest bytes it must move (each
// input read once, each output written once; a gradient that accumulates is read and
// written). attention_flash: the flash path (causal FLOPs) or the cuBLAS one (the full T x T
// products and their matrices). 0, or -1 for a name it does not know.
int gpt2_op_cost(const GPT2Config* c, int B, int T, int elem, int attention_flash, const char* name, double* flops,
                 double* bytes);

// A profile for the model c at B x T (elem, attention_flash as gpt2_op_cost takes them), on a
// device of peak_flops FLOP/s and peak_bytes bytes/s (0: unknown, no floor); compute names
// the ops' track. NULL when out of memory.
OpProfile* op_profile_new(const GPT2Config* c, int B, int T, int elem, int attention_flash, double peak_flops,
                          double peak_bytes, const char* compute);

void op_profile_free(OpProfile* p);

// one op's span in the step now being timed: from t0 to t1 ms after the step's start, on
// the track; layer -1 outside the blocks (a mover's: its unit, -1 for none). The name must
// outlive the profile (a literal).
void op_profile_span(OpProfile* p, const char* name, int layer, int track, double t0_ms, double t1_ms);

// the step is over: its spans are added to the sums; step_ms its wall time, start_ms its
// start on the host's clock (the timeline's)
void op_profile_step(OpProfile* p, int step, double start_ms, double step_ms);

// the steps profiled so far
int op_profile_steps(const OpProfile* p);

// One row of the table: an op summed over its calls (every layer) and the profiled steps,
// per step. name "(no op)": the step's time outside every op of the compute track.
typedef struct {
    const char* name;
    double calls, ms, share;      // a step's calls, milliseconds and share of the step
    double flops, bytes;          // one call's (0 for the (no op) row); known 0 when unknown
    int known;                    // gpt2_op_cost knows the op
    double floor_ms;              // one call's floor at the peak rates, 0 when none is known
} OpRow;

// the rows, the longest first, the (no op) row last; at most max; returns how many
int op_profile_rows(const OpProfile* p, OpRow* rows, int max);

// the table, to fp; then, when the engine's movers were timed, theirs (name, track, calls
// and ms a step)
void op_profile_print(const OpProfile* p, FILE* fp);

// The Chrome trace of every profiled span (ts and dur in microseconds from the first
// profiled step's start; tracks named by OP_TRACK_*): written whole to path or not at all.
// 0, or -1 with llmc_error.
int op_profile_write_trace(const OpProfile* p, const char* path);

#ifdef __cplusplus
}
#endif

#endif // LLMC_PROFILE_H
