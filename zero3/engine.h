/*
 What an engine implements behind zero3/zero.h: its table of calls on its own state, and
 zero_create, which wraps the two in a Zero. Only the engines (zero3/host.c,
 zero3/device.cuh, zero3/staged.cuh) and white-box tests include this; a trainer sees
 zero3/zero.h alone.
*/
#ifndef ZERO3_ENGINE_H
#define ZERO3_ENGINE_H

#include <stdio.h>          // FILE: checkpoints
#include "zero3/zero.h"     // Zero, ZeroInit, ZeroStep, ZeroStats

#ifdef __cplusplus
extern "C" {
#endif

// An engine: zero3/zero.h's calls, on its own state (impl).
typedef struct {
    const char* name;  // the layout of its state: "host" (the host engine, staged or not) or "device"
    int (*begin)(void* impl, int pass, int last_micro);
    int (*fetch)(void* impl, int unit, void** params);
    int (*release)(void* impl, int unit);
    int (*grad)(void* impl, int unit, void** grad);
    int (*reduce)(void* impl, int unit);
    int (*end)(void* impl);
    int (*step)(void* impl, const ZeroStep* step);
    int (*flush)(void* impl);                    // work still running for an earlier step (--dpu's update) is applied
    int (*stats)(void* impl, ZeroStats* out);    // may wait for the GPU: between steps
    int (*save)(void* impl, FILE* fp);           // this rank's state (zero3/checkpoint.h)
    int (*load)(void* impl, FILE* fp);
    int (*state_shard)(void* impl, int what, int unit, size_t* begin, size_t* n, float* out);
                                                 // this rank's range of unit's fp32 master: its unit-local
                                                 // start and real elements (no padding), copied to out
                                                 // (room for *n) unless out is NULL
    int (*state_write)(void* impl, int what, int unit, size_t begin, size_t n, const float* in);
                                                 // unit-local [begin, begin + n) of a state from in: the part
                                                 // this rank holds (zero_tensor_set)
    int (*state_commit)(void* impl, int what, int unit);
                                                 // after every rank's write: what is made from the state (the
                                                 // compute copy, gathered units) brought up to date; collective
    int (*empty_cache)(void* impl, double* freed);
                                                 // the gathered and persistent buffers and the pools freed
                                                 // (*freed: bytes), gathered again when next needed; collective
    int (*trace_begin)(void* impl, double host_start_ms);   // the movers' timeline (zero_trace_begin); NULL: none
    int (*trace_end)(void* impl, const ZeroTraceSpan** spans, int* n);
    void (*free)(void* impl);
} ZeroOps;

// Builds an engine in *z: init (the engine's) on impl, a zeroed allocation of the engine's
// state; on failure the engine's free undoes what init did and *z is NULL.
int zero_create(Zero** z, const ZeroOps* ops, void* impl, int (*init)(void* impl, const ZeroInit* in),
                const ZeroInit* in);

// the engine's state behind z (white-box tests read it)
void* zero_engine_state(const Zero* z);

#ifdef __cplusplus
}
#endif

#endif // ZERO3_ENGINE_H
