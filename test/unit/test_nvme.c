/*
 Tests of zero3/nvme.h, the io_uring swapper of the NVMe tier.

 Each test makes a fresh directory under the first of /tmp, /var/tmp, build/ whose
 filesystem accepts O_DIRECT (probed with a real O_DIRECT write), and removes it after.
 Criterion runs every test in its own process, so setrlimit / signal changes stay local.
 Data patterns: every 8-byte word holds its own file offset mixed with a seed, so data
 written to or read from the wrong place, or a stale buffer, is detected.
*/
#include "zero3/nvme.h"       // first: it defines _GNU_SOURCE before any system header
#include <criterion/criterion.h>  // Test, cr_assert*, cr_skip_test
#include <stdint.h>           // uint64_t
#include <stdlib.h>           // mkdtemp, aligned_alloc
#include <string.h>           // strstr
#include <signal.h>           // signal, SIGXFSZ: ignored so EFBIG comes back as an error
#include <sys/resource.h>     // setrlimit: RLIMIT_FSIZE (a "full disk" without a real one), RLIMIT_NPROC
#include <sys/mount.h>        // mount, umount2: a tiny tmpfs for ENOSPC
#include <sys/wait.h>         // waitpid: the unprivileged child
#include <unistd.h>           // fork, setuid, pipe, dup, dup2, ftruncate, rmdir
#include <dirent.h>           // opendir, readdir: the process's threads in /proc/self/task
#include "zero3/util.h"     // zero_error, zero_errmsg, zero_now_ms
#include <stdio.h>          // snprintf, fopen, fgets, sscanf
#include "zero3/crc32c.h"   // crc32c_update, crc32c_blocks

static char g_dir[4096];

// a fresh directory whose filesystem supports O_DIRECT
static void dir_make(void) {
    const char* bases[] = {"/tmp", "/var/tmp", "build"};
    for (size_t i = 0; i < sizeof(bases) / sizeof(bases[0]); i++) {
        snprintf(g_dir, sizeof(g_dir), "%s/test_nvme.XXXXXX", bases[i]);
        if (mkdtemp(g_dir) == NULL) { continue; }
        char probe[4200];
        snprintf(probe, sizeof(probe), "%s/probe", g_dir);
        int fd = open(probe, O_RDWR | O_CREAT | O_DIRECT, 0600);
        int ok = 0;
        if (fd >= 0) {
            void* b = aligned_alloc(4096, 4096);
            memset(b, 0, 4096);
            ok = pwrite(fd, b, 4096, 0) == 4096;
            free(b);
            close(fd);
            unlink(probe);
        }
        if (ok) { return; }
        rmdir(g_dir);
    }
    cr_assert_fail("no directory with O_DIRECT support under /tmp, /var/tmp, build");
}

static void dir_remove(void) {
    char p[4200];
    snprintf(p, sizeof(p), "%s/zero3_rank00000.swp", g_dir);
    unlink(p);
    snprintf(p, sizeof(p), "%s/zero3_rank00003.swp", g_dir);
    unlink(p);
    rmdir(g_dir);
}

TestSuite(nvme, .init = dir_make, .fini = dir_remove);

static void pattern_fill(void* buf, size_t file_offset, size_t bytes, uint64_t seed) {
    uint64_t* w = buf;
    for (size_t i = 0; i < bytes / 8; i++) { w[i] = (file_offset / 8 + i) * 0x9E3779B97F4A7C15ull ^ seed; }
}

// index of the first wrong word, or -1
static long pattern_check(const void* buf, size_t file_offset, size_t bytes, uint64_t seed) {
    const uint64_t* w = buf;
    for (size_t i = 0; i < bytes / 8; i++) {
        if (w[i] != ((file_offset / 8 + i) * 0x9E3779B97F4A7C15ull ^ seed)) { return (long)i; }
    }
    return -1;
}

static void* abuf(size_t bytes) {
    void* p = aligned_alloc(4096, bytes);
    cr_assert_not_null(p);
    memset(p, 0xAB, bytes);
    return p;
}

#define MiB ((size_t)1 << 20)
#define KiB ((size_t)1 << 10)

// ----------------------------------------------------------------------------
// round trips

static void roundtrip_sizes(size_t chunk_bytes, int registered) {
    NvmeFile f;
    size_t file_bytes = 80 * MiB;
    cr_assert_eq(nvme_open(&f, g_dir, 0, file_bytes, 8), 0, "%s", zero_errmsg());
    cr_assert_eq(f.direct, 1);
    if (chunk_bytes) { f.chunk_bytes = chunk_bytes; }
    const size_t sizes[] = {4 * KiB, 8 * KiB, 12 * KiB, 64 * KiB, 1 * MiB, 1 * MiB + 4 * KiB, 4 * MiB,
                            8 * MiB, 8 * MiB + 4 * KiB, 16 * MiB - 4 * KiB, 16 * MiB};
    const int n = sizeof(sizes) / sizeof(sizes[0]);
    void* bufs[16];
    void** reg = NULL;
    if (registered) { cr_assert_eq(nvme_buffers_alloc(&f, n, 16 * MiB, &reg), 0, "%s", zero_errmsg()); }
    // odd offsets (multiples of 4 KiB, not of larger powers) packed back to back
    size_t offs[16], off = 4 * KiB;
    for (int i = 0; i < n; i++) {
        offs[i] = off;
        off += sizes[i] + 12 * KiB;
        bufs[i] = registered ? reg[i] : abuf(sizes[i]);
        pattern_fill(bufs[i], offs[i], sizes[i], 0x1111);
        cr_assert_eq(nvme_write_async(&f, bufs[i], offs[i], sizes[i], (uint64_t)i), 0, "%s", zero_errmsg());
    }
    cr_assert_leq(off, file_bytes);
    cr_assert_eq(nvme_wait_all(&f), 0, "%s", zero_errmsg());
    for (int i = 0; i < n; i++) { memset(bufs[i], 0, sizes[i]); }
    for (int i = 0; i < n; i++) {
        cr_assert_eq(nvme_read(&f, bufs[i], offs[i], sizes[i]), 0, "%s", zero_errmsg());
        cr_assert_eq(pattern_check(bufs[i], offs[i], sizes[i], 0x1111), -1, "size %zu at offset %zu", sizes[i], offs[i]);
    }
    // a second pattern over the same places, and one large read spanning all of them (gaps included)
    for (int i = 0; i < n; i++) {
        pattern_fill(bufs[i], offs[i], sizes[i], 0x2222);
        cr_assert_eq(nvme_write(&f, bufs[i], offs[i], sizes[i]), 0, "%s", zero_errmsg());
    }
    void* all = abuf(off);
    cr_assert_eq(nvme_read(&f, all, 0, off), 0, "%s", zero_errmsg());
    for (int i = 0; i < n; i++) {
        cr_assert_eq(pattern_check((char*)all + offs[i], offs[i], sizes[i], 0x2222), -1, "size %zu", sizes[i]);
    }
    free(all);
    cr_assert_eq(f.retries, 0);
    if (!registered) { for (int i = 0; i < n; i++) { free(bufs[i]); } }
    nvme_close(&f, 1);
}

Test(nvme, roundtrip_plain_buffers) { roundtrip_sizes(0, 0); }
Test(nvme, roundtrip_registered_buffers) { roundtrip_sizes(0, 1); }
// 64 KiB pieces: every request above that is split over several SQEs, with qd 8 the
// queue fills inside one request and submission reaps
Test(nvme, roundtrip_split_into_pieces) { roundtrip_sizes(64 * KiB, 1); }

Test(nvme, file_is_preallocated_and_removed) {
    NvmeFile f;
    cr_assert_eq(nvme_open(&f, g_dir, 3, 1 * MiB + 1, 2), 0, "%s", zero_errmsg());
    cr_assert(strstr(f.path, "/zero3_rank00003.swp") != NULL, "%s", f.path);
    struct stat st;
    cr_assert_eq(stat(f.path, &st), 0);
    cr_assert_eq(st.st_size, (off_t)(1 * MiB + 4 * KiB), "size rounded up to 4 KiB");
    cr_assert_geq((size_t)st.st_blocks * 512, 1 * MiB + 4 * KiB, "blocks allocated, not sparse");
    cr_assert_eq(st.st_mode & 0777, 0600);
    char path[4096];
    snprintf(path, sizeof(path), "%s", f.path);
    nvme_close(&f, 1);
    cr_assert_neq(stat(path, &st), 0, "removed");
}

// ----------------------------------------------------------------------------
// queue: more requests than slots, tags, interleaving

Test(nvme, many_requests_beyond_queue_depth) {
    NvmeFile f;
    const int n = 64;
    const size_t sz = 64 * KiB;
    cr_assert_eq(nvme_open(&f, g_dir, 0, (size_t)n * sz, 4), 0, "%s", zero_errmsg());
    void** bufs;
    cr_assert_eq(nvme_buffers_alloc(&f, n, sz, &bufs), 0, "%s", zero_errmsg());
    // the file is written in reverse order of tags, so the tag -> offset map is not trivial
    for (int i = 0; i < n; i++) {
        size_t off = (size_t)(n - 1 - i) * sz;
        pattern_fill(bufs[i], off, sz, 7);
        cr_assert_eq(nvme_write_async(&f, bufs[i], off, sz, 1000 + (uint64_t)i), 0, "%s", zero_errmsg());
        cr_assert_leq(f.inflight, 4);
        cr_assert_eq(f.submit_waits, i < 4 ? 0u : (uint64_t)(i - 3), "a submission waits only for a slot");
    }
    int seen[64] = {0};
    for (int k = 0; k < n; k++) {
        uint64_t tag = 0;
        cr_assert_eq(nvme_wait(&f, &tag), 0, "%s", zero_errmsg());
        cr_assert(tag >= 1000 && tag < 1000 + (uint64_t)n, "tag %llu", (unsigned long long)tag);
        cr_assert_eq(seen[tag - 1000], 0, "tag returned twice");
        seen[tag - 1000] = 1;
    }
    uint64_t tag;
    cr_assert_eq(nvme_wait(&f, &tag), -1, "nothing left in flight");
    cr_assert(strstr(zero_errmsg(), "no request in flight") != NULL, "%s", zero_errmsg());
    // read back: buffer i gets the block of tag i, checked against the offset the tag stands for
    for (int i = 0; i < n; i++) {
        memset(bufs[i], 0, sz);
        cr_assert_eq(nvme_read_async(&f, bufs[i], (size_t)i * sz, sz, (uint64_t)i), 0, "%s", zero_errmsg());
    }
    int out_of_order = 0;
    for (int k = 0; k < n; k++) {
        cr_assert_eq(nvme_wait(&f, &tag), 0, "%s", zero_errmsg());
        if (tag != (uint64_t)k) { out_of_order = 1; }
        cr_assert_eq(pattern_check(bufs[tag], tag * sz, sz, 7), -1, "tag %llu", (unsigned long long)tag);
    }
    cr_log_info("completion order differed from submission order: %s", out_of_order ? "yes" : "no");
    cr_assert_eq(f.outstanding, 0);
    cr_assert_eq(f.inflight, 0);
    nvme_close(&f, 1);
}

Test(nvme, interleaved_reads_and_writes) {
    NvmeFile f;
    const int n = 32;
    const size_t sz = 256 * KiB;
    cr_assert_eq(nvme_open(&f, g_dir, 0, (size_t)2 * n * sz, 6), 0, "%s", zero_errmsg());
    void** bufs;
    cr_assert_eq(nvme_buffers_alloc(&f, 2 * n, sz, &bufs), 0, "%s", zero_errmsg());
    // first half of the file: known data
    for (int i = 0; i < n; i++) {
        pattern_fill(bufs[i], (size_t)i * sz, sz, 1);
        cr_assert_eq(nvme_write(&f, bufs[i], (size_t)i * sz, sz), 0, "%s", zero_errmsg());
        memset(bufs[i], 0, sz);
    }
    // then: read block i of the first half while writing block i of the second half
    for (int i = 0; i < n; i++) {
        size_t woff = (size_t)(n + i) * sz;
        pattern_fill(bufs[n + i], woff, sz, 2);
        cr_assert_eq(nvme_read_async(&f, bufs[i], (size_t)i * sz, sz, (uint64_t)i), 0, "%s", zero_errmsg());
        cr_assert_eq(nvme_write_async(&f, bufs[n + i], woff, sz, (uint64_t)(n + i)), 0, "%s", zero_errmsg());
    }
    for (int k = 0; k < 2 * n; k++) {
        uint64_t tag;
        cr_assert_eq(nvme_wait(&f, &tag), 0, "%s", zero_errmsg());
        if (tag < (uint64_t)n) { cr_assert_eq(pattern_check(bufs[tag], tag * sz, sz, 1), -1); }
    }
    for (int i = 0; i < n; i++) {
        memset(bufs[n + i], 0, sz);
        cr_assert_eq(nvme_read(&f, bufs[n + i], (size_t)(n + i) * sz, sz), 0, "%s", zero_errmsg());
        cr_assert_eq(pattern_check(bufs[n + i], (size_t)(n + i) * sz, sz, 2), -1);
    }
    nvme_close(&f, 1);
}

// a blocking call in the middle of async traffic returns its own request only
Test(nvme, blocking_call_keeps_other_completions) {
    NvmeFile f;
    cr_assert_eq(nvme_open(&f, g_dir, 0, 4 * MiB, 2), 0, "%s", zero_errmsg());
    void* a = abuf(1 * MiB);
    void* b = abuf(1 * MiB);
    pattern_fill(a, 0, MiB, 5);
    pattern_fill(b, MiB, MiB, 5);
    cr_assert_eq(nvme_write_async(&f, a, 0, MiB, 42), 0, "%s", zero_errmsg());
    cr_assert_eq(nvme_write(&f, b, MiB, MiB), 0, "%s", zero_errmsg());
    cr_assert_eq(f.outstanding, 1);
    uint64_t tag = 0;
    cr_assert_eq(nvme_wait(&f, &tag), 0, "%s", zero_errmsg());
    cr_assert_eq(tag, 42);
    memset(a, 0, MiB);
    cr_assert_eq(nvme_read(&f, a, 0, MiB), 0, "%s", zero_errmsg());
    cr_assert_eq(pattern_check(a, 0, MiB, 5), -1);
    free(a);
    free(b);
    nvme_close(&f, 1);
}

Test(nvme, counters) {
    NvmeFile f;
    cr_assert_eq(nvme_open(&f, g_dir, 0, 8 * MiB, 4), 0, "%s", zero_errmsg());
    f.chunk_bytes = 1 * MiB;  // pieces are not requests: counters count requests
    void* b = abuf(4 * MiB);
    cr_assert_eq(nvme_write(&f, b, 0, 4 * MiB), 0, "%s", zero_errmsg());
    cr_assert_eq(nvme_write_async(&f, b, 4 * MiB, 4 * KiB, 1), 0, "%s", zero_errmsg());
    cr_assert_eq(nvme_read_async(&f, b, 0, 3 * MiB, 2), 0, "%s", zero_errmsg());
    cr_assert_eq(nvme_wait_all(&f), 0, "%s", zero_errmsg());
    cr_assert_eq(f.writes, 2);
    cr_assert_eq(f.reads, 1);
    cr_assert_eq(f.bytes_written, 4 * MiB + 4 * KiB);
    cr_assert_eq(f.bytes_read, 3 * MiB);
    cr_assert_eq(f.retries, 0);
    // a refused request counts nothing
    cr_assert_eq(nvme_read(&f, b, 1, 4096), -1);
    cr_assert_eq(f.reads, 1);
    free(b);
    nvme_close(&f, 1);
}

// ----------------------------------------------------------------------------
// refused requests and failures of nvme_open

Test(nvme, misaligned_requests_refused) {
    NvmeFile f;
    cr_assert_eq(nvme_open(&f, g_dir, 0, 1 * MiB, 4), 0, "%s", zero_errmsg());
    char* b = abuf(64 * KiB);
    cr_assert_eq(nvme_write(&f, b, 100, 4096), -1);
    cr_assert(strstr(zero_errmsg(), "multiples of 4096") && strstr(zero_errmsg(), f.path), "%s", zero_errmsg());
    cr_assert_eq(nvme_read_async(&f, b, 0, 1000, 1), -1);
    cr_assert(strstr(zero_errmsg(), "size 1000") != NULL, "%s", zero_errmsg());
    cr_assert_eq(nvme_write_async(&f, b + 512, 0, 4096, 1), -1, "misaligned buffer");
    cr_assert_eq(nvme_read(&f, b, 0, 0), -1, "empty request");
    cr_assert_eq(nvme_read(&f, b, 1 * MiB - 4096, 8192), -1, "past the end");
    cr_assert(strstr(zero_errmsg(), "past the end") != NULL, "%s", zero_errmsg());
    cr_assert_eq(f.outstanding, 0);
    cr_assert_eq(f.inflight, 0);
    free(b);
    nvme_close(&f, 1);
}

Test(nvme, missing_directory) {
    NvmeFile f;
    char dir[4200];
    snprintf(dir, sizeof(dir), "%s/does/not/exist", g_dir);
    cr_assert_eq(nvme_open(&f, dir, 0, 1 * MiB, 4), -1);
    cr_assert(strstr(zero_errmsg(), dir) && strstr(zero_errmsg(), "No such file or directory"), "%s", zero_errmsg());
}

Test(nvme, directory_is_a_regular_file) {
    char file[4200];
    snprintf(file, sizeof(file), "%s/plainfile", g_dir);
    int fd = open(file, O_CREAT | O_WRONLY, 0600);
    cr_assert_geq(fd, 0);
    close(fd);
    char dir[4300];
    snprintf(dir, sizeof(dir), "%s/sub", file);  // a "directory" under a regular file
    NvmeFile f;
    cr_assert_eq(nvme_open(&f, file, 0, 1 * MiB, 4), -1);
    cr_assert(strstr(zero_errmsg(), file) && strstr(zero_errmsg(), "Not a directory"), "%s", zero_errmsg());
    cr_assert_eq(nvme_open(&f, dir, 0, 1 * MiB, 4), -1);
    cr_assert(strstr(zero_errmsg(), "Not a directory"), "%s", zero_errmsg());
    unlink(file);
}

// Runs body(dir) in a child as nobody (when root: root ignores mode bits and process
// limits), its stderr into msg; returns the child's exit status (0: body returned 0).
static int child_as_nobody(int (*body)(const char* dir), const char* dir, char* msg, size_t cap) {
    chmod(g_dir, 0755);  // mkdtemp made it 0700: nobody must be able to reach dir
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) { _exit(100); }
        _exit(body(dir));
    }
    close(fds[1]);
    size_t n = 0;
    ssize_t got;
    while (n < cap - 1 && (got = read(fds[0], msg + n, cap - 1 - n)) > 0) { n += (size_t)got; }
    msg[n] = '\0';
    close(fds[0]);
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 200;
}

static int open_refused(const char* dir) {
    NvmeFile f;
    int rc = nvme_open(&f, dir, 0, 1 * MiB, 4);
    fprintf(stderr, "%s\n", zero_errmsg());
    return rc == -1 ? 0 : 1;
}

Test(nvme, unwritable_directory) {
    char dir[4200];
    snprintf(dir, sizeof(dir), "%s/readonly", g_dir);
    cr_assert_eq(mkdir(dir, 0500), 0);
    char msg[1100] = "";
    int status = child_as_nobody(open_refused, dir, msg, sizeof(msg));
    rmdir(dir);
    cr_assert_eq(status, 0, "child status %d, message: %s", status, msg);
    cr_assert(strstr(msg, dir) && strstr(msg, "Permission denied"), "%s", msg);
}

// /proc refuses new files even to root: a second, privilege-free unwritable place
Test(nvme, directory_in_proc) {
    NvmeFile f;
    cr_assert_eq(nvme_open(&f, "/proc", 0, 1 * MiB, 4), -1);
    cr_assert(strstr(zero_errmsg(), "/proc/zero3_rank00000.swp") != NULL, "%s", zero_errmsg());
    cr_log_info("/proc: %s", zero_errmsg());
}

Test(nvme, io_uring_setup_failure) {
    NvmeFile f;
    // the kernel refuses more than 32768 SQ entries (no IORING_SETUP_CLAMP)
    cr_assert_eq(nvme_open(&f, g_dir, 0, 1 * MiB, 1 << 20), -1);
    cr_assert(strstr(zero_errmsg(), "io_uring setup") && strstr(zero_errmsg(), g_dir), "%s", zero_errmsg());
    struct stat st;
    cr_assert_neq(stat(f.path, &st), 0, "the half-made swap file is removed");
}

Test(nvme, preallocation_enospc_on_small_tmpfs) {
    char mnt[4200];
    snprintf(mnt, sizeof(mnt), "%s/small", g_dir);
    cr_assert_eq(mkdir(mnt, 0700), 0);
    if (mount("tmpfs", mnt, "tmpfs", 0, "size=1m") != 0) {
        rmdir(mnt);
        cr_skip_test("cannot mount a tmpfs here (%s)", strerror(errno));
    }
    NvmeFile f;
    int rc = nvme_open(&f, mnt, 0, 4 * MiB, 4);
    char msg[1100];
    snprintf(msg, sizeof(msg), "%s", zero_errmsg());
    char path[4300];
    snprintf(path, sizeof(path), "%s/zero3_rank00000.swp", mnt);
    struct stat st;
    int left = stat(path, &st) == 0;
    umount2(mnt, 0);
    rmdir(mnt);
    cr_assert_eq(rc, -1);
    cr_assert(strstr(msg, path) && strstr(msg, "No space left on device"), "%s", msg);
    cr_assert_eq(left, 0, "failed swap file removed");
}

// ----------------------------------------------------------------------------
// a full disk during writes, short I/O

// RLIMIT_FSIZE makes the kernel cut a write at the limit (a short write) and refuse the
// rest with EFBIG, like a disk that fills up mid-request
Test(nvme, write_past_file_size_limit) {
    NvmeFile f;
    cr_assert_eq(nvme_open(&f, g_dir, 0, 2 * MiB, 4), 0, "%s", zero_errmsg());
    void* b = abuf(1 * MiB);
    pattern_fill(b, 0, 1 * MiB, 9);
    cr_assert_eq(nvme_write(&f, b, 0, 1 * MiB), 0, "%s", zero_errmsg());
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {.rlim_cur = 1 * MiB + 64 * KiB, .rlim_max = RLIM_INFINITY};
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);
    void* c = abuf(256 * KiB);
    pattern_fill(c, 1 * MiB, 256 * KiB, 9);
    // [1 MiB, 1.25 MiB): 64 KiB fit, the rest does not
    uint64_t before = f.bytes_written;
    cr_assert_eq(nvme_write(&f, c, 1 * MiB, 256 * KiB), -1);
    cr_log_info("%s", zero_errmsg());
    cr_assert(strstr(zero_errmsg(), "File too large") && strstr(zero_errmsg(), f.path), "%s", zero_errmsg());
    cr_assert(strstr(zero_errmsg(), "offset 1114112") != NULL, "offset of the failed piece: %s", zero_errmsg());
    cr_assert_eq(f.retries, 1, "the short write was resubmitted once");
    cr_assert_eq(f.bytes_written - before, 64 * KiB);
    // entirely past the limit: refused at once, async form, the error comes from nvme_wait
    cr_assert_eq(nvme_write_async(&f, c, 1536 * KiB, 64 * KiB, 77), 0, "%s", zero_errmsg());
    uint64_t tag = 0;
    cr_assert_eq(nvme_wait(&f, &tag), -1);
    cr_assert_eq(tag, 77, "the failed request's tag comes back");
    cr_assert(strstr(zero_errmsg(), "File too large"), "%s", zero_errmsg());
    // earlier data is intact, and the swapper still works
    memset(b, 0, 1 * MiB);
    cr_assert_eq(nvme_read(&f, b, 0, 1 * MiB), 0, "%s", zero_errmsg());
    cr_assert_eq(pattern_check(b, 0, 1 * MiB, 9), -1);
    memset(c, 0, 64 * KiB);
    cr_assert_eq(nvme_read(&f, c, 1 * MiB, 64 * KiB), 0, "%s", zero_errmsg());
    cr_assert_eq(pattern_check(c, 1 * MiB, 64 * KiB, 9), -1, "the part that fit was written");
    free(b);
    free(c);
    nvme_close(&f, 1);
}

// a read across end of file (the file was truncated behind the swapper's back) is short,
// the rest is resubmitted, reads 0 bytes, and the request fails with "unexpected end of file"
Test(nvme, read_past_eof_after_truncation) {
    NvmeFile f;
    cr_assert_eq(nvme_open(&f, g_dir, 0, 1 * MiB, 4), 0, "%s", zero_errmsg());
    void* b = abuf(1 * MiB);
    pattern_fill(b, 0, 1 * MiB, 3);
    cr_assert_eq(nvme_write(&f, b, 0, 1 * MiB), 0, "%s", zero_errmsg());
    cr_assert_eq(ftruncate(f.fd, 512 * KiB), 0);
    memset(b, 0, 1 * MiB);
    cr_assert_eq(nvme_read(&f, b, 256 * KiB, 512 * KiB), -1);
    cr_assert(strstr(zero_errmsg(), "unexpected end of file") && strstr(zero_errmsg(), "offset 524288"),
              "%s", zero_errmsg());
    cr_assert_eq(f.retries, 1);
    cr_assert_eq(pattern_check(b, 256 * KiB, 256 * KiB, 3), -1, "the part before EOF was read");
    free(b);
    nvme_close(&f, 1);
}

// a short read that then succeeds: a pipe stands in for the file (dup2 onto f.fd). The
// pipe holds 64 KiB when a 128 KiB read is submitted, so the read returns 64 KiB; a child
// writes the second half later, and the resubmitted rest completes the request. (The same
// bytes were written to the file first: the blocks' checksums are theirs.)
Test(nvme, short_read_resubmitted_until_complete) {
    NvmeFile f;
    cr_assert_eq(nvme_open(&f, g_dir, 0, 1 * MiB, 4), 0, "%s", zero_errmsg());
    void** bufs;
    cr_assert_eq(nvme_buffers_alloc(&f, 1, 128 * KiB, &bufs), 0, "%s", zero_errmsg());
    int p[2];
    cr_assert_eq(pipe(p), 0);
    fcntl(p[1], F_SETPIPE_SZ, 1 * MiB);
    void* src = abuf(128 * KiB);
    pattern_fill(src, 0, 128 * KiB, 4);
    cr_assert_eq(nvme_write(&f, src, 0, 128 * KiB), 0, "%s", zero_errmsg());
    cr_assert_eq(write(p[1], src, 64 * KiB), (ssize_t)(64 * KiB));
    int saved = dup(f.fd);
    cr_assert_eq(dup2(p[0], f.fd), f.fd);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        usleep(200 * 1000);
        _exit(write(p[1], (char*)src + 64 * KiB, 64 * KiB) == (ssize_t)(64 * KiB) ? 0 : 1);
    }
    memset(bufs[0], 0, 128 * KiB);
    int rc = nvme_read(&f, bufs[0], 0, 128 * KiB);
    int status;
    waitpid(pid, &status, 0);
    dup2(saved, f.fd);
    close(saved);
    close(p[0]);
    close(p[1]);
    cr_assert_eq(rc, 0, "%s", zero_errmsg());
    cr_assert_geq(f.retries, 1, "at least one short read resubmitted");
    cr_assert_eq(f.bytes_read, 128 * KiB);
    cr_assert_eq(f.reads, 1, "one read request");
    cr_assert_eq(pattern_check(bufs[0], 0, 128 * KiB, 4), -1);
    free(src);
    nvme_close(&f, 1);
}

// ----------------------------------------------------------------------------
// checksums: the file changed behind the swapper's back, as another process would

// writes 1 MiB of a pattern at offset 0 through the swapper, then lets `change` alter the
// file through a descriptor of its own (buffered, as `dd` or a stray job would), and reads
// the 1 MiB back: the read must fail naming the file, `block` and its byte offset, and
// `also`; a read of blocks before it must still pass
static void changed_under_the_job(void (*change)(int fd), size_t block, const char* also) {
    NvmeFile f;
    cr_assert_eq(nvme_open(&f, g_dir, 0, 2 * MiB, 4), 0, "%s", zero_errmsg());
    void* b = abuf(1 * MiB);
    pattern_fill(b, 0, 1 * MiB, 9);
    cr_assert_eq(nvme_write(&f, b, 0, 1 * MiB), 0, "%s", zero_errmsg());
    int fd = open(f.path, O_RDWR);
    cr_assert_geq(fd, 0);
    change(fd);
    cr_assert_eq(fsync(fd), 0);
    close(fd);
    memset(b, 0, 1 * MiB);
    cr_assert_eq(nvme_read(&f, b, 0, 1 * MiB), -1, "a changed swap file read back without an error");
    char want[4400];
    snprintf(want, sizeof(want), "%s: block %zu (byte offset %zu", f.path, block, block * 4096);
    cr_assert(strstr(zero_errmsg(), want) != NULL, "'%s' does not say '%s'", zero_errmsg(), want);
    cr_assert(strstr(zero_errmsg(), also) != NULL, "'%s' does not say '%s'", zero_errmsg(), also);
    if (block > 0) {
        cr_assert_eq(nvme_read(&f, b, 0, block * 4096), 0, "%s", zero_errmsg());
        cr_assert_eq(pattern_check(b, 0, block * 4096, 9), -1);
    }
    free(b);
    nvme_close(&f, 1);
}

static void zero_blocks_5_to_7(int fd) {
    char z[3 * 4096];
    memset(z, 0, sizeof(z));
    cr_assert_eq(pwrite(fd, z, sizeof(z), 5 * 4096), (ssize_t)sizeof(z));
}
static void one_byte_in_block_200(int fd) { cr_assert_eq(pwrite(fd, "x", 1, 200 * 4096 + 77), 1); }
static void truncate_to_3_blocks(int fd) { cr_assert_eq(ftruncate(fd, 3 * 4096), 0); }
// truncated, then written past the end again: the hole reads as zeros, not end of file
static void truncate_and_extend(int fd) {
    cr_assert_eq(ftruncate(fd, 0), 0);
    cr_assert_eq(pwrite(fd, "y", 1, 2 * MiB - 1), 1);
}

Test(nvme, zeroed_blocks_are_named) { changed_under_the_job(zero_blocks_5_to_7, 5, "fails its checksum"); }
Test(nvme, zeroed_blocks_say_zeros) { changed_under_the_job(zero_blocks_5_to_7, 5, "(it reads as zeros)"); }
Test(nvme, one_changed_byte_is_named) { changed_under_the_job(one_byte_in_block_200, 200, "the swap file was changed under this job"); }
Test(nvme, truncated_file_is_named) { changed_under_the_job(truncate_to_3_blocks, 3, "unexpected end of file: the swap file was truncated"); }
Test(nvme, truncated_and_extended_is_named) { changed_under_the_job(truncate_and_extend, 0, "(it reads as zeros)"); }

// the four-chain block checksums (what the swapper computes) equal the plain CRC32C of
// each block, for a count that is not a multiple of four (the rest one at a time) and a
// block size that is not a multiple of 8 (no four-chain path at all); and the standard
// check value
Test(nvme, crc32c_blocks_equal_the_plain_crc) {
    cr_assert_eq(crc32c_update(0, "123456789", 9), 0xE3069283u);
    enum { N = 7, B = 4096 };
    unsigned char* p = (unsigned char*)malloc(N * B);
    cr_assert_not_null(p);
    for (size_t i = 0; i < N * B; i++) { p[i] = (unsigned char)(i * 2654435761u >> 13); }
    uint32_t got[N];
    crc32c_blocks(p, N, B, got);
    for (int i = 0; i < N; i++) { cr_assert_eq(got[i], crc32c_update(0, p + (size_t)i * B, B), "block %d", i); }
    crc32c_blocks(p, 5, 1001, got);
    for (int i = 0; i < 5; i++) { cr_assert_eq(got[i], crc32c_update(0, p + (size_t)i * 1001, 1001), "1001-byte block %d", i); }
    free(p);
}

// blocks never written read as the zeros the file was made of, and pass; every block's
// sum follows its last write, whichever request wrote it (an overlapping second write)
Test(nvme, checksums_follow_the_writes) {
    NvmeFile f;
    cr_assert_eq(nvme_open(&f, g_dir, 0, 1 * MiB, 4), 0, "%s", zero_errmsg());
    cr_assert_eq(f.sums[0], f.zero_sum);
    void* b = abuf(1 * MiB);
    cr_assert_eq(nvme_read(&f, b, 0, 1 * MiB), 0, "%s", zero_errmsg());  // never written: zeros
    pattern_fill(b, 0, 256 * KiB, 1);
    cr_assert_eq(nvme_write(&f, b, 0, 256 * KiB), 0, "%s", zero_errmsg());
    pattern_fill(b, 128 * KiB, 256 * KiB, 2);
    cr_assert_eq(nvme_write(&f, b, 128 * KiB, 256 * KiB), 0, "%s", zero_errmsg());
    void* c = abuf(1 * MiB);
    cr_assert_eq(nvme_read(&f, c, 0, 1 * MiB), 0, "%s", zero_errmsg());
    cr_assert_eq(pattern_check(c, 0, 128 * KiB, 1), -1);
    cr_assert_eq(pattern_check((char*)c + 128 * KiB, 128 * KiB, 256 * KiB, 2), -1);
    free(b); free(c);
    nvme_close(&f, 1);
}

Test(nvme, buffers_registered_twice) {
    NvmeFile f;
    cr_assert_eq(nvme_open(&f, g_dir, 0, 4 * MiB, 4), 0, "%s", zero_errmsg());
    void **a, **b;
    cr_assert_eq(nvme_buffers_alloc(&f, 2, 1 * MiB, &a), 0, "%s", zero_errmsg());
    cr_assert_eq(nvme_buffers_alloc(&f, 1, 1 * MiB + 1, &b), 0, "%s", zero_errmsg());
    cr_assert_eq(f.n_iov, 3);
    cr_assert_eq((uintptr_t)b[0] % 4096, 0);
    pattern_fill(a[1], 0, 1 * MiB, 6);
    cr_assert_eq(nvme_write(&f, a[1], 0, 1 * MiB), 0, "%s", zero_errmsg());
    cr_assert_eq(nvme_read(&f, b[0], 0, 1 * MiB), 0, "%s", zero_errmsg());
    cr_assert_eq(pattern_check(b[0], 0, 1 * MiB, 6), -1);
    // registering with I/O in flight is refused
    cr_assert_eq(nvme_write_async(&f, a[0], 0, 4096, 1), 0, "%s", zero_errmsg());
    void** c;
    cr_assert_eq(nvme_buffers_alloc(&f, 1, 4096, &c), -1);
    cr_assert(strstr(zero_errmsg(), "in flight"), "%s", zero_errmsg());
    cr_assert_eq(nvme_wait_all(&f), 0, "%s", zero_errmsg());
    nvme_close(&f, 1);  // frees a, b and their buffers
}

// closing with requests in flight waits for them (a direct read must not land in freed memory)
Test(nvme, close_with_requests_in_flight) {
    NvmeFile f;
    cr_assert_eq(nvme_open(&f, g_dir, 0, 16 * MiB, 4), 0, "%s", zero_errmsg());
    void** bufs;
    cr_assert_eq(nvme_buffers_alloc(&f, 4, 4 * MiB, &bufs), 0, "%s", zero_errmsg());
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(nvme_read_async(&f, bufs[i], (size_t)i * 4 * MiB, 4 * MiB, (uint64_t)i), 0, "%s", zero_errmsg());
    }
    nvme_close(&f, 1);
    cr_assert_eq(f.fd, -1);
}

// the threads of this process named iou-wrk-*: io_uring's workers (Linux >= 5.12), -1 if unreadable
static int ring_workers(void) {
    DIR* d = opendir("/proc/self/task");
    if (d == NULL) { return -1; }
    int n = 0;
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        char path[300], comm[64] = "";
        snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
        FILE* fp = fopen(path, "r");
        if (fp == NULL) { continue; }
        if (fgets(comm, sizeof(comm), fp) != NULL && strncmp(comm, "iou-wrk", 7) == 0) { n++; }
        fclose(fp);
    }
    closedir(d);
    return n;
}

// [Note: submission that never blocks] in nvme.c: every request is handed to the ring's
// kernel workers, which then exist. Issued inline, an O_DIRECT read of an ext4 file (this
// machine's /tmp) completes without any worker; a tmpfs one is handed over anyway, so
// there the check cannot tell the two apart.
Test(nvme, requests_issued_by_the_ring_workers) {
    NvmeFile f;
    cr_assert_eq(nvme_open(&f, g_dir, 0, 4 * MiB, 4), 0, "%s", zero_errmsg());
    cr_assert_eq(ring_workers(), 0, "no worker before the first request");
    void** bufs;
    cr_assert_eq(nvme_buffers_alloc(&f, 1, 1 * MiB, &bufs), 0, "%s", zero_errmsg());
    cr_assert_eq(nvme_read(&f, bufs[0], 0, 1 * MiB), 0, "%s", zero_errmsg());
    cr_assert_geq(ring_workers(), 1, "the read was issued by the caller, not by a ring worker");
    nvme_close(&f, 1);
}

// No worker can start where the user's process limit is reached (root is exempt): the
// kernel cancels the requests, which go out again issued inline, once said on stderr; the
// data round-trips.
static int round_trip_without_workers(const char* dir) {
    struct rlimit one = {1, 1};
    if (setrlimit(RLIMIT_NPROC, &one) != 0) { return 4; }
    NvmeFile f;
    void** bufs;
    if (nvme_open(&f, dir, 0, 4 * MiB, 4) != 0) { fprintf(stderr, "%s\n", zero_errmsg()); return 5; }
    if (nvme_buffers_alloc(&f, 2, 2 * MiB, &bufs) != 0) { fprintf(stderr, "%s\n", zero_errmsg()); return 6; }
    pattern_fill(bufs[0], 0, 2 * MiB, 9);
    if (nvme_write(&f, bufs[0], 0, 2 * MiB) != 0 || nvme_read(&f, bufs[1], 0, 2 * MiB) != 0) {
        fprintf(stderr, "%s\n", zero_errmsg());
        return 7;
    }
    int ok = pattern_check(bufs[1], 0, 2 * MiB, 9) == -1 && f.issue_inline == 1 && ring_workers() == 0;
    nvme_close(&f, 1);
    return ok ? 0 : 8;
}

Test(nvme, no_ring_worker_under_the_process_limit) {
    char dir[4200];
    snprintf(dir, sizeof(dir), "%s/anyone", g_dir);
    cr_assert_eq(mkdir(dir, 0777), 0);
    chmod(dir, 0777);  // (the umask)
    char msg[2000] = "";
    int status = child_as_nobody(round_trip_without_workers, dir, msg, sizeof(msg));
    rmdir(dir);
    cr_assert_eq(status, 0, "child status %d, stderr: %s", status, msg);
    cr_assert(strstr(msg, "could not start a kernel worker") != NULL, "%s", msg);
    cr_assert(strstr(msg, dir) != NULL, "the notice names the swap file: %s", msg);
}

// kB of AnonHugePages in the mappings of /proc/self/smaps that overlap [p, p + bytes), -1 if unreadable
static long anon_huge_kb(const void* p, size_t bytes) {
    FILE* fp = fopen("/proc/self/smaps", "r");
    if (fp == NULL) { return -1; }
    char line[512];
    int inside = 0;
    long kb = 0, v;
    uintptr_t lo = (uintptr_t)p, hi = lo + bytes;
    while (fgets(line, sizeof(line), fp)) {
        unsigned long a, b;
        if (sscanf(line, "%lx-%lx ", &a, &b) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            inside = a < hi && b > lo;
        } else if (inside && sscanf(line, "AnonHugePages: %ld kB", &v) == 1) {
            kb += v;
        }
    }
    fclose(fp);
    return kb;
}

// registered buffers of 2 MiB and more are 2 MiB-aligned and get transparent huge pages
// (the device then sees 4 MiB requests, not ~1 MiB ones); smaller ones stay 4 KiB-aligned.
// The huge-page check is skipped where the kernel has no THP.
Test(nvme, large_registered_buffers_use_huge_pages) {
    NvmeFile f;
    cr_assert_eq(nvme_open(&f, g_dir, 0, 16 * MiB, 4), 0, "%s", zero_errmsg());
    void **big, **small;
    cr_assert_eq(nvme_buffers_alloc(&f, 2, 6 * MiB + 4 * KiB, &big), 0, "%s", zero_errmsg());
    cr_assert_eq(nvme_buffers_alloc(&f, 1, 1 * MiB, &small), 0, "%s", zero_errmsg());
    for (int i = 0; i < 2; i++) { cr_assert_eq((uintptr_t)big[i] % NVME_HUGE_BYTES, 0, "buffer %d", i); }
    cr_assert_eq((uintptr_t)small[0] % NVME_ALIGN, 0);
    // a round trip that crosses the 2 MiB page boundaries at 4 KiB-odd places, and the 4 KiB tail
    pattern_fill((char*)big[0] + 4 * KiB, 12 * KiB, 6 * MiB, 8);
    cr_assert_eq(nvme_write(&f, (char*)big[0] + 4 * KiB, 12 * KiB, 6 * MiB), 0, "%s", zero_errmsg());
    cr_assert_eq(nvme_read(&f, big[1], 12 * KiB, 6 * MiB), 0, "%s", zero_errmsg());
    cr_assert_eq(pattern_check(big[1], 12 * KiB, 6 * MiB, 8), -1);
    FILE* thp = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (thp == NULL) {
        nvme_close(&f, 1);
        cr_skip_test("no transparent huge pages in this kernel");
    }
    char mode[128] = "";
    if (fgets(mode, sizeof(mode), thp) == NULL) { mode[0] = '\0'; }
    fclose(thp);
    if (strstr(mode, "[never]")) {
        nvme_close(&f, 1);
        cr_skip_test("transparent huge pages set to never");
    }
    for (int i = 0; i < 2; i++) {
        long kb = anon_huge_kb(big[i], 6 * MiB);
        cr_assert_geq(kb, 2048, "buffer %d: %ld kB in huge pages (THP: %s)", i, kb, mode);
    }
    nvme_close(&f, 1);
}
