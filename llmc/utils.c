// Checked outputs, the run's inputs and files written whole (llmc/utils.h).
#include "llmc/utils.h" // the interface, its types and the headers its bodies use
#include <fcntl.h>   // open: O_EXCL, O_NOFOLLOW for the temporary of an AtomicFile; a directory, to fsync it
#include <unistd.h>  // fsync, close, unlink
#include <sys/stat.h> // lstat, stat: what is at an output's path, st_dev/st_ino of the inputs
#include "common/file.h" // file_kind: the words for what a file is (its file_open opens every input)

// llmc_error's message, one per thread
_Thread_local char llmc_errbuf[1024];

// The files a run reads (-e, the shards, the tokenizer, --ds-config), by device and inode:
// an output given the same file under another name (a link, "./x", a typo of -o) would
// destroy what the run, or the next one, reads.
typedef struct { dev_t dev; ino_t ino; char what[32]; char* path; } LlmcInput;
static LlmcInput* llmc_inputs;
static int llmc_num_inputs;

int llmc_input_add(const char* path, const char* what) {
    struct stat st;
    if (path == NULL || stat(path, &st) != 0) { return 0; }
    LlmcInput* grown = (LlmcInput*)realloc(llmc_inputs, (llmc_num_inputs + 1) * sizeof(LlmcInput));
    if (grown == NULL) { return llmc_error("out of memory recording the input %s", path); }
    llmc_inputs = grown;
    LlmcInput* in = &llmc_inputs[llmc_num_inputs];
    in->path = strdup(path);
    if (in->path == NULL) { return llmc_error("out of memory recording the input %s", path); }
    llmc_num_inputs++;
    in->dev = st.st_dev;
    in->ino = st.st_ino;
    snprintf(in->what, sizeof(in->what), "%s", what);
    return 0;
}

int output_input_check(const char* path, const struct stat* st) {
    for (int i = 0; i < llmc_num_inputs; i++) {
        if (llmc_inputs[i].dev == st->st_dev && llmc_inputs[i].ino == st->st_ino) {
            int other = strcmp(llmc_inputs[i].path, path) != 0;
            return llmc_error("refusing to replace %s: it is an input of this run (%s)%s%s", path, llmc_inputs[i].what,
                              other ? ", the same file as " : "", other ? llmc_inputs[i].path : "");
        }
    }
    return 0;
}

int output_check(const char* path) {
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT) { return 0; }
        return llmc_error("cannot check the output %s: %s", path, strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) { return llmc_error("refusing to replace %s: it is %s", path, file_kind(st.st_mode)); }
    return output_input_check(path, &st);
}

int output_dir_check(const char* dir) {
    struct stat st;
    if (stat(dir, &st) != 0) { return llmc_error("%s: %s", dir, strerror(errno)); }
    if (!S_ISDIR(st.st_mode)) { return llmc_error("%s is not a directory", dir); }
    char probe[4200];
    snprintf(probe, sizeof(probe), "%s/.write_test_%ld", dir, (long)getpid());
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) { return llmc_error("cannot create files in %s: %s", dir, strerror(errno)); }
    close(fd);
    unlink(probe);
    return 0;
}

int atomic_open(AtomicFile* f, const char* path) {
    f->fp = NULL;
    if (snprintf(f->path, sizeof(f->path), "%s", path) >= (int)sizeof(f->path)) { return llmc_error("path too long: %s", path); }
    snprintf(f->tmp, sizeof(f->tmp), "%s.tmp", path);
    if (output_check(path) != 0) { return -1; }
    int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
    int fd = open(f->tmp, flags, 0666);
    if (fd < 0 && errno == EEXIST) {
        struct stat st;
        if (lstat(f->tmp, &st) == 0 && !S_ISREG(st.st_mode)) {
            return llmc_error("refusing to replace %s: it is %s", f->tmp, file_kind(st.st_mode));
        }
        if (unlink(f->tmp) == 0) { fd = open(f->tmp, flags, 0666); }
    }
    if (fd < 0) { return llmc_error("cannot create %s: %s", f->tmp, strerror(errno)); }
    f->fp = fdopen(fd, "wb");
    if (f->fp == NULL) {
        int err = errno;
        close(fd);
        unlink(f->tmp);
        return llmc_error("cannot create %s: %s", f->tmp, strerror(err));
    }
    return 0;
}

void path_dir(const char* path, char* dir, size_t n) {
    snprintf(dir, n, "%s", path);
    char* slash = strrchr(dir, '/');
    if (slash == NULL) { snprintf(dir, n, "."); } else if (slash == dir) { slash[1] = '\0'; } else { *slash = '\0'; }
}

int path_in_dir(const char* path, const char* dir) {
    char parent[4096];
    path_dir(path, parent, sizeof(parent));
    struct stat a, b;
    return stat(parent, &a) == 0 && stat(dir, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

int fsync_parent_dir(const char* path) {
    char dir[4096];
    path_dir(path, dir, sizeof(dir));
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) { return -1; }
    int rc = fsync(fd);
    int err = errno;
    close(fd);
    errno = err;
    return rc;
}

int atomic_commit(AtomicFile* f, int ok) {
    int err = errno;
    if (ok && (fflush(f->fp) != 0 || fsync(fileno(f->fp)) != 0)) { ok = 0; err = errno; }
    if (fclose(f->fp) != 0 && ok) { ok = 0; err = errno; }
    f->fp = NULL;
    if (ok && rename(f->tmp, f->path) == 0) {
        if (fsync_parent_dir(f->path) == 0) { return 0; }
        return llmc_error("cannot write %s: syncing its directory failed: %s", f->path, strerror(errno));
    }
    if (ok) { err = errno; }
    remove(f->tmp);
    return llmc_error("cannot write %s: %s", f->path, strerror(err));
}

void atomic_abort(AtomicFile* f) {
    if (f->fp != NULL) { fclose(f->fp); }
    f->fp = NULL;
    remove(f->tmp);
}
