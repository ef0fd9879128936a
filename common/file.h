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

#include <stdio.h>      // FILE: file_fopen's stream
#include <errno.h>      // errno: what went wrong, for the callers
#include <fcntl.h>      // O_RDONLY, O_NOFOLLOW, ...: the flags the callers pass to file_open
#include <sys/stat.h>   // mode_t, S_IS*: file_kind's and the callers' modes

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { FILE_REGULAR, FILE_DIRECTORY } FileType;

// What a file of mode m is, for messages: "a FIFO", "a directory", ...
const char* file_kind(mode_t m);

// 0 when mode m is of the type wanted; else -1, *why saying what it is instead (errno
// EISDIR, ENOTDIR or ENXIO; not EINVAL, which a caller may take for open's own)
int file_type_check(mode_t m, FileType want, const char** why);

// Opens path as open(2) does (flags, mode; O_CLOEXEC added) if it is, or is created as, a
// file of type `want`, without blocking on the way (the header's steps 1-4). Returns the
// descriptor, or -1 with errno and *why set; nothing is left open.
int file_open(const char* path, int flags, mode_t mode, FileType want, const char** why);

// file_open as a stdio stream of fopen's mode fmode ("rb", "wb", ...), for a regular file;
// NULL with errno and *why on failure
FILE* file_fopen(const char* path, int flags, mode_t mode, const char* fmode, const char** why);

// Takes a write lock over the whole file of fd without waiting (see the header). Returns
// 0, or -1 with errno: EAGAIN or EACCES when another process holds a lock on it (*holder
// its pid where F_GETLK tells, else -1), another value when the lock cannot be taken at
// all (ENOLCK: a filesystem without locks).
int file_lock(int fd, long* holder);

#ifdef __cplusplus
}
#endif

#endif // COMMON_FILE_H
