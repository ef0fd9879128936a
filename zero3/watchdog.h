/*
 The collective watchdog (--collective-timeout). MPI has no timeout: a rank that stops
 making progress (a stopped process, a stuck node) leaves every other rank blocked in its
 next collective for ever. Each blocking wait, the engine's (zero3/comm.h) and the
 trainer's, says what it waits for (zero_watch_enter / zero_watch_leave); a thread per
 rank looks five times a second and, once a wait has lasted the timeout, prints one line
 (this rank, the collective, the step, the ranks that have not arrived) and ends the
 process with _exit(1), after which mpirun ends the job with a non-zero status.

 Who has not arrived: every rank publishes whether it is in a wait, and since when, in a
 shared-memory window of the ranks on its node (MPI_Win_allocate_shared); the thread reads
 the others' slots with plain atomic loads and never calls MPI, so MPI needs no thread
 support. A rank on this node outside any wait while this one has waited the whole
 timeout is the one the collective waits for. Ranks on other nodes are not seen.

 The state is the process's (one engine and one trainer per process), in statics.
*/
#ifndef ZERO3_WATCHDOG_H
#define ZERO3_WATCHDOG_H

#include <stdio.h>       // fprintf, snprintf
#include <stdlib.h>      // malloc, free
#include <stdint.h>      // int64_t: the shared slots
#include <pthread.h>     // the watchdog thread
#include <unistd.h>      // usleep, _exit
#include <mpi.h>         // the node's shared-memory window, the ranks' numbers
#include "zero3/util.h"  // zero_error, zero_now_ms

typedef struct {
    int on;                  // started (a timeout > 0)
    volatile int stopping;   // zero_watchdog_stop: the thread returns
    double timeout_ms;
    int rank;                // in the communicator given at start
    const char* volatile what;  // the collective being waited for (a static string)
    volatile int unit;          // its unit, -1 none
    volatile int step;          // the trainer's step, for the message
    int64_t* slots;          // per rank on this node: ms (zero_now_ms) it entered its wait, 0 outside
    int local_rank, local_size;
    int* world_of_local;     // the ranks' numbers in the start communicator
    MPI_Win win;
    MPI_Comm node;
    pthread_t thread;
} ZeroWatchdog;

static ZeroWatchdog zero_watchdog;

// a blocking collective starts: what (a string that lives for ever) of unit (-1: none)
static inline void zero_watch_enter(const char* what, int unit) {
    ZeroWatchdog* w = &zero_watchdog;
    if (!w->on) { return; }
    w->what = what;
    w->unit = unit;
    int64_t now = (int64_t)zero_now_ms();
    __atomic_store_n(&w->slots[w->local_rank], now > 0 ? now : 1, __ATOMIC_RELEASE);
}

static inline void zero_watch_leave(void) {
    ZeroWatchdog* w = &zero_watchdog;
    if (w->on) { __atomic_store_n(&w->slots[w->local_rank], (int64_t)0, __ATOMIC_RELEASE); }
}

static inline void zero_watch_step(int step) { zero_watchdog.step = step; }

static void* zero_watchdog_loop(void* arg) {
    ZeroWatchdog* w = (ZeroWatchdog*)arg;
    while (!w->stopping) {
        usleep(200000);
        int64_t since = __atomic_load_n(&w->slots[w->local_rank], __ATOMIC_ACQUIRE);
        double now = zero_now_ms();
        if (since == 0 || now - (double)since < w->timeout_ms) { continue; }
        char what[128], missing[512];
        if (w->unit >= 0) { snprintf(what, sizeof(what), "%s of unit %d", w->what, w->unit); }
        else { snprintf(what, sizeof(what), "%s", w->what); }
        size_t len = 0;
        missing[0] = '\0';
        for (int i = 0; i < w->local_size; i++) {
            if (i == w->local_rank || __atomic_load_n(&w->slots[i], __ATOMIC_ACQUIRE) != 0) { continue; }
            int n = snprintf(missing + len, sizeof(missing) - len, "%s%d", len ? ", " : "", w->world_of_local[i]);
            if (n > 0 && (size_t)n < sizeof(missing) - len) { len += (size_t)n; }
        }
        fprintf(stderr, "error: rank %d: collective timeout: the %s at step %d has not completed after %.0f s; %s%s\n",
                w->rank, what, w->step, (now - (double)since) / 1e3,
                len ? "ranks that have not arrived: " : "every rank on this node is waiting (the missing one is on another node)",
                missing);
        fflush(stderr);
        _exit(1);
    }
    return NULL;
}

// Starts the watchdog over comm's ranks, timeout_s > 0 (0: off, nothing started).
// Collective over comm. -1 with zero_errmsg() when MPI or the thread fail.
static int zero_watchdog_start(double timeout_s, MPI_Comm comm) {
    ZeroWatchdog* w = &zero_watchdog;
    if (timeout_s <= 0 || w->on) { return 0; }
    w->timeout_ms = timeout_s * 1e3;
    w->what = "collective";
    w->unit = -1;
    MPI_Comm_rank(comm, &w->rank);
    if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, w->rank, MPI_INFO_NULL, &w->node) != MPI_SUCCESS) {
        return zero_error("collective watchdog: cannot split the ranks by node");
    }
    MPI_Comm_rank(w->node, &w->local_rank);
    MPI_Comm_size(w->node, &w->local_size);
    int64_t* mine = NULL;
    if (MPI_Win_allocate_shared(sizeof(int64_t), sizeof(int64_t), MPI_INFO_NULL, w->node, &mine, &w->win) != MPI_SUCCESS) {
        return zero_error("collective watchdog: cannot allocate the node's shared window");
    }
    MPI_Aint size = 0;
    int disp = 0;
    // the slots are contiguous (no alloc_shared_noncontig): rank 0's base addresses them all
    MPI_Win_shared_query(w->win, 0, &size, &disp, &w->slots);
    w->slots[w->local_rank] = 0;
    w->world_of_local = (int*)malloc((size_t)w->local_size * sizeof(int));
    if (w->world_of_local == NULL) { return zero_error("collective watchdog: out of memory"); }
    MPI_Allgather(&w->rank, 1, MPI_INT, w->world_of_local, 1, MPI_INT, w->node);
    MPI_Barrier(w->node);  // every slot zeroed before anyone reads one
    w->on = 1;
    if (pthread_create(&w->thread, NULL, zero_watchdog_loop, w) != 0) {
        w->on = 0;
        return zero_error("collective watchdog: cannot start its thread");
    }
    return 0;
}

// Stops the thread and frees the window, before MPI_Finalize (which may unmap the slots
// under the thread). Collective over the ranks of the node; a no-op when not started.
static void zero_watchdog_stop(void) {
    ZeroWatchdog* w = &zero_watchdog;
    if (!w->on) { return; }
    w->stopping = 1;
    pthread_join(w->thread, NULL);
    w->on = 0;
    MPI_Win_free(&w->win);
    MPI_Comm_free(&w->node);
    free(w->world_of_local);
    w->world_of_local = NULL;
}

#endif // ZERO3_WATCHDOG_H
