/*
 What this rank is waiting for, said where the wait happens, for --collective-timeout's
 watchdog (zero3/watchdog.h) to time and to name. Kept apart from the watchdog, which needs
 MPI, so that code without MPI (the NVMe swapper, its unit tests) can say where it waits:
 without a watchdog these calls only write a few fields.

   zero_watch_enter(what, unit)    a blocking collective starts (the host's MPI waits)
   zero_watch_leave()
   zero_watch_running(what, unit, step, since)   the GPU trainer's waits: the collective the
                                   GPU is running while the host waits for it (zero3/nccl.cuh)
   zero_watch_io_enter(what, path) a file read, write or sync that may stall (a checkpoint's
   zero_watch_io_leave()           files, the NVMe swap file); nested calls stack (4 deep)
   zero_watch_step(step)           the trainer's step, for the messages
   zero_watch_on_exit(fn)          fn runs before the process ends on a failure the program
   zero_watch_exit_hooks()         controls (the watchdog's, the trainer's aborts, exit()):
                                   swap files removed, NCCL communicators aborted

 What the rank is doing (outside any wait, in a collective, in file I/O) is also published
 in the watchdog's shared slot of this rank, where the other ranks on the node read it.

 Test hooks (docs/TESTING.md), read once:
   ZERO3_TEST_STOP=R:S:WHERE    world rank R stops itself (SIGSTOP) at its first wait on a
                                unit's collective at step S or later: `before` it says it
                                waits, `inside` (after), or `after` the wait is over
   ZERO3_TEST_STALL_IO=TEXT     a file I/O wait on a path containing TEXT never ends, as on a
                                stuck disk (the wait is said first, so the watchdog sees it)

 One thread (the trainer's) calls these; the watchdog's thread reads them. The state is the
 process's (one trainer per process), in statics.
*/
#ifndef ZERO3_WATCH_H
#define ZERO3_WATCH_H

#include <stdint.h>      // int64_t: the shared slot
#include <stdlib.h>      // getenv, atoi
#include <string.h>      // strstr, strchr, strcmp, strlen, memcpy
#include <signal.h>      // raise, SIGSTOP: the stop hook
#include <unistd.h>      // sleep: the stall hook
#include "zero3/util.h"  // zero_now_ms

// what a rank does, in its shared slot's ZERO_SLOT_STATE
enum { ZERO_DOING_OTHER, ZERO_DOING_COLLECTIVE, ZERO_DOING_IO };
// the fields of a rank's shared slot (int64 each): the watchdog thread's heartbeat, what the
// rank does, and whether it has printed its message and is ending (then 1 + what it did)
enum { ZERO_SLOT_BEAT, ZERO_SLOT_STATE, ZERO_SLOT_ENDED, ZERO_SLOT_FIELDS };

#define ZERO_WATCH_IO_DEPTH 4
#define ZERO_WATCH_HOOKS 4

typedef struct {
    const char* what;          // "write", "read", "sync" (a static string)
    char path[512];            // the file, its last 511 bytes when longer
    volatile int64_t since;    // ms (zero_now_ms) the wait began; 0 while the entry is written
} ZeroWatchIo;

typedef struct {
    const char* volatile what;  // the collective being waited for (a static string)
    volatile int unit;          // its unit, -1 none
    volatile int wait_step;     // the step it was issued at
    volatile int64_t since;     // ms its wait began, 0 outside any
    volatile int step;          // the trainer's step now
    ZeroWatchIo io[ZERO_WATCH_IO_DEPTH];
    volatile int io_depth;      // entries of io in use (more nesting is not recorded)
    int io_nested;              // enters past ZERO_WATCH_IO_DEPTH, to match their leaves
    int64_t* volatile slot;     // this rank's shared slot (zero3/watchdog.h), NULL without a watchdog
    int rank;                   // the world rank, for the test hooks (set with the slot)
    void (*hooks[ZERO_WATCH_HOOKS])(void);
    int test_read, stop_rank, stop_step, stop_where, stopped;  // ZERO3_TEST_STOP
    const char* stall;          // ZERO3_TEST_STALL_IO
} ZeroWatch;

static ZeroWatch zero_watch;  // (zeroed: no wait, no slot, no hook)

// publishes what the rank does now to the other ranks on the node
static inline void zero_watch_publish(void) {
    ZeroWatch* w = &zero_watch;
    int64_t* slot = w->slot;
    if (slot == NULL) { return; }
    int64_t doing = w->since != 0 ? ZERO_DOING_COLLECTIVE : w->io_depth > 0 ? ZERO_DOING_IO : ZERO_DOING_OTHER;
    __atomic_store_n(&slot[ZERO_SLOT_STATE], doing, __ATOMIC_RELEASE);
}

static inline int64_t zero_watch_now(void) {
    int64_t now = (int64_t)zero_now_ms();
    return now > 0 ? now : 1;  // 0 means "not waiting"
}

// the test hooks' settings, once (ZERO3_TEST_STOP=R:S:before|inside|after)
static inline void zero_watch_read_tests(void) {
    ZeroWatch* w = &zero_watch;
    if (w->test_read) { return; }
    w->test_read = 1;
    w->stall = getenv("ZERO3_TEST_STALL_IO");
    const char* stop = getenv("ZERO3_TEST_STOP");
    const char* where = stop != NULL ? strrchr(stop, ':') : NULL;
    if (where == NULL) { return; }
    w->stop_rank = atoi(stop);
    w->stop_step = strchr(stop, ':') < where ? atoi(strchr(stop, ':') + 1) : 0;
    w->stop_where = !strcmp(where + 1, "before") ? 1 : !strcmp(where + 1, "inside") ? 2 : !strcmp(where + 1, "after") ? 3 : 0;
}

// ZERO3_TEST_STOP: this rank stops here if the hook names this place of a unit's wait
static inline void zero_watch_test_stop(int where, int unit) {
    ZeroWatch* w = &zero_watch;
    zero_watch_read_tests();
    if (w->stop_where != where || w->stopped || unit < 0 || w->slot == NULL || w->rank != w->stop_rank ||
        w->step < w->stop_step) {
        return;
    }
    w->stopped = 1;
    raise(SIGSTOP);
}

// a blocking collective starts: what (a string that lives for ever) of unit (-1: none)
static inline void zero_watch_enter(const char* what, int unit) {
    ZeroWatch* w = &zero_watch;
    zero_watch_test_stop(1, unit);
    w->what = what;
    w->unit = unit;
    w->wait_step = w->step;
    __atomic_store_n(&w->since, zero_watch_now(), __ATOMIC_RELEASE);
    zero_watch_publish();
    zero_watch_test_stop(2, unit);
}

static inline void zero_watch_leave(void) {
    ZeroWatch* w = &zero_watch;
    int unit = w->unit;
    __atomic_store_n(&w->since, (int64_t)0, __ATOMIC_RELEASE);
    zero_watch_publish();
    zero_watch_test_stop(3, unit);
}

// The GPU trainer's waits: the host waits for the GPU, which runs the collective `what` of
// unit (-1: none), issued at `step`, since `since` (ms, as the host first saw it running).
// Called again while it runs; zero_watch_leave when none runs.
static inline void zero_watch_running(const char* what, int unit, int step, double since) {
    ZeroWatch* w = &zero_watch;
    int64_t at = since > 0 ? (int64_t)since : 1;
    if (w->since == at && w->what == what && w->unit == unit && w->wait_step == step) { return; }  // (as told before)
    w->what = what;
    w->unit = unit;
    w->wait_step = step;
    __atomic_store_n(&w->since, at, __ATOMIC_RELEASE);
    zero_watch_publish();
}

static inline void zero_watch_step(int step) { zero_watch.step = step; }

// a file I/O wait starts: what ("read", "write", "sync": a static string) of path
static inline void zero_watch_io_enter(const char* what, const char* path) {
    ZeroWatch* w = &zero_watch;
    if (w->io_depth == ZERO_WATCH_IO_DEPTH) { w->io_nested++; return; }
    ZeroWatchIo* e = &w->io[w->io_depth];
    __atomic_store_n(&e->since, (int64_t)0, __ATOMIC_RELEASE);
    e->what = what;
    size_t len = strlen(path), keep = len < sizeof(e->path) ? len : sizeof(e->path) - 1;  // the end names the file
    memcpy(e->path, path + len - keep, keep);
    e->path[keep] = '\0';
    __atomic_store_n(&e->since, zero_watch_now(), __ATOMIC_RELEASE);
    __atomic_store_n(&w->io_depth, w->io_depth + 1, __ATOMIC_RELEASE);
    zero_watch_publish();
    zero_watch_read_tests();
    if (w->stall != NULL && w->stall[0] != '\0' && strstr(path, w->stall) != NULL) {
        for (;;) { sleep(1); }  // ZERO3_TEST_STALL_IO: a disk that never answers (signals do not end it)
    }
}

static inline void zero_watch_io_leave(void) {
    ZeroWatch* w = &zero_watch;
    if (w->io_nested > 0) { w->io_nested--; return; }
    if (w->io_depth == 0) { return; }
    __atomic_store_n(&w->io_depth, w->io_depth - 1, __ATOMIC_RELEASE);
    __atomic_store_n(&w->io[w->io_depth].since, (int64_t)0, __ATOMIC_RELEASE);
    zero_watch_publish();
}

// fn runs at zero_watch_exit_hooks (once registered; twice is once)
static inline void zero_watch_on_exit(void (*fn)(void)) {
    ZeroWatch* w = &zero_watch;
    for (int i = 0; i < ZERO_WATCH_HOOKS; i++) {
        if (w->hooks[i] == fn) { return; }
        if (w->hooks[i] == NULL) { __atomic_store_n(&w->hooks[i], fn, __ATOMIC_RELEASE); return; }
    }
}

// the process is about to end on a failure: what must not outlive it goes (from any thread)
static inline void zero_watch_exit_hooks(void) {
    for (int i = 0; i < ZERO_WATCH_HOOKS; i++) {
        void (*fn)(void) = __atomic_load_n(&zero_watch.hooks[i], __ATOMIC_ACQUIRE);
        if (fn != NULL) { fn(); }
    }
}

#endif // ZERO3_WATCH_H
