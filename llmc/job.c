// The job around a run (llmc/job.h): the launcher's check, -o's lock, what the process is doing, the stop signals.
#include "llmc/job.h" // the interface, its types and the headers its bodies use
#include <stdio.h>       // snprintf, vsnprintf, fprintf
#include <stdlib.h>      // getenv, strtol
#include <stdarg.h>      // va_list: job_doing's format
#include <string.h>      // strlen, strncmp, memset, strerror
#include <errno.h>       // errno, EAGAIN, EACCES
#include <time.h>        // time, localtime_r, strftime: the lock holder's start time
#include <fcntl.h>       // O_RDWR, O_CREAT, O_NOFOLLOW: the lock file
#include <unistd.h>      // write, alarm, _exit, pipe, read, gethostname, getpid, ftruncate, pwrite, pread, usleep
#include <mpi.h>         // OPEN_MPI: which MPI this is built with (job_launcher_plugin_check)
#include "llmc/utils.h"  // llmc_error, llmc_input_add: no output replaces the lock file
#include "common/file.h" // file_open, file_lock: the lock file, opened without blocking, locked as the swap files are

// the process's state: -o's lock, what it is doing, the stop signals
static int job_lock_fd = -1;  // held open for the whole process: closing it would drop the lock

// two buffers: the one published is never written, so a handler reads a whole line
static char job_doing_text[2][320] = {"starting up", ""};
static volatile sig_atomic_t job_doing_cur;

static int job_rank;

static volatile sig_atomic_t job_signal;  // the first stop signal, 0 none
static volatile sig_atomic_t job_seen;    // the step loop has taken it up
static int job_grace_s;
static void (*job_cleanup)(void);         // async-signal-safe: run before the process ends (and at the first signal)

// a line built without stdio (async-signal-safe), written to stderr at the end
typedef struct { char buf[768]; size_t len; } JobLine;

// a non-negative integer from variable `name`, else -1
static long job_env_long(const char* name) {
    const char* s = getenv(name);
    char* end = NULL;
    if (s == NULL || *s == '\0') { return -1; }
    long v = strtol(s, &end, 10);
    return *end == '\0' && v >= 0 ? v : -1;
}

// the first of names[0..n) set to a number: into var and *value
static void job_env_first(const char* const* names, int n, char* var, size_t len, long* value) {
    for (int i = 0; i < n; i++) {
        long v = job_env_long(names[i]);
        if (v >= 0) { snprintf(var, len, "%s", names[i]); *value = v; return; }
    }
}

// srun started this process as one of several tasks with no MPI plugin (--mpi=none, or
// MpiDefault=none): no PMIx or PMI variable, no mpirun's. Open MPI cannot start a rank that
// way: its MPI_Init aborts with a page on how Open MPI is built (the build is not what is
// wrong), or, outside a real step, makes a singleton. Refused here, before MPI_Init, saying
// how to launch. Only for Open MPI: an MPICH built on Slurm's own PMI-1 library does start
// under --mpi=none (job_launcher_check still catches a world of 1 after MPI_Init).
static int job_launcher_plugin_check(const JobLauncher* l, int step) {
#ifdef OPEN_MPI
    static const char* const mpi_vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMIX_NAMESPACE", "PMI_RANK", "PMI_FD", "PMI_SIZE"};
    if (!step || strcmp(l->size_var, "SLURM_STEP_NUM_TASKS") != 0 || l->size < 2) { return 0; }
    for (size_t i = 0; i < sizeof(mpi_vars) / sizeof(mpi_vars[0]); i++) {
        if (getenv(mpi_vars[i]) != NULL) { return 0; }
    }
    // every task says it once, with its rank: srun shows which ones ended
    return llmc_error("this process is one of %ld processes its launcher started (SLURM_STEP_NUM_TASKS=%ld, "
            "SLURM_PROCID=%ld), but srun gave it no MPI plugin (no PMIX_RANK or PMI_RANK: srun --mpi=none, or "
            "MpiDefault=none in slurm.conf): Open MPI cannot start its ranks that way, and each process would train "
            "alone, writing the same files. Start the ranks through MPI: srun --mpi=pmix (or another plugin of "
            "`srun --mpi=list` that this MPI supports), or the mpirun of the MPI the trainer was built with",
            l->size, l->size, job_env_long("SLURM_PROCID"));
#else
    (void)l; (void)step;
    return 0;
#endif
}

int job_launcher_read(JobLauncher* l) {
    memset(l, 0, sizeof(*l));
    l->rank = -1;
    int step = getenv("SLURM_STEP_ID") != NULL || getenv("SLURM_STEPID") != NULL;
    static const char* const sizes[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"};
    static const char* const ranks[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"};
    job_env_first(sizes, step ? 5 : 3, l->size_var, sizeof(l->size_var), &l->size);
    job_env_first(ranks, step ? 4 : 3, l->rank_var, sizeof(l->rank_var), &l->rank);
    return job_launcher_plugin_check(l, step);
}

int job_launcher_check(const JobLauncher* l, int world) {
    if (world != 1) { return 0; }
    char said[160];
    if (l->size > 1) {
        snprintf(said, sizeof(said), "one of %ld processes its launcher started (%s=%ld)", l->size, l->size_var, l->size);
    } else if (l->rank > 0) {
        snprintf(said, sizeof(said), "rank %ld of its launcher's job (%s=%ld)", l->rank, l->rank_var, l->rank);
    } else {
        return 0;
    }
    return llmc_error("this process is %s, but MPI sees a world of 1: each process would train alone, writing the same "
                      "files. Start the ranks through MPI: srun --mpi=pmix (or another plugin of `srun --mpi=list` that this "
                      "MPI supports), or the mpirun of the MPI the trainer was built with", said);
}

int job_layout_check(int processes, int rank, int per_node, int world, int world_rank, int local_size) {
    const char* how = "start the ranks through MPI: srun --mpi=pmix, or the mpirun of the MPI the trainer was built with";
    if (processes > 0 && processes != world) {
        return llmc_error("flag -pn %d: MPI sees a world of %d process%s%s; %s", processes, world, world == 1 ? "" : "es",
                          world == 1 ? " (each process would train alone)" : "", how);
    }
    if (rank >= 0 && rank != world_rank) {
        return llmc_error("flag -pr %d: MPI made this process rank %d of %d; %s", rank, world_rank, world, how);
    }
    if (per_node > 0 && per_node != local_size) {
        return llmc_error("flag -pg %d: MPI put %d process%s on this node (one per GPU is what -pg means); %s, with -pg "
                          "processes on each node", per_node, local_size, local_size == 1 ? "" : "es", how);
    }
    return 0;
}

// "pid P on host H, started T" of the job holding fd's lock (holder: F_GETLK's pid, -1
// unknown), from the file; the holder writes it just after locking, so an empty file is
// read again for up to a second
static void job_lock_holder(int fd, long holder, char* out, size_t len) {
    char text[256];
    ssize_t n = 0;
    for (int tries = 0; tries < 10 && n <= 0; tries++) {
        if (tries > 0) { usleep(100000); }
        n = pread(fd, text, sizeof(text) - 1, 0);
    }
    size_t k = 0;
    for (ssize_t i = 0; i < n && text[i] != '\n' && k + 1 < len; i++) {
        out[k++] = text[i] >= 32 && text[i] < 127 ? text[i] : '?';  // the file is anybody's: nothing unprintable echoed
    }
    out[k] = '\0';
    if (k == 0) { snprintf(out, len, holder > 0 ? "process %ld" : "a process", holder); }
}

int job_lock_dir(const char* dir) {
    char path[4200];
    const char* why = NULL;
    long holder = -1;
    snprintf(path, sizeof(path), "%s/" JOB_LOCK_NAME, dir);
    int fd = file_open(path, O_RDWR | O_CREAT | O_NOFOLLOW, 0644, FILE_REGULAR, &why);
    if (fd < 0) { return llmc_error("flag -o: cannot open the lock file %s: %s", path, why); }
    if (file_lock(fd, &holder) != 0) {
        int e = errno;
        if (e == EAGAIN || e == EACCES) {
            char who[256];
            job_lock_holder(fd, holder, who, sizeof(who));
            close(fd);
            return llmc_error("flag -o: %s is in use by another job: %s, holding %s. Give each job its own -o, or wait "
                              "for that one to end", dir, who, path);
        }
        close(fd);
        fprintf(stderr, "warning: cannot lock %s: %s; a second job on this -o would not be refused\n", path, strerror(e));
        return 0;
    }
    char host[256] = "?", when[64] = "?", line[512];
    gethostname(host, sizeof(host) - 1);
    host[sizeof(host) - 1] = '\0';
    time_t now = time(NULL);
    struct tm tm;
    if (localtime_r(&now, &tm) != NULL) { strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S %z", &tm); }
    int n = snprintf(line, sizeof(line), "pid %ld on host %s, started %s\n", (long)getpid(), host, when);
    // best effort: a job refused without it still names the pid (F_GETLK)
    if (ftruncate(fd, 0) != 0 || pwrite(fd, line, (size_t)n, 0) != (ssize_t)n) {
        fprintf(stderr, "warning: cannot write %s: %s\n", path, strerror(errno));
    }
    job_lock_fd = fd;
    return llmc_input_add(path, "the lock of -o");
}

// the test hook's block, said first so that a test knows when to signal
static void job_test_hang(const char* doing) {
    int p[2];
    char c;
    fprintf(stderr, "ZERO3_TEST_HANG: rank %d blocks while %s\n", job_rank, doing);
    if (pipe(p) == 0) { while (read(p[0], &c, 1) != 0) {} }  // nothing writes, the write end stays open: for ever
}

void job_doing(const char* fmt, ...) {
    int next = 1 - job_doing_cur;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(job_doing_text[next], sizeof(job_doing_text[next]), fmt, ap);
    va_end(ap);
    job_doing_cur = next;
    const char* hang = getenv("ZERO3_TEST_HANG");  // test hook (the header)
    if (hang != NULL && *hang != '\0' && strncmp(job_doing_text[next], hang, strlen(hang)) == 0) { job_test_hang(job_doing_text[next]); }
}

static void job_line_add(JobLine* l, const char* s) {
    while (*s != '\0' && l->len + 1 < sizeof(l->buf)) { l->buf[l->len++] = *s++; }
}

static void job_line_num(JobLine* l, long v) {
    char d[24];
    int n = 0;
    unsigned long u = v < 0 ? 0ul - (unsigned long)v : (unsigned long)v;
    do { d[n++] = (char)('0' + u % 10); u /= 10; } while (u > 0 && n < (int)sizeof(d));
    if (v < 0) { job_line_add(l, "-"); }
    while (n > 0 && l->len + 1 < sizeof(l->buf)) { l->buf[l->len++] = d[--n]; }
}

static void job_line_write(JobLine* l) {
    job_line_add(l, "\n");
    ssize_t w = write(STDERR_FILENO, l->buf, l->len);
    (void)w;
}

// "<head>rank R: <before><the signal's name><after> while <what the process is doing>"
static void job_line_begin(JobLine* l, const char* head, const char* before, int sig, const char* after) {
    l->len = 0;
    job_line_add(l, head);
    job_line_add(l, "rank ");
    job_line_num(l, job_rank);
    job_line_add(l, ": ");
    job_line_add(l, before);
    job_line_add(l, job_signal_name(sig));
    job_line_add(l, after);
    job_line_add(l, " while ");
    job_line_add(l, job_doing_text[job_doing_cur]);
}

// ends the process for `sig` (the message's `what` says why), from a handler
static void job_end(int sig, const char* what) {
    JobLine l;
    job_line_begin(&l, "error: ", "", sig, what);
    job_line_add(&l, ": ending the process now (exit ");
    job_line_num(&l, 128 + sig);
    job_line_add(&l, ")");
    job_line_write(&l);
    if (job_cleanup != NULL) { job_cleanup(); }
    _exit(128 + sig);
}

static void job_on_signal(int sig) {
    int saved = errno;
    if (job_cleanup != NULL) { job_cleanup(); }  // now already: a SIGKILL may follow (mpirun ending the job)
    if (job_signal != 0) { job_end(sig, " again"); }
    job_signal = sig;
    JobLine l;
    job_line_begin(&l, "", "received ", sig, "");
    job_line_add(&l, ": stopping at the next step boundary (another signal");
    if (job_grace_s > 0) {
        job_line_add(&l, ", or ");
        job_line_num(&l, job_grace_s);
        job_line_add(&l, " s without reaching one,");
    }
    job_line_add(&l, " ends the process at once)");
    job_line_write(&l);
    if (job_grace_s > 0) { alarm((unsigned)job_grace_s); }
    errno = saved;
}

static void job_on_alarm(int sig) {
    (void)sig;
    if (job_signal == 0 || job_seen) { return; }
    JobLine l;  // " received N s ago, still not acted on" as job_end's `what`
    l.len = 0;
    job_line_add(&l, " received ");
    job_line_num(&l, job_grace_s);
    job_line_add(&l, " s ago still not acted on (--stop-grace)");
    l.buf[l.len] = '\0';
    job_end(job_signal, l.buf);
}

void job_signals_install(int rank, int grace_s, void (*cleanup)(void)) {
    job_rank = rank;
    job_grace_s = grace_s;
    job_cleanup = cleanup;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = job_on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    // one handler at a time: a second signal waits until the first one's handler is done
    sigaddset(&sa.sa_mask, SIGTERM);
    sigaddset(&sa.sa_mask, SIGINT);
    sigaddset(&sa.sa_mask, SIGUSR1);
    sigaddset(&sa.sa_mask, SIGALRM);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    // SIGINT ignored from the start stays so: a script's background process, which the shell
    // starts that way so that a Ctrl-C meant for the script does not reach it
    struct sigaction was;
    if (sigaction(SIGINT, NULL, &was) == 0 && was.sa_handler != SIG_IGN) { sigaction(SIGINT, &sa, NULL); }
    sa.sa_handler = job_on_alarm;
    sigaction(SIGALRM, &sa, NULL);
}

int job_stop_signal(void) { return job_signal; }

void job_stop_seen(void) {
    job_seen = 1;
    alarm(0);
}
