/*
 The watchdog (--collective-timeout S). MPI has no timeout: a rank that stops making
 progress (a stopped process, a stuck node) leaves every other rank blocked in its next
 collective for ever, and a file that never finishes writing or reading (a stuck disk, a
 hung network filesystem) blocks its own rank as surely. Every such wait says where it
 happens (zero3/watch.h: the engine's collectives and the trainer's, the GPU's collectives
 the host waits for, a checkpoint's files, the NVMe swap file). A thread per rank looks
 five times a second and, once one wait has lasted S, ends the job: one line naming what
 (the collective and its unit, or the file), the step, and for a collective the ranks that
 have not arrived and why; then what must not outlive the process goes
 (zero_watch_exit_hooks: swap files, NCCL communicators) and the process ends with
 _exit(1), after which mpirun ends the job with a non-zero status.

 Who has not arrived is decided by progress, not presence: a rank stopped inside the
 collective is in it as much as the ones waiting for it. Every rank publishes, in a
 shared-memory window of the ranks on its node (MPI_Win_allocate_shared), a heartbeat that
 its watchdog thread advances at every look, what it does (outside any wait, in a
 collective, in file I/O: zero3/watch.h keeps it current) and whether it is ending. A rank
 whose heartbeat has not moved for ZERO_WATCHDOG_STOPPED_MS is stopped (SIGSTOP, a frozen
 process: nothing of it runs, its watchdog neither); one that runs but is not in a
 collective has not arrived (computing, or in file I/O, which its own watchdog times); one
 that runs inside a collective waits like this one. At the timeout the thread first waits
 until each rank of the node is known to run (its heartbeat moved since) or to be stopped,
 so that a rank stopped a moment ago is not taken for one waiting. When every rank of the
 node runs inside a collective, the missing one is on another node (those ranks are not
 seen), or, on one node, no rank has stopped and every one waits. When one that has not
 arrived is in file I/O, its own watchdog names the file: this one leaves it that long (at
 most one more timeout) and then follows it.

 The message on every rank of the node: a rank whose watchdog ends the job marks its slot;
 the watchdog of every other rank there sees the mark at its next look and ends its rank
 too, with its own view (its collective and missing ranks, or which rank ended the job);
 the first one waits for the others' lines (at most ZERO_WATCHDOG_LINES_MS) before it exits.

 The thread reads the others' slots with plain atomic loads and never calls MPI, so MPI
 needs no thread support. The state is the process's (one trainer per process), in statics.
*/
#ifndef ZERO3_WATCHDOG_H
#define ZERO3_WATCHDOG_H

#include <stdint.h>       // int64_t: the shared slots
#include <pthread.h>      // the watchdog thread
#include <mpi.h>          // the node's shared-memory window, the ranks' numbers

#ifdef __cplusplus
extern "C" {
#endif

#define ZERO_WATCHDOG_TICK_MS 200      // between two looks
#define ZERO_WATCHDOG_STOPPED_MS 2000  // a heartbeat that has not moved for this long: the rank is stopped
#define ZERO_WATCHDOG_LINES_MS 2000    // the rank ending the job waits this long at most for the others' lines

typedef struct {
    int on;                  // started (a timeout > 0)
    volatile int stopping;   // zero_watchdog_stop: the thread returns
    double timeout_ms;
    int rank, world;         // in the communicator given at start
    int64_t* slots;          // ZERO_SLOT_FIELDS per rank on this node (zero3/watch.h)
    int local_rank, local_size;
    int* world_of_local;     // the ranks' numbers in the start communicator
    int64_t* beat_seen;      // per rank on this node: its heartbeat as this thread last saw it
    double* beat_moved;      //   and when that changed (zero_now_ms)
    int* stopped;            //   stopped (zero_watchdog_resolve)
    double last_look;        // when this thread last looked (zero_now_ms)
    double resumed_at;       // when it found that this process itself had been stopped, 0 never
    double paused_ms;        //   and for how long
    MPI_Win win;
    MPI_Comm node;
    pthread_t thread;
} ZeroWatchdog;

// Starts the watchdog over comm's ranks, timeout_s > 0 (0: off, nothing started).
// Collective over comm. -1 with zero_errmsg() when MPI or the thread fail.
int zero_watchdog_start(double timeout_s, MPI_Comm comm);

// Stops the thread and frees the window, before MPI_Finalize (which may unmap the slots
// under the thread). Collective over the ranks of the node; a no-op when not started.
void zero_watchdog_stop(void);

#ifdef __cplusplus
}
#endif

#endif // ZERO3_WATCHDOG_H
