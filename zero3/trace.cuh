/*
 The device engine's movers on a timeline (zero3/zero.h's zero_trace_begin/end, for a
 trainer's --profile-ops): while a trace is on, each collective, copy and CPU Adam of the
 engine is one span on the track of where it ran. A span on a stream is a pair of timed
 events recorded around its work, read at the trace's end against an event recorded on the
 compute stream at its start (the trainer has just waited for that stream, so the GPU's
 clock and the host's line up as the per-op timer's do); a span on the host (the CPU Adam,
 an NVMe read waited for) is the host's clock, from the same start. Off, every call returns
 at its first test: the engine pays nothing. Events come from a pool that grows as a trace
 needs, made with timing (the engine's own events are not).
*/
#ifndef ZERO3_TRACE_CUH
#define ZERO3_TRACE_CUH

#include <stdlib.h>              // realloc, free
#include <string.h>              // memset
#include "zero3/util.h"          // zero_error
#include "zero3/cuda_util.cuh"   // zero_cuda
#include "zero3/zero.h"          // ZeroTraceSpan, ZERO_TRACK_*

typedef struct {
    const char* what;
    int unit, track;
    int ev;                      // its events' index (2 ev, 2 ev + 1) in the pool; -1: a host span
    double t0, t1;               // a host span: the host's clock (ms)
} ZeroTraceRec;

typedef struct {
    int on;
    double host_start;           // the host's clock at the trace's start (ms)
    cudaEvent_t start;           // recorded on the compute stream then
    cudaEvent_t* ev;             // (2 ev_cap) the pool: a stream span's start and end
    int nev, ev_cap;
    ZeroTraceRec* rec;           // (cap) this trace's spans so far
    int n, cap;
    ZeroTraceSpan* out;          // (cap) zero_trace_end's answer
} ZeroTrace;

// a record for the next span, the pool grown when it needs to be; NULL when out of memory
static ZeroTraceRec* zero_trace_add(ZeroTrace* tr) {
    if (tr->n == tr->cap) {
        int cap = tr->cap > 0 ? 2 * tr->cap : 256;
        ZeroTraceRec* r = (ZeroTraceRec*)realloc(tr->rec, (size_t)cap * sizeof(ZeroTraceRec));
        if (r != NULL) { tr->rec = r; }
        ZeroTraceSpan* o = (ZeroTraceSpan*)realloc(tr->out, (size_t)cap * sizeof(ZeroTraceSpan));
        if (o != NULL) { tr->out = o; }
        if (r == NULL || o == NULL) { zero_error("zero trace: out of memory for %d spans", cap); return NULL; }
        tr->cap = cap;
    }
    return &tr->rec[tr->n++];
}

// starts a span of work about to be issued on stream s; *id: its handle for
// zero_trace_close, -1 while off (then zero_trace_close does nothing)
static int zero_trace_open(ZeroTrace* tr, cudaStream_t s, int* id) {
    *id = -1;
    if (!tr->on) { return 0; }
    if (tr->nev == tr->ev_cap) {
        int cap = tr->ev_cap > 0 ? 2 * tr->ev_cap : 128;
        cudaEvent_t* e = (cudaEvent_t*)realloc(tr->ev, 2 * (size_t)cap * sizeof(cudaEvent_t));
        if (e == NULL) { return zero_error("zero trace: out of memory for %d events", 2 * cap); }
        tr->ev = e;
        for (int i = 2 * tr->ev_cap; i < 2 * cap; i++) {
            if (zero_cuda(cudaEventCreate(&tr->ev[i]), "cudaEventCreate") != 0) {
                while (--i >= 2 * tr->ev_cap) { cudaEventDestroy(tr->ev[i]); }  // (the pool as it was)
                return -1;
            }
        }
        tr->ev_cap = cap;
    }
    if (zero_cuda(cudaEventRecord(tr->ev[2 * tr->nev], s), "cudaEventRecord") != 0) { return -1; }
    *id = tr->nev++;
    return 0;
}

// ends span id (zero_trace_open's) after the work issued on s since: what it was, its unit
// (-1: none) and its track
static int zero_trace_close(ZeroTrace* tr, int id, cudaStream_t s, const char* what, int unit, int track) {
    if (id < 0) { return 0; }
    if (zero_cuda(cudaEventRecord(tr->ev[2 * id + 1], s), "cudaEventRecord") != 0) { return -1; }
    ZeroTraceRec* r = zero_trace_add(tr);
    if (r == NULL) { return -1; }
    *r = (ZeroTraceRec){what, unit, track, id, 0.0, 0.0};
    return 0;
}

// a span on the host, t0 to t1 on the host's clock (ms); a part before the trace's start is cut
static int zero_trace_host(ZeroTrace* tr, const char* what, int unit, int track, double t0, double t1) {
    if (!tr->on || t1 <= tr->host_start) { return 0; }
    ZeroTraceRec* r = zero_trace_add(tr);
    if (r == NULL) { return -1; }
    *r = (ZeroTraceRec){what, unit, track, -1, t0 > tr->host_start ? t0 : tr->host_start, t1};
    return 0;
}

// the trace on, from now (host_start: the host's clock now, after the compute stream's work)
static int zero_trace_start(ZeroTrace* tr, cudaStream_t compute, double host_start) {
    if (tr->start == NULL && zero_cuda(cudaEventCreate(&tr->start), "cudaEventCreate") != 0) { return -1; }
    if (zero_cuda(cudaEventRecord(tr->start, compute), "cudaEventRecord") != 0) { return -1; }
    tr->on = 1;
    tr->host_start = host_start;
    tr->n = tr->nev = 0;
    return 0;
}

// the trace off: waits for its spans' work and answers them, ms from the start (valid
// until the next start)
static int zero_trace_stop(ZeroTrace* tr, const ZeroTraceSpan** spans, int* n) {
    *spans = tr->out;
    *n = 0;
    if (!tr->on) { return 0; }
    tr->on = 0;
    for (int i = 0; i < tr->n; i++) {
        const ZeroTraceRec* r = &tr->rec[i];
        double t0 = r->t0 - tr->host_start, t1 = r->t1 - tr->host_start;
        if (r->ev >= 0) {
            float a = 0.0f, b = 0.0f;
            if (zero_cuda(cudaEventSynchronize(tr->ev[2 * r->ev + 1]), "cudaEventSynchronize") != 0 ||
                zero_cuda(cudaEventElapsedTime(&a, tr->start, tr->ev[2 * r->ev]), "cudaEventElapsedTime") != 0 ||
                zero_cuda(cudaEventElapsedTime(&b, tr->start, tr->ev[2 * r->ev + 1]), "cudaEventElapsedTime") != 0) {
                return -1;
            }
            t0 = a;
            t1 = b;
        }
        tr->out[i] = (ZeroTraceSpan){r->what, r->unit, r->track, t0, t1};
    }
    *n = tr->n;
    return 0;
}

static void zero_trace_free(ZeroTrace* tr) {
    for (int i = 0; i < 2 * tr->ev_cap; i++) { cudaEventDestroy(tr->ev[i]); }
    if (tr->start != NULL) { cudaEventDestroy(tr->start); }
    free(tr->ev); free(tr->rec); free(tr->out);
    memset(tr, 0, sizeof(*tr));
}

#endif // ZERO3_TRACE_CUH
