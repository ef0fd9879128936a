/*
 The process plumbing of a training run (llmc/trainer.h): how a failure stops every rank
 (trainer_abort, mpiCheck, zeroCheck, trainer_fail, die_all), main.log's lines (log_line),
 the one all-reduce the run makes of a float (allreduce_mean), and the four unit hooks the
 model's forward and backward reach the engine through (params_fetch, params_release,
 grads_unit, grads_reduce).
*/
#ifndef LLMC_TRAINER_PROC_H
#define LLMC_TRAINER_PROC_H

#include "zero3/zero.h"       // Zero, zero_fetch ...; zero_watch_* (zero3/watchdog.h)
#include "zero3/watch.h"     // zero_watch_enter/leave: mpiWatched

#ifdef __cplusplus
extern "C" {
#endif

// Every failure after start-up ends here, after its message: this rank's swap files go and
// its NCCL communicators are aborted (zero_watch_exit_hooks: MPI_Abort runs no cleanup),
// then the whole job stops.
void trainer_abort(void);

// an MPI call's return code: anything but MPI_SUCCESS prints MPI's words and file:line,
// then trainer_abort
void mpi_check(int rc, const char* file, int line);
#define mpiCheck(rc) mpi_check((rc), __FILE__, __LINE__)
// a blocking MPI call of the trainer, told to --collective-timeout's watchdog as `what`
#define mpiWatched(what, call) do { zero_watch_enter(what, -1); int rc_ = (call); zero_watch_leave(); mpiCheck(rc_); } while (0)

// An engine call failed: a bug, a dead rank or a device error. Stop every rank.
void zero_fail(const char* file, int line);
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
void trainer_fail(int rank);

// errors every rank sees alike (before training starts, or --max-skipped-steps): print
// once, remove this rank's swap files, stop all
void die_all(int rank, const char* msg);

// One line appended to DIR/name, from rank 0: llm.c's main.log ("s:%d trl:%.4f lr:%.6f
// norm:%.2f", "s:%d tel:%.4f") or the step-by-step JSON lines of main.jsonl. A line that
// cannot be written (a full disk, a file-size limit) stops the run: a log with holes would
// pass for a complete one. Opened without following a link: start-up checked the path.
void log_line(const char* dir, int rank, const char* name, const char* fmt, ...);

// A new run's logs (not a resumed one's: it appends, as llm.c's does): DIR's main.log and
// main.jsonl emptied, by rank 0. A failure stops the run as log_line's does.
void log_fresh(const char* dir, int rank);

// x averaged over the world's ranks (an all-reduce told to the watchdog as `what`)
float allreduce_mean(float x, int world, const char* what);

#ifdef __cplusplus
}
#endif

#endif // LLMC_TRAINER_PROC_H
