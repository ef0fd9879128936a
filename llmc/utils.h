/*
 Checked wrappers and the error convention shared by every building block.

 Two styles, on purpose:
 - Library code (llmc/, zero3/) returns 0 on success and -1 on failure, after
   recording one line naming the file or value and what is wrong with llmc_error().
   The caller decides what to do; tests can check failure paths without a crash.
 - Top-level programs (the trainer, tools) use the *Check wrappers, which print
   file:line and exit: the only place the program stops.
*/
#ifndef LLMC_UTILS_H
#define LLMC_UTILS_H

#include <stdio.h>   // FILE, fopen, fread, fwrite, fprintf, vsnprintf
#include <stdlib.h>  // malloc, exit
#include <stdarg.h>  // va_list for llmc_error
#include <string.h>  // strerror, strdup, strcmp
#include <errno.h>   // errno
#include <fcntl.h>   // open: O_EXCL, O_NOFOLLOW for the temporary of an AtomicFile; a directory, to fsync it
#include <unistd.h>  // fsync, close, unlink
#include <sys/stat.h> // lstat, stat: what is at an output's path, st_dev/st_ino of the inputs
#include "common/file.h" // file_kind: the words for what a file is (its file_open opens every input)

// ----------------------------------------------------------------------------
// error messages of library code: one line, kept per thread

#ifdef __cplusplus
static thread_local char llmc_errbuf[1024];  // C++ spelling of _Thread_local
#else
static _Thread_local char llmc_errbuf[1024];
#endif

// records a message (printf format) and returns -1, so: `return llmc_error("...");`
__attribute__((format(printf, 1, 2)))
static inline int llmc_error(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(llmc_errbuf, sizeof(llmc_errbuf), fmt, ap);
    va_end(ap);
    return -1;
}

// the last message recorded by llmc_error on this thread
static inline const char* llmc_errmsg(void) { return llmc_errbuf; }

// ----------------------------------------------------------------------------
// checked wrappers for top-level programs: report file and line, then exit

static inline FILE* fopen_check(const char* path, const char* mode, const char* file, int line) {
    FILE* fp = fopen(path, mode);
    if (fp == NULL) {
        fprintf(stderr, "error: cannot open %s (mode %s): %s [%s:%d]\n", path, mode, strerror(errno), file, line);
        exit(EXIT_FAILURE);
    }
    return fp;
}
#define fopenCheck(path, mode) fopen_check(path, mode, __FILE__, __LINE__)

static inline void fread_check(void* ptr, size_t size, size_t nmemb, FILE* stream, const char* file, int line) {
    size_t got = fread(ptr, size, nmemb, stream);
    if (got != nmemb) {
        fprintf(stderr, "error: short read (%zu of %zu items): %s [%s:%d]\n", got, nmemb,
                feof(stream) ? "unexpected end of file" : strerror(errno), file, line);
        exit(EXIT_FAILURE);
    }
}
#define freadCheck(ptr, size, nmemb, stream) fread_check(ptr, size, nmemb, stream, __FILE__, __LINE__)

static inline void fwrite_check(const void* ptr, size_t size, size_t nmemb, FILE* stream, const char* file, int line) {
    size_t put = fwrite(ptr, size, nmemb, stream);
    if (put != nmemb) {
        fprintf(stderr, "error: short write (%zu of %zu items): %s [%s:%d]\n", put, nmemb, strerror(errno), file, line);
        exit(EXIT_FAILURE);
    }
}
#define fwriteCheck(ptr, size, nmemb, stream) fwrite_check(ptr, size, nmemb, stream, __FILE__, __LINE__)

static inline void* malloc_check(size_t size, const char* file, int line) {
    void* p = malloc(size);
    if (p == NULL && size > 0) {
        fprintf(stderr, "error: out of memory allocating %zu bytes [%s:%d]\n", size, file, line);
        exit(EXIT_FAILURE);
    }
    return p;
}
#define mallocCheck(size) malloc_check(size, __FILE__, __LINE__)

// exits with the library's last message when a call returned non-zero
static inline void llmc_check(int rc, const char* file, int line) {
    if (rc != 0) {
        fprintf(stderr, "error: %s [%s:%d]\n", llmc_errmsg(), file, line);
        exit(EXIT_FAILURE);
    }
}
#define llmcCheck(rc) llmc_check((rc), __FILE__, __LINE__)

// ----------------------------------------------------------------------------
// writing a file whole or not at all

// Every file the trainers and tools write goes through here: the bytes go to PATH.tmp,
// which replaces PATH only once it is complete, closed and on disk (fsync), so a crash, a full disk or an
// error leaves the old file (or none), never a torn one, and never a stray PATH.tmp.
typedef struct {
    FILE* fp;
    char path[4096];
    char tmp[4104];
} AtomicFile;

// ----------------------------------------------------------------------------
// the run's inputs, which no output may replace

// The files a run reads (-e, the shards, the tokenizer, --ds-config), by device and inode:
// an output given the same file under another name (a link, "./x", a typo of -o) would
// destroy what the run, or the next one, reads.
typedef struct { dev_t dev; ino_t ino; char what[32]; char* path; } LlmcInput;
static LlmcInput* llmc_inputs;
static int llmc_num_inputs;

// records PATH as an input, named by the flag that gave it (`what`); a path that does not
// exist (a descriptor such as d12) is no file and is skipped; -1 only when out of memory
static inline int llmc_input_add(const char* path, const char* what) {
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

// 0 when the file at PATH (st: its lstat) is no input of this run; else -1, llmc_errmsg()
// naming PATH, the flag that gave the input and, when it was given under another name, that
static inline int output_input_check(const char* path, const struct stat* st) {
    for (int i = 0; i < llmc_num_inputs; i++) {
        if (llmc_inputs[i].dev == st->st_dev && llmc_inputs[i].ino == st->st_ino) {
            int other = strcmp(llmc_inputs[i].path, path) != 0;
            return llmc_error("refusing to replace %s: it is an input of this run (%s)%s%s", path, llmc_inputs[i].what,
                              other ? ", the same file as " : "", other ? llmc_inputs[i].path : "");
        }
    }
    return 0;
}

// 0 when an output may go to PATH: nothing is there, or a regular file that is no input of
// this run. Else -1, llmc_errmsg() naming PATH and why: a rename over a symlink, a FIFO or
// a device replaces what someone put there on purpose, and one over an input destroys it.
static inline int output_check(const char* path) {
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT) { return 0; }
        return llmc_error("cannot check the output %s: %s", path, strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) { return llmc_error("refusing to replace %s: it is %s", path, file_kind(st.st_mode)); }
    return output_input_check(path, &st);
}

// 0 when DIR is a directory this process can create files in (tried: permissions alone do
// not tell, root passes them on a read-only mount); else -1, llmc_errmsg() naming DIR
static inline int output_dir_check(const char* dir) {
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

// Opens PATH.tmp for writing, after output_check(PATH); -1 with llmc_errmsg() naming the
// path when that fails. The temporary is created afresh (O_EXCL) and never through a link
// (O_NOFOLLOW); a regular one is an earlier crash's leftover and is replaced, anything
// else there is refused.
static inline int atomic_open(AtomicFile* f, const char* path) {
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

// the directory part of PATH into dir (n bytes): "." for a bare name, "/" for a name in the root
static inline void path_dir(const char* path, char* dir, size_t n) {
    snprintf(dir, n, "%s", path);
    char* slash = strrchr(dir, '/');
    if (slash == NULL) { snprintf(dir, n, "."); } else if (slash == dir) { slash[1] = '\0'; } else { *slash = '\0'; }
}

// 1 when PATH names an entry of the directory DIR, their directories compared by device
// and inode (so "./x", "d/../d/x" or a symlink to DIR count); 0 when not, or when either
// directory cannot be found. No output may be written into a directory being read.
static inline int path_in_dir(const char* path, const char* dir) {
    char parent[4096];
    path_dir(path, parent, sizeof(parent));
    struct stat a, b;
    return stat(parent, &a) == 0 && stat(dir, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

// fsyncs the directory holding path, so that a rename into it survives a power cut (the
// file's own fsync does not cover its directory entry). Returns 0, or -1 with errno.
static inline int fsync_parent_dir(const char* path) {
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

// Closes the file and, when ok (every write of the caller succeeded: errno still tells
// why not), makes it durable (flushed, fsync'ed), renames it over PATH and fsyncs the
// directory: once this returns 0 the file survives a crash or a power cut. Otherwise, or
// when any of that fails, removes the temporary and returns -1 with llmc_errmsg() naming
// PATH and the reason.
static inline int atomic_commit(AtomicFile* f, int ok) {
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

// gives up on the file: closes and removes the temporary, PATH untouched; the caller's
// own error message stands
static inline void atomic_abort(AtomicFile* f) {
    if (f->fp != NULL) { fclose(f->fp); }
    f->fp = NULL;
    remove(f->tmp);
}

#endif // LLMC_UTILS_H
