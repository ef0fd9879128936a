// zero3/watchdog.c: the implementation (the interface and its notes: zero3/watchdog.h)
#include "zero3/watchdog.h"  // this module's types and prototypes
#include <stdio.h>        // fprintf, snprintf
#include <stdlib.h>       // malloc, free
#include <unistd.h>       // usleep, _exit
#include "zero3/util.h"   // zero_error, zero_now_ms
#include "zero3/watch.h"  // zero_watch: what this rank waits for; the slots' fields; the exit hooks

static ZeroWatchdog zero_watchdog;

static int64_t* zero_watchdog_slot(const ZeroWatchdog* w, int local) {
    return w->slots + (size_t)local * ZERO_SLOT_FIELDS;
}

// one look: this rank's heartbeat moves, the others' are read. A look long after the last
// one: this process was stopped meanwhile (SIGSTOP and SIGCONT), and nothing seen before
// tells how the others are now.
static void zero_watchdog_tick(ZeroWatchdog* w) {
    int64_t* mine = zero_watchdog_slot(w, w->local_rank);
    __atomic_store_n(&mine[ZERO_SLOT_BEAT], mine[ZERO_SLOT_BEAT] + 1, __ATOMIC_RELEASE);
    double now = zero_now_ms();
    if (now - w->last_look > ZERO_WATCHDOG_STOPPED_MS) {
        w->resumed_at = now;
        w->paused_ms = now - w->last_look;
        for (int i = 0; i < w->local_size; i++) { w->beat_moved[i] = now; }
    }
    w->last_look = now;
    for (int i = 0; i < w->local_size; i++) {
        int64_t b = __atomic_load_n(&zero_watchdog_slot(w, i)[ZERO_SLOT_BEAT], __ATOMIC_ACQUIRE);
        if (b != w->beat_seen[i]) { w->beat_seen[i] = b; w->beat_moved[i] = now; }
    }
}

// w->stopped[i]: rank i of the node is stopped. Waits, looking, until each rank is known
// to run (its heartbeat moved after `from`) or to be stopped (unmoved for STOPPED_MS).
static void zero_watchdog_resolve(ZeroWatchdog* w, double from) {
    for (;;) {
        double now = zero_now_ms();
        int open = 0;
        for (int i = 0; i < w->local_size; i++) {
            w->stopped[i] = i != w->local_rank && now - w->beat_moved[i] >= ZERO_WATCHDOG_STOPPED_MS;
            if (i != w->local_rank && !w->stopped[i] && w->beat_moved[i] <= from) { open = 1; }
        }
        if (!open) { return; }
        usleep(50 * 1000);
        zero_watchdog_tick(w);
    }
}

// "at step 5" (the training step under way, as its step line will number it), or "during
// start-up" before the first
static const char* zero_watchdog_when(int step) {
    static char when[32];  // (the watchdog's thread only)
    if (step <= 0) { return "during start-up"; }
    snprintf(when, sizeof(when), "at step %d", step);
    return when;
}

// "the all-gather of unit 3 at step 5 has not completed after 300 s; ranks that have not
// arrived: 1 (stopped)", of the collective this rank waits for (after zero_watchdog_resolve)
static void zero_watchdog_collective_line(const ZeroWatchdog* w, double waited_ms, char* line, size_t n) {
    const ZeroWatch* z = &zero_watch;
    char what[160], missing[512];
    if (z->unit >= 0) { snprintf(what, sizeof(what), "%s of unit %d", z->what, z->unit); }
    else { snprintf(what, sizeof(what), "%s", z->what); }
    size_t len = 0;
    missing[0] = '\0';
    for (int i = 0; i < w->local_size; i++) {
        const int64_t* slot = zero_watchdog_slot(w, i);
        int64_t doing = __atomic_load_n(&slot[ZERO_SLOT_STATE], __ATOMIC_ACQUIRE);
        // a rank ending the job is not stopped (its heartbeat stops as it exits) and counts as
        // doing what it did when it ended (its exit hooks abort NCCL, which ends its GPU's wait)
        int64_t ended = __atomic_load_n(&slot[ZERO_SLOT_ENDED], __ATOMIC_ACQUIRE);
        if (ended != 0) { doing = ended - 1; }
        int stopped = w->stopped[i] && ended == 0;
        if (i == w->local_rank || (!stopped && doing == ZERO_DOING_COLLECTIVE)) { continue; }
        const char* why = stopped ? "stopped" : doing == ZERO_DOING_IO ? "in file I/O" : "running, in no collective";
        int k = snprintf(missing + len, sizeof(missing) - len, "%s%d (%s)", len ? ", " : "", w->world_of_local[i], why);
        if (k > 0 && (size_t)k < sizeof(missing) - len) { len += (size_t)k; }
    }
    const char* none = w->local_size < w->world ? "every rank on this node runs inside a collective (the missing one is on another node)"
                                                : "every rank runs inside a collective: none has stopped";
    snprintf(line, n, "collective timeout: the %s %s has not completed after %.0f s; %s%s", what, zero_watchdog_when(z->wait_step),
             waited_ms / 1e3, len ? "ranks that have not arrived: " : none, missing);
}

// how long a wait that began at `since` has lasted, as this rank saw it: a time this
// process was stopped does not count (every wait looks late just after a SIGCONT)
static double zero_watchdog_waited(const ZeroWatchdog* w, double now, int64_t since) {
    return now - ((double)since > w->resumed_at ? (double)since : w->resumed_at);
}

// the innermost file I/O wait of this rank that has lasted the timeout: its entry's
// `since`, and the line naming it; 0 when none has
static int64_t zero_watchdog_io_late(const ZeroWatchdog* w, double now, char* line, size_t n) {
    const ZeroWatch* z = &zero_watch;
    for (int d = __atomic_load_n(&z->io_depth, __ATOMIC_ACQUIRE) - 1; d >= 0; d--) {
        const ZeroWatchIo* e = &z->io[d];
        int64_t since = __atomic_load_n(&e->since, __ATOMIC_ACQUIRE);
        if (since == 0 || zero_watchdog_waited(w, now, since) < w->timeout_ms) { continue; }
        snprintf(line, n, "file I/O timeout: the %s of %s %s has not completed after %.0f s", e->what, e->path,
                 zero_watchdog_when(z->step), zero_watchdog_waited(w, now, since) / 1e3);
        if (__atomic_load_n(&e->since, __ATOMIC_ACQUIRE) == since) { return since; }  // (else a new entry: torn)
    }
    return 0;
}

// Ends this rank: its line, the mark that it is ending, the exit hooks; the rank that ended
// the job first (`first`) gives the other running ranks of the node time to print theirs.
static void zero_watchdog_end(ZeroWatchdog* w, const char* line, int first) {
    fprintf(stderr, "error: rank %d: %s\n", w->rank, line);
    fflush(stderr);
    int64_t* mine = zero_watchdog_slot(w, w->local_rank);
    // (1 + what the rank does now: what the others' lines say of it, whatever it does next)
    __atomic_store_n(&mine[ZERO_SLOT_ENDED], 1 + __atomic_load_n(&mine[ZERO_SLOT_STATE], __ATOMIC_ACQUIRE), __ATOMIC_RELEASE);
    zero_watch_exit_hooks();
    for (double t0 = zero_now_ms(); first && zero_now_ms() - t0 < ZERO_WATCHDOG_LINES_MS;) {
        int waiting = 0;
        for (int i = 0; i < w->local_size; i++) {
            if (i != w->local_rank && !w->stopped[i] &&
                __atomic_load_n(&zero_watchdog_slot(w, i)[ZERO_SLOT_ENDED], __ATOMIC_ACQUIRE) == 0) {
                waiting = 1;
            }
        }
        if (!waiting) { break; }
        usleep(50 * 1000);
        zero_watchdog_tick(w);
    }
    _exit(1);
}

// another rank of the node is ending the job: this one ends too, saying what it waited for
// (or that it was stopped itself meanwhile)
static void zero_watchdog_follow(ZeroWatchdog* w, int ender) {
    char line[1024];
    double now = zero_now_ms();
    zero_watchdog_resolve(w, now);
    int64_t since = __atomic_load_n(&zero_watch.since, __ATOMIC_ACQUIRE);
    if (w->resumed_at > 0 && now - w->resumed_at < w->timeout_ms) {
        snprintf(line, sizeof(line), "this rank was stopped for %.0f s; meanwhile rank %d's watchdog ended the job (its "
                 "message says why)", w->paused_ms / 1e3, w->world_of_local[ender]);
    } else if (since != 0) {
        zero_watchdog_collective_line(w, zero_watchdog_waited(w, zero_now_ms(), since), line, sizeof(line));
    } else {
        snprintf(line, sizeof(line), "the job is ending: rank %d's watchdog ended it (its message says why)",
                 w->world_of_local[ender]);
    }
    zero_watchdog_end(w, line, 0);
}

// 1 when a running rank of the node other than this one is in file I/O and has not ended the
// job yet (after zero_watchdog_resolve): its own watchdog times that wait and names the file
static int zero_watchdog_io_pending(const ZeroWatchdog* w) {
    for (int i = 0; i < w->local_size; i++) {
        const int64_t* slot = zero_watchdog_slot(w, i);
        if (i != w->local_rank && !w->stopped[i] && __atomic_load_n(&slot[ZERO_SLOT_STATE], __ATOMIC_ACQUIRE) == ZERO_DOING_IO &&
            __atomic_load_n(&slot[ZERO_SLOT_ENDED], __ATOMIC_ACQUIRE) == 0) {
            return 1;
        }
    }
    return 0;
}

static void* zero_watchdog_loop(void* arg) {
    ZeroWatchdog* w = (ZeroWatchdog*)arg;
    char line[1024];
    while (!w->stopping) {
        usleep(ZERO_WATCHDOG_TICK_MS * 1000);
        zero_watchdog_tick(w);
        for (int i = 0; i < w->local_size; i++) {
            if (i != w->local_rank && __atomic_load_n(&zero_watchdog_slot(w, i)[ZERO_SLOT_ENDED], __ATOMIC_ACQUIRE) != 0) {
                zero_watchdog_follow(w, i);
            }
        }
        double now = zero_now_ms();
        int64_t io = zero_watchdog_io_late(w, now, line, sizeof(line));
        if (io != 0) {
            zero_watchdog_resolve(w, now);  // (who runs, to wait for their lines)
            zero_watchdog_end(w, line, 1);
        }
        int64_t since = __atomic_load_n(&zero_watch.since, __ATOMIC_ACQUIRE);
        if (since == 0 || zero_watchdog_waited(w, now, since) < w->timeout_ms) { continue; }
        zero_watchdog_resolve(w, now);
        if (__atomic_load_n(&zero_watch.since, __ATOMIC_ACQUIRE) != since) { continue; }  // it completed meanwhile
        double waited = zero_watchdog_waited(w, zero_now_ms(), since);
        // a rank this one waits for is stuck in file I/O: its watchdog, which names the file, ends
        // the job first (its wait began later), unless it has not within one more timeout
        if (waited < 2 * w->timeout_ms && zero_watchdog_io_pending(w)) { continue; }
        zero_watchdog_collective_line(w, waited, line, sizeof(line));
        zero_watchdog_end(w, line, 1);
    }
    return NULL;
}

static void zero_watchdog_free(ZeroWatchdog* w) {
    free(w->world_of_local);
    free(w->beat_seen);
    free(w->beat_moved);
    free(w->stopped);
    w->world_of_local = NULL; w->beat_seen = NULL; w->beat_moved = NULL; w->stopped = NULL;
}

int zero_watchdog_start(double timeout_s, MPI_Comm comm) {
    ZeroWatchdog* w = &zero_watchdog;
    if (timeout_s <= 0 || w->on) { return 0; }
    w->timeout_ms = timeout_s * 1e3;
    MPI_Comm_rank(comm, &w->rank);
    MPI_Comm_size(comm, &w->world);
    if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, w->rank, MPI_INFO_NULL, &w->node) != MPI_SUCCESS) {
        return zero_error("collective watchdog: cannot split the ranks by node");
    }
    MPI_Comm_rank(w->node, &w->local_rank);
    MPI_Comm_size(w->node, &w->local_size);
    int64_t* mine = NULL;
    if (MPI_Win_allocate_shared(ZERO_SLOT_FIELDS * sizeof(int64_t), sizeof(int64_t), MPI_INFO_NULL, w->node, &mine,
                                &w->win) != MPI_SUCCESS) {
        MPI_Comm_free(&w->node);
        return zero_error("collective watchdog: cannot allocate the node's shared window");
    }
    MPI_Aint size = 0;
    int disp = 0;
    // the slots are contiguous (no alloc_shared_noncontig): rank 0's base addresses them all
    MPI_Win_shared_query(w->win, 0, &size, &disp, &w->slots);
    for (int f = 0; f < ZERO_SLOT_FIELDS; f++) { zero_watchdog_slot(w, w->local_rank)[f] = 0; }
    size_t n = (size_t)w->local_size;
    w->world_of_local = (int*)malloc(n * sizeof(int));
    w->beat_seen = (int64_t*)calloc(n, sizeof(int64_t));
    w->beat_moved = (double*)malloc(n * sizeof(double));
    w->stopped = (int*)calloc(n, sizeof(int));
    int ok = w->world_of_local != NULL && w->beat_seen != NULL && w->beat_moved != NULL && w->stopped != NULL;
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, w->node);  // (every rank frees the window alike)
    if (!ok) {
        zero_watchdog_free(w);
        MPI_Win_free(&w->win);
        MPI_Comm_free(&w->node);
        return zero_error("collective watchdog: out of memory");
    }
    MPI_Allgather(&w->rank, 1, MPI_INT, w->world_of_local, 1, MPI_INT, w->node);
    MPI_Barrier(w->node);  // every slot zeroed before anyone reads one
    double now = zero_now_ms();
    for (size_t i = 0; i < n; i++) { w->beat_moved[i] = now; }
    w->last_look = now;
    w->resumed_at = 0;
    zero_watch.rank = w->rank;
    zero_watch.slot = zero_watchdog_slot(w, w->local_rank);
    zero_watch_publish();
    w->on = 1;
    w->stopping = 0;
    if (pthread_create(&w->thread, NULL, zero_watchdog_loop, w) != 0) {
        w->on = 0;
        return zero_error("collective watchdog: cannot start its thread");
    }
    return 0;
}

void zero_watchdog_stop(void) {
    ZeroWatchdog* w = &zero_watchdog;
    if (!w->on) { return; }
    w->stopping = 1;
    pthread_join(w->thread, NULL);
    w->on = 0;
    zero_watch.slot = NULL;
    MPI_Win_free(&w->win);
    MPI_Comm_free(&w->node);
    zero_watchdog_free(w);
}
