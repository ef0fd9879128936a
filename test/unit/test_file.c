/*
 Tests of common/file.h: files opened by name without blocking, and locked.

 Each test works in a fresh directory under /tmp, removed after. A FIFO without a writer
 would block a plain open for ever: every test has a timeout, so a helper that waits
 fails instead of hanging the suite.
*/
#include "common/file.h"          // file_open, file_fopen, file_lock, file_kind
#include <criterion/criterion.h>  // Test, cr_assert*
#include <stdio.h>                // snprintf, fclose, fgets
#include <stdlib.h>               // mkdtemp
#include <string.h>               // strcmp
#include <signal.h>               // kill, SIGKILL: the child holding a lock
#include <sys/wait.h>             // waitpid
#include <unistd.h>               // fork, pipe, read, write, symlink, unlink, rmdir

static char g_dir[4096];
static char g_path[4200];

static void dir_make(void) {
    snprintf(g_dir, sizeof(g_dir), "/tmp/test_file.XXXXXX");
    cr_assert_not_null(mkdtemp(g_dir), "a temporary directory");
}

static void dir_remove(void) {
    const char* names[] = {"fifo", "reg", "link", "sub", "new"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(g_path, sizeof(g_path), "%s/%s", g_dir, names[i]);
        if (unlink(g_path) != 0) { rmdir(g_path); }
    }
    rmdir(g_dir);
}

static const char* at(const char* name) {
    snprintf(g_path, sizeof(g_path), "%s/%s", g_dir, name);
    return g_path;
}

static void touch(const char* name) {
    FILE* f = fopen(at(name), "w");
    cr_assert_not_null(f);
    fputs("x\n", f);
    fclose(f);
}

TestSuite(file, .init = dir_make, .fini = dir_remove, .timeout = 10);

// the FIFO, for reading and for writing (no reader: a nonblocking open says ENXIO), never
// waited on, named for what it is
Test(file, fifo_refused_without_blocking) {
    cr_assert_eq(mkfifo(at("fifo"), 0600), 0);
    const int flags[] = {O_RDONLY, O_WRONLY, O_RDWR, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW};
    for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
        const char* why = NULL;
        cr_assert_eq(file_open(at("fifo"), flags[i], 0600, FILE_REGULAR, &why), -1, "flags %#x", flags[i]);
        cr_assert_str_eq(why, "it is a FIFO, not a regular file");
        cr_assert_eq(errno, ENXIO);
    }
    const char* why = NULL;
    cr_assert_null(file_fopen(at("fifo"), O_RDONLY, 0, "rb", &why));
    cr_assert_str_eq(why, "it is a FIFO, not a regular file");
}

// a device is refused by its stat, before any open
Test(file, device_refused) {
    const char* why = NULL;
    cr_assert_eq(file_open("/dev/null", O_RDONLY, 0, FILE_REGULAR, &why), -1);
    cr_assert_str_eq(why, "it is a device, not a regular file");
}

// directories: refused as files, taken where one is wanted; a file where a directory is wanted
Test(file, directories) {
    cr_assert_eq(mkdir(at("sub"), 0700), 0);
    const char* why = NULL;
    cr_assert_eq(file_open(at("sub"), O_RDONLY, 0, FILE_REGULAR, &why), -1);
    cr_assert_str_eq(why, "it is a directory, not a regular file");
    int fd = file_open(at("sub"), O_RDONLY | O_DIRECTORY, 0, FILE_DIRECTORY, &why);
    cr_assert_geq(fd, 0, "%s", why);
    close(fd);
    touch("reg");
    cr_assert_eq(file_open(at("reg"), O_RDONLY, 0, FILE_DIRECTORY, &why), -1);
    cr_assert_str_eq(why, "it is a regular file, not a directory");
}

// a link: followed, unless O_NOFOLLOW, where it is named
Test(file, symlinks) {
    touch("reg");
    cr_assert_eq(symlink("reg", at("link")), 0);
    const char* why = NULL;
    int fd = file_open(at("link"), O_RDONLY, 0, FILE_REGULAR, &why);
    cr_assert_geq(fd, 0, "%s", why);
    close(fd);
    cr_assert_eq(file_open(at("link"), O_RDONLY | O_NOFOLLOW, 0, FILE_REGULAR, &why), -1);
    cr_assert_str_eq(why, "it is a symlink, not a regular file");
}

// a regular file comes back in blocking mode, close-on-exec; O_CREAT makes one; a missing
// one says open's reason
Test(file, regular_files) {
    touch("reg");
    const char* why = NULL;
    int fd = file_open(at("reg"), O_RDONLY, 0, FILE_REGULAR, &why);
    cr_assert_geq(fd, 0, "%s", why);
    cr_assert_eq(fcntl(fd, F_GETFL) & O_NONBLOCK, 0, "back to blocking mode");
    cr_assert_neq(fcntl(fd, F_GETFD) & FD_CLOEXEC, 0, "close-on-exec");
    close(fd);
    fd = file_open(at("new"), O_WRONLY | O_CREAT | O_EXCL, 0600, FILE_REGULAR, &why);
    cr_assert_geq(fd, 0, "%s", why);
    close(fd);
    cr_assert_eq(file_open(at("missing"), O_RDONLY, 0, FILE_REGULAR, &why), -1);
    cr_assert_eq(errno, ENOENT);
    cr_assert_str_eq(why, strerror(ENOENT));
    FILE* f = file_fopen(at("reg"), O_RDONLY, 0, "rb", &why);
    cr_assert_not_null(f, "%s", why);
    char line[8];
    cr_assert_str_eq(fgets(line, sizeof(line), f), "x\n");
    fclose(f);
}

// a lock another process holds: refused without waiting, naming that process; free again
// once it is gone
Test(file, lock_names_the_holder) {
    touch("reg");
    int ready[2];
    cr_assert_eq(pipe(ready), 0);
    pid_t child = fork();
    if (child == 0) {
        const char* why = NULL;
        long holder = 0;
        int fd = file_open(at("reg"), O_RDWR, 0, FILE_REGULAR, &why);
        char c = fd >= 0 && file_lock(fd, &holder) == 0 ? 'y' : 'n';
        if (write(ready[1], &c, 1) != 1) { _exit(1); }
        pause();
        _exit(0);
    }
    char c = 0;
    cr_assert_eq(read(ready[0], &c, 1), 1);
    cr_assert_eq(c, 'y', "the child took the lock");
    const char* why = NULL;
    long holder = 0;
    int fd = file_open(at("reg"), O_RDWR, 0, FILE_REGULAR, &why);
    cr_assert_geq(fd, 0, "%s", why);
    cr_assert_eq(file_lock(fd, &holder), -1);
    cr_assert(errno == EAGAIN || errno == EACCES);
    cr_assert_eq(holder, (long)child);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    cr_assert_eq(file_lock(fd, &holder), 0, "the lock of a process gone is free");
    close(fd);
}
