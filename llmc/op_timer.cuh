/*
 The per-op timer's GPU side (--profile-ops, llmc/profile.h): CUDA events recorded on the
 compute stream before and after each op of a profiled step, read once the step is done
 and handed to the profile as spans from the step's start. The step's start is an event
 too, which the host waits for (op_timer_step_begin), so that the GPU's timeline and the
 host's line up: the profiled steps lose their overlap with the step before, which is why
 the trainer leaves them out of its speed figures. Events come from a pool that grows as a
 step needs (created with timing, unlike the engine's); nothing is recorded while off.
*/
#ifndef LLMC_OP_TIMER_CUH
#define LLMC_OP_TIMER_CUH

#include <stdlib.h>                // realloc, free
#include "llmc/cuda_common.cuh"    // cudaCheck
#include "llmc/profile.h"          // OpProfile, op_profile_span, OP_TRACK_COMPUTE
#include "zero3/util.h"            // zero_now_ms: the host's clock

typedef struct {
    OpProfile* prof;       // the step being timed; NULL: off
    cudaStream_t stream;   // the compute stream
    cudaEvent_t start;     // the step's start
    cudaEvent_t* ev;       // (2 cap) each op's start and end
    const char** name;     // (cap)
    int* layer;            // (cap)
    int n, cap, open;      // ops recorded this step; open: one has begun and not ended
} OpTimer;

static void op_timer_init(OpTimer* t, cudaStream_t s) {
    memset(t, 0, sizeof(*t));
    t->stream = s;
}

// the host waits for the GPU to reach the step's start; returns the host's clock then (ms)
static double op_timer_step_begin(OpTimer* t, OpProfile* p) {
    if (t->start == NULL) { cudaCheck(cudaEventCreate(&t->start)); }
    cudaCheck(cudaEventRecord(t->start, t->stream));
    cudaCheck(cudaEventSynchronize(t->start));
    t->prof = p;
    t->n = 0;
    return zero_now_ms();
}

static void op_timer_begin(OpTimer* t, const char* name, int layer) {
    if (t->prof == NULL) { return; }
    if (t->n == t->cap) {
        int cap = t->cap > 0 ? 2 * t->cap : 256;
        t->ev = (cudaEvent_t*)realloc(t->ev, 2 * (size_t)cap * sizeof(cudaEvent_t));
        t->name = (const char**)realloc(t->name, (size_t)cap * sizeof(const char*));
        t->layer = (int*)realloc(t->layer, (size_t)cap * sizeof(int));
        if (t->ev == NULL || t->name == NULL || t->layer == NULL) { fprintf(stderr, "error: out of memory for the op timer\n"); exit(EXIT_FAILURE); }
        for (int i = 2 * t->cap; i < 2 * cap; i++) { cudaCheck(cudaEventCreate(&t->ev[i])); }
        t->cap = cap;
    }
    t->name[t->n] = name;
    t->layer[t->n] = layer;
    cudaCheck(cudaEventRecord(t->ev[2 * t->n], t->stream));
    t->open = 1;
}

static void op_timer_end(OpTimer* t) {
    if (t->prof == NULL || !t->open) { return; }
    cudaCheck(cudaEventRecord(t->ev[2 * t->n + 1], t->stream));
    t->n++;
    t->open = 0;
}

// the step is over: the host waits for its last op, and each op's span (ms from the step's
// start) goes to the profile; the timer is off again
static void op_timer_step_end(OpTimer* t) {
    if (t->prof == NULL) { return; }
    if (t->n > 0) { cudaCheck(cudaEventSynchronize(t->ev[2 * t->n - 1])); }
    for (int i = 0; i < t->n; i++) {
        float a = 0.0f, b = 0.0f;
        cudaCheck(cudaEventElapsedTime(&a, t->start, t->ev[2 * i]));
        cudaCheck(cudaEventElapsedTime(&b, t->start, t->ev[2 * i + 1]));
        op_profile_span(t->prof, t->name[i], t->layer[i], OP_TRACK_COMPUTE, a, b);
    }
    t->prof = NULL;
    t->n = 0;
}

static void op_timer_free(OpTimer* t) {
    for (int i = 0; i < 2 * t->cap; i++) { cudaEventDestroy(t->ev[i]); }
    if (t->start != NULL) { cudaEventDestroy(t->start); }
    free(t->ev); free(t->name); free(t->layer);
    memset(t, 0, sizeof(*t));
}

#endif // LLMC_OP_TIMER_CUH
