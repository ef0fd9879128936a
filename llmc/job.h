/*
 The job around a run, process by process (llmc/trainer.h calls these): the launcher and
 MPI agreeing on the ranks, one job per output directory, and the signals that stop a run.

 - The launcher (job_launcher_read before MPI_Init, job_launcher_check after): a process
   that MPI sees alone (a world of 1) while its launcher says it started several (srun
   without an MPI plugin: every process initialises as a singleton; or an MPI other than
   the launcher's) would train alone and write the same -o as its siblings. It is refused,
   saying how to launch. The launcher's word, closest first: OMPI_COMM_WORLD_SIZE (Open
   MPI's mpirun), PMI_SIZE (MPICH's and Intel MPI's launchers, srun --mpi=pmi2),
   SLURM_STEP_NUM_TASKS (srun: the tasks of this step), SLURM_NTASKS / SLURM_NPROCS only
   inside a step (SLURM_STEP_ID set: a batch script, which runs once, sees the allocation's
   task count there); and this process's rank, OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK,
   SLURM_PROCID (in a step): above 0 in a world of 1 is the same mistake. Read before
   MPI_Init, which sets some of them for a singleton (PMIX_RANK=0). Built with Open MPI,
   the read itself fails (saying how to launch) when srun started several tasks with no
   MPI plugin (no PMIx, PMI or mpirun variable): Open MPI's MPI_Init would abort there
   with a page blaming how Open MPI was built.
 - One job per directory (job_lock_dir, rank 0): -o/job.lock, locked with common/file.h's
   file_lock while the job lives, holds the holder's pid, host and start time; a second
   job on the same -o is refused with them and touches nothing. The file stays when the
   job ends (removing it would let a third job lock a new file while a second still holds
   the old one): a lock left by a killed job is no lock, the next job takes it.
 - Signals: SIGTERM, SIGINT and SIGUSR1 (a scheduler's preemption notice). The first asks
   the step loop to stop at its next step boundary (job_stop_signal; trainer_run writes a
   checkpoint there and exits 0) and says so on stderr. A process that is stuck elsewhere
   (a read of a hung filesystem, a collective) would not get there: a second of these
   signals, or the first not taken up by the step loop (job_stop_seen) within --stop-grace
   seconds (SIGALRM), ends it at once, on whichever rank it reaches, with one line saying
   what it was doing (job_doing), after this rank's cleanup (the trainer's: its swap files,
   unlinked by name), with exit status 128 + the signal's number, the shell's convention
   for a process a signal ended. Everything in the handlers is async-signal-safe: write,
   unlink, alarm, _exit, and a line built by hand.

 Test hook (docs/TESTING.md): ZERO3_TEST_HANG=TEXT blocks the process, once it starts doing
 something whose description (job_doing) begins with TEXT, in a read of a pipe nothing
 writes (saying so on stderr first): a stuck system call the first signal does not end
 (SA_RESTART restarts it).
*/
#ifndef LLMC_JOB_H
#define LLMC_JOB_H

#include <signal.h>      // sigaction, sig_atomic_t, SIGTERM, SIGINT, SIGUSR1, SIGALRM

#ifdef __cplusplus
extern "C" {
#endif

// ----------------------------------------------------------------------------
// the launcher against MPI

typedef struct {
    char size_var[32];  // the variable that gave size ("" none)
    long size;          // processes the launcher started, 0 unknown
    char rank_var[32];
    long rank;          // this process's rank by the launcher, -1 unknown
} JobLauncher;

// what the launcher says (the header's list); call before MPI_Init. -1 with llmc_errmsg()
// (Open MPI builds) where srun started several tasks with no MPI plugin, else 0
int job_launcher_read(JobLauncher* l);

// 0 when MPI's world of `world` ranks is what the launcher started; else -1 with
// llmc_errmsg() saying what is wrong and how to launch
int job_launcher_check(const JobLauncher* l, int world);

// llm.c's multi-node flags against MPI: -pn processes, -pr this one's rank, -pg processes
// per node (each -1: not given) must be MPI's world size, rank and ranks on this node. 0
// when they agree; else -1 with llmc_errmsg() naming the flag, both values and how to
// launch (a world of 1 where -pn says more: srun without PMIx, or no mpirun)
int job_layout_check(int processes, int rank, int per_node, int world, int world_rank, int local_size);

// ----------------------------------------------------------------------------
// one job per directory

#define JOB_LOCK_NAME "job.lock"

// Locks dir (-o, which exists) for this job: rank 0 calls it. 0 (also, with a warning,
// where the filesystem has no locks), or -1 with llmc_errmsg() naming the job that holds
// it, or why the lock file cannot be opened.
int job_lock_dir(const char* dir);

// ----------------------------------------------------------------------------
// what the process is doing, for the line a signal ends it with

// says what the process starts doing ("training step 5"), a printf format
__attribute__((format(printf, 1, 2)))
void job_doing(const char* fmt, ...);

// ----------------------------------------------------------------------------
// signals

static inline const char* job_signal_name(int sig) {
    return sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : sig == SIGUSR1 ? "SIGUSR1" : "a signal";
}

// Installs the handlers (after MPI_Init, so that they are ours) for this rank; grace_s:
// --stop-grace (0: only a second signal ends a stuck process); cleanup: run before the
// process ends, async-signal-safe (NULL: none)
void job_signals_install(int rank, int grace_s, void (*cleanup)(void));

// the stop signal received (its number), 0 none
int job_stop_signal(void);

// the step loop takes the stop up: no grace period runs out any more
void job_stop_seen(void);

#ifdef __cplusplus
}
#endif

#endif // LLMC_JOB_H
