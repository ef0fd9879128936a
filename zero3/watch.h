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

#ifdef __cplusplus
extern "C" {
#endif

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

extern ZeroWatch zero_watch;  // (zeroed: no wait, no slot, no hook)

// publishes what the rank does now to the other ranks on the node
void zero_watch_publish(void);

// a blocking collective starts: what (a string that lives for ever) of unit (-1: none)
void zero_watch_enter(const char* what, int unit);

void zero_watch_leave(void);

// The GPU trainer's waits: the host waits for the GPU, which runs the collective `what` of
// unit (-1: none), issued at `step`, since `since` (ms, as the host first saw it running).
// Called again while it runs; zero_watch_leave when none runs.
void zero_watch_running(const char* what, int unit, int step, double since);

void zero_watch_step(int step);

// a file I/O wait starts: what ("read", "write", "sync": a static string) of path
void zero_watch_io_enter(const char* what, const char* path);

void zero_watch_io_leave(void);

// fn runs at zero_watch_exit_hooks (once registered; twice is once)
void zero_watch_on_exit(void (*fn)(void));

// the process is about to end on a failure: what must not outlive it goes (from any thread)
void zero_watch_exit_hooks(void);

#ifdef __cplusplus
}
#endif

#endif // ZERO3_WATCH_H
