/*
 Opening a file by name without ever blocking, and locking one: the lowest layer, system
 calls only, below both llmc/ and zero3/ (which include nothing of each other's model code,
 docs/ARCHITECTURE.md), so that each check is written once.

 Why: open(2) of a FIFO waits for the other end, for ever when nobody comes, and open of a
 device may wait for the hardware or act on it (a tape rewinds, a watchdog device arms).
 A FIFO named like a checkpoint file in -o held every rank of a resume in open(), where
 SIGTERM does not reach (the trainer's handler sets a flag and the open restarts). So every
 file the trainers and tools read or write by name (the model, the shards, the tokenizer,
 --ds-config, checkpoint files, swap files, main.log) is opened by file_open:

   1. stat first (lstat with O_NOFOLLOW): a FIFO, a device or a socket is refused unopened;
   2. open with O_NONBLOCK, so that one put there between the stat and the open cannot
      block either (a FIFO opened for writing without a reader then fails with ENXIO,
      which is told apart by another look at the path);
   3. fstat the open file: it must be a regular file (or a directory where one is
      expected), the check that counts, on the file actually opened;
   4. back to blocking mode: reads and writes then wait as usual (io_uring, for one,
      answers EAGAIN instead of waiting on a file opened O_NONBLOCK).

 Errors: -1 with errno and *why, a description for the caller's own message (strerror's,
 or "it is a FIFO, not a regular file"); each layer words its message its own way
 (llmc_error, zero_error) around it.

 file_lock: a POSIX write lock (fcntl's, not flock: F_GETLK names the process holding it,
 and NFS carries it to every node) over a whole file, taken without waiting. It lasts while
 the process lives and holds the descriptor, and ends when the process closes *any*
 descriptor of that file: the holder opens the file once and keeps that descriptor.
*/
#ifndef COMMON_FILE_H
#define COMMON_FILE_H

#include <stdio.h>      // FILE, fdopen, snprintf: file_fopen, the descriptions
#include <string.h>     // strerror, memset
#include <errno.h>      // errno, ENXIO, EISDIR, ENOTDIR: what went wrong
#include <fcntl.h>      // open, fcntl, O_NONBLOCK, F_SETLK, F_GETLK, struct flock
#include <unistd.h>     // close
#include <sys/stat.h>   // stat, lstat, fstat, S_IS*: what a path is

typedef enum { FILE_REGULAR, FILE_DIRECTORY } FileType;

#ifdef __cplusplus
static thread_local char file_why[96];  // C++ spelling of _Thread_local (the GPU trainer is C++)
#else
static _Thread_local char file_why[96];
#endif

// what a file of mode m is, for messages: "a FIFO", "a directory", ...
static inline const char* file_kind(mode_t m) {
    if (S_ISREG(m)) { return "a regular file"; }
    if (S_ISLNK(m)) { return "a symlink"; }
    if (S_ISDIR(m)) { return "a directory"; }
    if (S_ISFIFO(m)) { return "a FIFO"; }
    if (S_ISSOCK(m)) { return "a socket"; }
    if (S_ISCHR(m) || S_ISBLK(m)) { return "a device"; }
    return "not a regular file";
}

// 0 when mode m is of the type wanted; else -1, *why saying what it is instead
static inline int file_type_check(mode_t m, FileType want, const char** why) {
    if (want == FILE_REGULAR ? S_ISREG(m) : S_ISDIR(m)) { return 0; }
    snprintf(file_why, sizeof(file_why), "it is %s, not %s", file_kind(m), want == FILE_REGULAR ? "a regular file" : "a directory");
    *why = file_why;
    // not EINVAL, which a caller may take for open's own (zero3/nvme.h: no O_DIRECT there)
    errno = want == FILE_REGULAR && S_ISDIR(m) ? EISDIR : want == FILE_DIRECTORY ? ENOTDIR : ENXIO;
    return -1;
}

// Opens path as open(2) does (flags, mode; O_CLOEXEC added) if it is, or is created as, a
// file of type `want`, without blocking on the way (the header's steps 1-4). Returns the
// descriptor, or -1 with errno and *why set; nothing is left open.
static inline int file_open(const char* path, int flags, mode_t mode, FileType want, const char** why) {
    struct stat st;
    int nofollow = (flags & O_NOFOLLOW) != 0;
    if ((nofollow ? lstat(path, &st) : stat(path, &st)) == 0 && file_type_check(st.st_mode, want, why) != 0) { return -1; }
    int fd = open(path, flags | O_NONBLOCK | O_CLOEXEC | O_NOCTTY, mode);
    if (fd < 0) {
        int e = errno;
        if ((nofollow ? lstat(path, &st) : stat(path, &st)) == 0 && file_type_check(st.st_mode, want, why) != 0) { return -1; }
        *why = strerror(e);
        errno = e;
        return -1;
    }
    int e = 0;
    if (fstat(fd, &st) != 0) {
        e = errno;
        *why = strerror(e);
    } else if (file_type_check(st.st_mode, want, why) != 0) {
        e = errno;
    } else if ((flags & O_NONBLOCK) == 0) {
        int fl = fcntl(fd, F_GETFL);
        if (fl == -1 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) { e = errno; *why = strerror(e); }
    }
    if (e != 0) {
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

// file_open as a stdio stream of fopen's mode fmode ("rb", "wb", ...), for a regular file
static inline FILE* file_fopen(const char* path, int flags, mode_t mode, const char* fmode, const char** why) {
    int fd = file_open(path, flags, mode, FILE_REGULAR, why);
    if (fd < 0) { return NULL; }
    FILE* fp = fdopen(fd, fmode);
    if (fp == NULL) {
        int e = errno;
        close(fd);
        *why = strerror(e);
        errno = e;
    }
    return fp;
}

// Takes a write lock over the whole file of fd without waiting (see the header). Returns
// 0, or -1 with errno: EAGAIN or EACCES when another process holds a lock on it (*holder
// its pid where F_GETLK tells, else -1), another value when the lock cannot be taken at
// all (ENOLCK: a filesystem without locks).
static inline int file_lock(int fd, long* holder) {
    struct flock lk;
    memset(&lk, 0, sizeof(lk));
    lk.l_type = F_WRLCK;
    lk.l_whence = SEEK_SET;  // l_start 0, l_len 0: the whole file, however it grows
    *holder = -1;
    if (fcntl(fd, F_SETLK, &lk) == 0) { return 0; }
    int e = errno;
    if (e == EAGAIN || e == EACCES) {
        struct flock who = lk;
        if (fcntl(fd, F_GETLK, &who) == 0 && who.l_type != F_UNLCK) { *holder = (long)who.l_pid; }
    }
    errno = e;
    return -1;
}

#endif // COMMON_FILE_H
