// A training run's process plumbing (llmc/trainer_proc.h): failures, main.log, the all-reduce of a float.
#include "llmc/trainer_proc.h" // the interface: mpiCheck, zeroCheck, Zero
#include <mpi.h>              // MPI_Abort, MPI_Allreduce, MPI_Finalize
#include "llmc/utils.h"       // llmc_errmsg
#include <stdio.h>            // fprintf, snprintf, fdopen
#include <stdlib.h>           // exit
#include <string.h>           // strerror
#include <errno.h>            // errno: why main.log could not be written
#include <fcntl.h>            // O_APPEND, O_NOFOLLOW: main.log appended without following a link
#include <unistd.h>           // close
#include "common/file.h"      // file_open: main.log opened without blocking on a FIFO
#include "zero3/nvme.h"       // nvme_remove_all: no swap file outlives a failed run
#include "zero3/util.h"     // zero_error, zero_errmsg, zero_now_ms
#include "zero3/watchdog.h"  // zero_watchdog_stop

void trainer_abort(void) {
    zero_watch_exit_hooks();
    MPI_Abort(MPI_COMM_WORLD, 1);
}

void mpi_check(int rc, const char* file, int line) {
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, msg, &len);
        fprintf(stderr, "error: MPI: %s [%s:%d]\n", msg, file, line);
        trainer_abort();
    }
}

void zero_fail(const char* file, int line) {
    fprintf(stderr, "error: %s [%s:%d]\n", zero_errmsg(), file, line);
    trainer_abort();
}

void trainer_fail(int rank) {
    fprintf(stderr, "error: rank %d: %s\n", rank, llmc_errmsg());
    trainer_abort();
}

void die_all(int rank, const char* msg) {
    if (rank == 0) { fprintf(stderr, "error: %s\n", msg); }
    nvme_remove_all();
    zero_watchdog_stop();
    MPI_Finalize();
    exit(EXIT_FAILURE);
}

void log_line(const char* dir, int rank, const char* fmt, int step, float value) {
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

float allreduce_mean(float x, int world, const char* what) {
    mpiWatched(what, MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
    return x / world;
}
