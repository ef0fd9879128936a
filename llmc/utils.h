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
struct stat;  // output_input_check's (<sys/stat.h>)

#ifdef __cplusplus
extern "C" {
#endif

// ----------------------------------------------------------------------------
// error messages of library code: one line, kept per thread

// (defined in llmc/utils.c: one buffer per thread for the whole program)
#ifdef __cplusplus
extern thread_local char llmc_errbuf[1024];  // C++ spelling of _Thread_local
#else
extern _Thread_local char llmc_errbuf[1024];
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

// The files a run reads (-e, the shards, the tokenizer, --ds-config) are recorded by device
// and inode (llmc/utils.c): an output given one of them under another name would destroy it.

// records PATH as an input, named by the flag that gave it (`what`); a path that does not
// exist (a descriptor such as d12) is no file and is skipped; -1 only when out of memory
int llmc_input_add(const char* path, const char* what);

// 0 when the file at PATH (st: its lstat) is no input of this run; else -1, llmc_errmsg()
// naming PATH, the flag that gave the input and, when it was given under another name, that
int output_input_check(const char* path, const struct stat* st);

// 0 when an output may go to PATH: nothing is there, or a regular file that is no input of
// this run. Else -1, llmc_errmsg() naming PATH and why: a rename over a symlink, a FIFO or
// a device replaces what someone put there on purpose, and one over an input destroys it.
int output_check(const char* path);

// 0 when DIR is a directory this process can create files in (tried: permissions alone do
// not tell, root passes them on a read-only mount); else -1, llmc_errmsg() naming DIR
int output_dir_check(const char* dir);

// Opens PATH.tmp for writing, after output_check(PATH); -1 with llmc_errmsg() naming the
// path when that fails. The temporary is created afresh (O_EXCL) and never through a link
// (O_NOFOLLOW); a regular one is an earlier crash's leftover and is replaced, anything
// else there is refused.
int atomic_open(AtomicFile* f, const char* path);

// the directory part of PATH into dir (n bytes): "." for a bare name, "/" for a name in the root
void path_dir(const char* path, char* dir, size_t n);

// 1 when PATH names an entry of the directory DIR, their directories compared by device
// and inode (so "./x", "d/../d/x" or a symlink to DIR count); 0 when not, or when either
// directory cannot be found. No output may be written into a directory being read.
int path_in_dir(const char* path, const char* dir);

// fsyncs the directory holding path, so that a rename into it survives a power cut (the
// file's own fsync does not cover its directory entry). Returns 0, or -1 with errno.
int fsync_parent_dir(const char* path);

// Closes the file and, when ok (every write of the caller succeeded: errno still tells
// why not), makes it durable (flushed, fsync'ed), renames it over PATH and fsyncs the
// directory: once this returns 0 the file survives a crash or a power cut. Otherwise, or
// when any of that fails, removes the temporary and returns -1 with llmc_errmsg() naming
// PATH and the reason.
int atomic_commit(AtomicFile* f, int ok);

// gives up on the file: closes and removes the temporary, PATH untouched; the caller's
// own error message stands
void atomic_abort(AtomicFile* f);

#ifdef __cplusplus
}
#endif

#endif // LLMC_UTILS_H
