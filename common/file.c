// Opening a file by name without ever blocking, and locking one: see common/file.h.
#include <stdio.h>      // FILE, fdopen, snprintf: file_fopen, the descriptions
#include <string.h>     // strerror, memset
#include <errno.h>      // errno, ENXIO, EISDIR, ENOTDIR: what went wrong
#include <fcntl.h>      // open, fcntl, O_NONBLOCK, F_SETLK, F_GETLK, struct flock
#include <unistd.h>     // close
#include <sys/stat.h>   // stat, lstat, fstat, S_IS*: what a path is
#include "common/file.h"  // FileType and this file's prototypes

static _Thread_local char file_why[96];  // file_type_check's description, per thread

// what a file of mode m is, for messages: "a FIFO", "a directory", ...
const char* file_kind(mode_t m) {
    if (S_ISREG(m)) { return "a regular file"; }
    if (S_ISLNK(m)) { return "a symlink"; }
    if (S_ISDIR(m)) { return "a directory"; }
    if (S_ISFIFO(m)) { return "a FIFO"; }
    if (S_ISSOCK(m)) { return "a socket"; }
    if (S_ISCHR(m) || S_ISBLK(m)) { return "a device"; }
    return "not a regular file";
}

// 0 when mode m is of the type wanted; else -1, *why saying what it is instead
int file_type_check(mode_t m, FileType want, const char** why) {
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
int file_open(const char* path, int flags, mode_t mode, FileType want, const char** why) {
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
FILE* file_fopen(const char* path, int flags, mode_t mode, const char* fmode, const char** why) {
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
int file_lock(int fd, long* holder) {
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
