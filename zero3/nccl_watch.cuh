/*
 The watchdog over NCCL (--collective-timeout): the GPU trainer's part of zero3/watchdog.h.

 NCCL's collectives run on the GPU: when a rank stops, the others' kernels wait for it for
 ever, and a host waiting for the GPU (cudaStreamSynchronize) with them. So the host never
 waits blocked here: zero_gpu_wait polls (cudaStreamQuery or cudaEventQuery, then
 sched_yield: NCCL's documented way, "Fault tolerance" in its user guide) and, while the
 GPU is not done,
   - asks every communicator for an asynchronous error (ncclCommGetAsyncError): one ends
     the wait with -1 and a message naming the collective; the caller stops the job, and
     the exit hooks (zero3/watch.h) abort the communicators (ncclCommAbort, which NCCL asks
     for after an error);
   - tells the watchdog which collective the GPU is running (zero_watch_running): the
     oldest one issued and not completed whose start has passed, with its unit and the step
     it was issued at. The watchdog's thread times it as it times the host's blocking
     collectives, finds who has not arrived the same way (the ranks' heartbeats, their
     state: this rank counts as inside a collective while it waits for one), and at the
     timeout ends the job after the exit hooks, here ncclCommAbort on every communicator,
     so that the kernels spinning on the GPU end.

 Every collective goes through zero3/nccl.cuh's calls, which bracket it with two events on
 the collective stream (zero_nccl_watch_begin / _end): its start, passed once the stream
 reaches it (the work before it, which it waits for, is done), and its end. A group of
 collectives (zero_nccl_group_start / _end) is one record, and calls inside a record (qgZ's
 hops inside its reduce-scatter) belong to it. Records wait in a ring until a wait finds
 them complete. Every communicator of the engine shares one collective stream, where the
 collectives run in the order issued: the oldest record not complete is the one running,
 or the next.

 One thread (the trainer's) issues and waits; the watchdog's thread only runs the exit hook
 (ncclCommAbort may be called from another thread: that is what it is for). The state is
 the process's, in statics: this file is compiled in one translation unit of a program
 (zero3/device.cu; a test that includes it whole), whose zero_gpu_wait the rest calls.
*/
#ifndef ZERO3_NCCL_WATCH_CUH
#define ZERO3_NCCL_WATCH_CUH

#include <stdio.h>              // snprintf
#include <sched.h>              // sched_yield: the polling wait lets the other threads and processes run
#include <nccl.h>               // ncclComm_t, ncclCommGetAsyncError, ncclCommAbort
#include <cuda_runtime.h>       // events, cudaStreamQuery, cudaEventQuery
#include "zero3/util.h"         // zero_error, zero_now_ms
#include "zero3/cuda_util.cuh"  // zero_cuda
#include "zero3/watch.h"        // zero_watch_running/leave, zero_watch_on_exit, the step

#ifndef ZERO_NCCL_WATCH_RING
#define ZERO_NCCL_WATCH_RING 512   // records waiting to be found complete (a full ring waits for its oldest; a test may lower it)
#endif
#define ZERO_NCCL_WATCH_COMMS 8    // communicators polled and aborted

typedef struct {
    cudaEvent_t start, end;   // made at the record's first use, kept
    const char* what;         // "all-gather", ... (a static string)
    int unit, step;           // -1: no unit
    double running_since;     // ms (zero_now_ms) a wait first found it started, 0 not yet
} ZeroNcclRecord;

typedef struct {
    ZeroNcclRecord ring[ZERO_NCCL_WATCH_RING];
    int head, count;          // the oldest record, and how many are complete-or-running
    int depth;                // zero_nccl_watch_begin calls not yet ended: the open record's
    cudaStream_t stream;      // the open record's stream
    ncclComm_t comms[ZERO_NCCL_WATCH_COMMS];
} ZeroNcclWatch;

static ZeroNcclWatch zero_nccl_watch;

// every communicator is aborted (the exit hook: an error or the watchdog ends the process);
// from any thread, once
static void zero_nccl_abort_all(void) {
    for (int i = 0; i < ZERO_NCCL_WATCH_COMMS; i++) {
        ncclComm_t c = __atomic_exchange_n(&zero_nccl_watch.comms[i], (ncclComm_t)NULL, __ATOMIC_ACQ_REL);
        if (c != NULL) { ncclCommAbort(c); }
    }
}

// c is polled while the host waits, and aborted by the exit hooks, until zero_nccl_watch_remove
static inline int zero_nccl_watch_add(ncclComm_t c) {
    zero_watch_on_exit(zero_nccl_abort_all);
    for (int i = 0; i < ZERO_NCCL_WATCH_COMMS; i++) {
        ncclComm_t none = NULL;
        if (__atomic_compare_exchange_n(&zero_nccl_watch.comms[i], &none, c, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) { return 0; }
    }
    return zero_error("zero nccl: more than %d communicators to watch", ZERO_NCCL_WATCH_COMMS);
}

static inline void zero_nccl_watch_remove(ncclComm_t c) {
    for (int i = 0; i < ZERO_NCCL_WATCH_COMMS; i++) {
        ncclComm_t mine = c;
        __atomic_compare_exchange_n(&zero_nccl_watch.comms[i], &mine, (ncclComm_t)NULL, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    }
}

int zero_gpu_wait(cudaStream_t s, cudaEvent_t ev, const char* what);  // below

// A collective (or a group of them) is about to be issued on stream s: its start event.
// Inside an open record, nothing (it is part of that one).
static int zero_nccl_watch_begin(cudaStream_t s, const char* what, int unit) {
    ZeroNcclWatch* w = &zero_nccl_watch;
    if (w->depth++ > 0) { return 0; }
    if (w->count == ZERO_NCCL_WATCH_RING) {  // the oldest must be over before its events are used again
        if (zero_gpu_wait(NULL, w->ring[w->head].end, "waiting for an old collective") != 0) { w->depth--; return -1; }
        if (w->count == ZERO_NCCL_WATCH_RING) {  // (unless the wait's looks retired it already)
            w->head = (w->head + 1) % ZERO_NCCL_WATCH_RING;
            w->count--;
        }
    }
    ZeroNcclRecord* r = &w->ring[(w->head + w->count) % ZERO_NCCL_WATCH_RING];
    if ((r->start == NULL && zero_cuda(cudaEventCreateWithFlags(&r->start, cudaEventDisableTiming), "creating an event") != 0) ||
        (r->end == NULL && zero_cuda(cudaEventCreateWithFlags(&r->end, cudaEventDisableTiming), "creating an event") != 0) ||
        zero_cuda(cudaEventRecord(r->start, s), "cudaEventRecord (a collective's start)") != 0) {
        w->depth--;
        return -1;
    }
    r->what = what;
    r->unit = unit;
    r->step = zero_watch.step;
    r->running_since = 0;
    w->stream = s;
    return 0;
}

// ... issued: its end event, and the record joins the ring (the outermost end only)
static int zero_nccl_watch_end(void) {
    ZeroNcclWatch* w = &zero_nccl_watch;
    if (w->depth == 0 || --w->depth > 0) { return 0; }
    ZeroNcclRecord* r = &w->ring[(w->head + w->count) % ZERO_NCCL_WATCH_RING];
    if (zero_cuda(cudaEventRecord(r->end, w->stream), "cudaEventRecord (a collective's end)") != 0) { return -1; }
    w->count++;
    return 0;
}

// cudaEventQuery as a poll: 1 passed, 0 not yet (the runtime's "not ready" cleared), -1 an error
static inline int zero_gpu_passed(cudaEvent_t ev, const char* what) {
    cudaError_t q = cudaEventQuery(ev);
    if (q == cudaSuccess) { return 1; }
    if (q != cudaErrorNotReady) { return zero_cuda(q, what); }
    (void)cudaGetLastError();
    return 0;
}

// One look while the host waits: the completed records retired, the running one told to the
// watchdog, every communicator's asynchronous error checked. -1 with a message on an error.
static int zero_nccl_watch_poll(void) {
    ZeroNcclWatch* w = &zero_nccl_watch;
    const ZeroNcclRecord* running = NULL;
    const ZeroNcclRecord* oldest = NULL;
    while (w->count > 0) {
        ZeroNcclRecord* r = &w->ring[w->head];
        int done = zero_gpu_passed(r->end, "cudaEventQuery (a collective's end)");
        if (done < 0) { return -1; }
        if (done) { w->head = (w->head + 1) % ZERO_NCCL_WATCH_RING; w->count--; continue; }
        oldest = r;
        int started = zero_gpu_passed(r->start, "cudaEventQuery (a collective's start)");
        if (started < 0) { return -1; }
        if (started && r->running_since == 0) { r->running_since = zero_now_ms(); }
        if (started) { running = r; }
        break;
    }
    if (running != NULL) { zero_watch_running(running->what, running->unit, running->step, running->running_since); }
    else if (zero_watch.since != 0) { zero_watch_leave(); }
    for (int i = 0; i < ZERO_NCCL_WATCH_COMMS; i++) {
        ncclComm_t c = __atomic_load_n(&w->comms[i], __ATOMIC_ACQUIRE);
        if (c == NULL) { continue; }
        ncclResult_t err = ncclSuccess, rc = ncclCommGetAsyncError(c, &err);
        if (rc == ncclSuccess && (err == ncclSuccess || err == ncclInProgress)) { continue; }
        char what[128] = "a collective";
        if (oldest != NULL && oldest->unit >= 0) { snprintf(what, sizeof(what), "the %s of unit %d at step %d", oldest->what, oldest->unit, oldest->step); }
        else if (oldest != NULL) { snprintf(what, sizeof(what), "the %s at step %d", oldest->what, oldest->step); }
        return zero_error("zero nccl: %s failed: %s", what, ncclGetErrorString(rc != ncclSuccess ? rc : err));
    }
    return 0;
}

// The host waits for ev (or, when NULL, for everything issued on s), as cudaEventSynchronize
// (cudaStreamSynchronize) would, but watched: see the top. -1 with a message on a CUDA or an
// NCCL error. `what` names the wait in a CUDA error's message. Defined once per program, with
// the state it polls: zero3/device.cu (the trainer calls it through zero3/device.h), or a
// test that includes this whole.
int zero_gpu_wait(cudaStream_t s, cudaEvent_t ev, const char* what) {
    int rc = 0;
    for (;;) {
        cudaError_t q = ev != NULL ? cudaEventQuery(ev) : cudaStreamQuery(s);
        if (q == cudaSuccess) { break; }
        if (q != cudaErrorNotReady) { rc = zero_cuda(q, what); break; }
        (void)cudaGetLastError();  // (the runtime may keep "not ready" as its last error)
        if (zero_nccl_watch_poll() != 0) { rc = -1; break; }
        sched_yield();
    }
    if (zero_watch.since != 0) { zero_watch_leave(); }  // the host no longer waits
    return rc;
}

#endif // ZERO3_NCCL_WATCH_CUH
