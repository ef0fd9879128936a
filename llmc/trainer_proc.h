/*
 The process plumbing of a training run (llmc/trainer.h): how a failure stops every rank
 (trainer_abort, mpiCheck, zeroCheck, trainer_fail, die_all), main.log's lines (log_line),
 the one all-reduce the run makes of a float (allreduce_mean), and the four unit hooks the
 model's forward and backward reach the engine through (params_fetch, params_release,
 grads_unit, grads_reduce).
*/
#ifndef LLMC_TRAINER_PROC_H
#define LLMC_TRAINER_PROC_H

#include <stdio.h>            // fprintf, snprintf, fdopen
#include <stdlib.h>           // exit
#include <string.h>           // strerror
#include <errno.h>            // errno: why main.log could not be written
#include <fcntl.h>            // O_APPEND, O_NOFOLLOW: main.log appended without following a link
#include <unistd.h>           // close
#include <mpi.h>              // MPI_Abort, MPI_Allreduce, MPI_Finalize
#include "llmc/utils.h"       // llmc_errmsg
#include "common/file.h"      // file_open: main.log opened without blocking on a FIFO
#include "zero3/zero.h"       // Zero, zero_fetch ...; zero_watch_* (zero3/watchdog.h)
#include "zero3/nvme.h"       // nvme_remove_all: no swap file outlives a failed run

// Every failure after start-up ends here, after its message: this rank's swap files go and
// its NCCL communicators are aborted (zero_watch_exit_hooks: MPI_Abort runs no cleanup),
// then the whole job stops.
static void trainer_abort(void) {
    zero_watch_exit_hooks();
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static void mpi_check(int rc, const char* file, int line) {
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, msg, &len);
        fprintf(stderr, "error: MPI: %s [%s:%d]\n", msg, file, line);
        trainer_abort();
    }
}
#define mpiCheck(rc) mpi_check((rc), __FILE__, __LINE__)
// a blocking MPI call of the trainer, told to --collective-timeout's watchdog as `what`
#define mpiWatched(what, call) do { zero_watch_enter(what, -1); int rc_ = (call); zero_watch_leave(); mpiCheck(rc_); } while (0)

// An engine call failed: a bug, a dead rank or a device error. Stop every rank.
static void zero_fail(const char* file, int line) {
    fprintf(stderr, "error: %s [%s:%d]\n", zero_errmsg(), file, line);
    trainer_abort();
}
#define zeroCheck(rc) do { if ((rc) != 0) { zero_fail(__FILE__, __LINE__); } } while (0)

// The unit hooks: every parameter and gradient access of the forward and backward goes
// through the engine, which gathers (stage 3), releases and reduces units in the order
// of the schedule registered at its init (gpt2_schedule). They hand out the engine's
// element type: float on the CPU, floatX on the GPU.
static inline void* params_fetch(Zero* z, int u) {
    void* p = NULL;
    zeroCheck(zero_fetch(z, u, &p));
    return p;
}
static inline void params_release(Zero* z, int u) { zeroCheck(zero_release(z, u)); }
static inline void* grads_unit(Zero* z, int u) {
    void* g = NULL;
    zeroCheck(zero_grad(z, u, &g));
    return g;
}
static inline void grads_reduce(Zero* z, int u) { zeroCheck(zero_reduce(z, u)); }

// a trainer-layer call failed on this rank: stop every rank
static void trainer_fail(int rank) {
    fprintf(stderr, "error: rank %d: %s\n", rank, llmc_errmsg());
    trainer_abort();
}

// errors every rank sees alike (before training starts, or --max-skipped-steps): print
// once, remove this rank's swap files, stop all
static void die_all(int rank, const char* msg) {
    if (rank == 0) { fprintf(stderr, "error: %s\n", msg); }
    nvme_remove_all();
    zero_watchdog_stop();
    MPI_Finalize();
    exit(EXIT_FAILURE);
}

// One line of llm.c's main.log ("s:%d trl:%f" / "s:%d tel:%f"), from rank 0. A line that
// cannot be written (a full disk, a file-size limit) stops the run: a log with holes would
// pass for a complete one. Opened without following a link: start-up checked the path.
static void log_line(const char* dir, int rank, const char* fmt, int step, float value) {
    if (dir == NULL || rank != 0) { return; }
    char path[4096];
    snprintf(path, sizeof(path), "%s/main.log", dir);
    const char* why = NULL;  // file_open's reason, or the write's
    int fd = file_open(path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW, 0666, FILE_REGULAR, &why);
    FILE* fp = fd >= 0 ? fdopen(fd, "a") : NULL;
    int ok = fp != NULL && fprintf(fp, fmt, step, value) > 0;
    if (!ok && fd >= 0) { why = strerror(errno); }
    if (fp != NULL && fclose(fp) != 0 && ok) { ok = 0; why = strerror(errno); }
    if (fp == NULL && fd >= 0) { close(fd); }
    if (!ok) {
        fprintf(stderr, "error: cannot write %s: %s\n", path, why);
        trainer_abort();
    }
}

static float allreduce_mean(float x, int world, const char* what) {
    mpiWatched(what, MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
    return x / world;
}

#endif // LLMC_TRAINER_PROC_H
