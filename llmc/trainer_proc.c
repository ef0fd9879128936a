// A training run's process plumbing (llmc/trainer_proc.h): failures, main.log and main.jsonl, the all-reduce of a float.
#include "llmc/trainer_proc.h" // the interface: mpiCheck, zeroCheck, Zero
#include <mpi.h>              // MPI_Abort, MPI_Allreduce, MPI_Finalize
#include "llmc/utils.h"       // llmc_errmsg
#include <stdio.h>            // fprintf, snprintf, fdopen, vfprintf
#include <stdarg.h>           // va_list: log_line's format
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

// DIR/name opened for appending (trunc: emptied), or a message and the run stopped
static FILE* log_open(const char* dir, const char* name, int trunc, char* path, size_t cap) {
    snprintf(path, cap, "%s/%s", dir, name);
    const char* why = NULL;  // file_open's reason
    int fd = file_open(path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | (trunc ? O_TRUNC : 0), 0666, FILE_REGULAR, &why);
    FILE* fp = fd >= 0 ? fdopen(fd, "a") : NULL;
    if (fp == NULL) {
        fprintf(stderr, "error: cannot write %s: %s\n", path, fd >= 0 ? strerror(errno) : why);
        if (fd >= 0) { close(fd); }
        trainer_abort();
    }
    return fp;
}

void log_fresh(const char* dir, int rank) {
    if (dir == NULL || rank != 0) { return; }
    const char* names[2] = {"main.log", "main.jsonl"};
    for (int i = 0; i < 2; i++) {
        char path[4096];
        FILE* fp = log_open(dir, names[i], 1, path, sizeof(path));
        if (fclose(fp) != 0) {
            fprintf(stderr, "error: cannot write %s: %s\n", path, strerror(errno));
            trainer_abort();
        }
    }
}

void log_line(const char* dir, int rank, const char* name, const char* fmt, ...) {
    if (dir == NULL || rank != 0) { return; }
    char path[4096];
    const char* why = NULL;  // the write's reason
    FILE* fp = log_open(dir, name, 0, path, sizeof(path));
    va_list ap;
    va_start(ap, fmt);
    int ok = vfprintf(fp, fmt, ap) > 0;
    va_end(ap);
    if (!ok) { why = strerror(errno); }
    if (fclose(fp) != 0 && ok) { ok = 0; why = strerror(errno); }
    if (!ok) {
        fprintf(stderr, "error: cannot write %s: %s\n", path, why);
        trainer_abort();
    }
}

float allreduce_mean(float x, int world, const char* what) {
    mpiWatched(what, MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
    return x / world;
}
