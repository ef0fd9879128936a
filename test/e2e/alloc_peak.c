/*
 An allocation counter for the tests, loaded with LD_PRELOAD into any program (a trainer
 under mpirun, a tool): it counts the heap the program allocates through malloc, calloc,
 realloc, aligned_alloc, posix_memalign, memalign and valloc, and at exit writes

   peak_live_bytes N       the most bytes allocated and not yet freed at any moment
   largest_alloc_bytes N   the largest single allocation

 to $ALLOC_PEAK_DIR/rank_R.txt, R from Open MPI's OMPI_COMM_WORLD_RANK (0 without it), or
 to stderr when ALLOC_PEAK_DIR is not set. A test program may instead #include this file
 and read the counters between phases (alloc_peak_restart, alloc_peak_peak:
 test/e2e/save_memory.c). Sizes are malloc_usable_size's, what the
 allocator really handed out. What a program maps itself (mmap: Open MPI's shared memory,
 the NVMe tier's huge pages, OpenBLAS's buffers) is not heap and not counted; the model
 states of both trainers' host side are.

   make build/alloc_peak.so
   ALLOC_PEAK_DIR=DIR LD_PRELOAD=build/alloc_peak.so mpirun ... ./train_gpt2_zero3_cpu ...
   (mpirun -x ALLOC_PEAK_DIR -x LD_PRELOAD, or env in front of the program under mpirun)

 The calls go to glibc's own __libc_* entry points, so that no dlsym (which allocates) is
 needed; counters are atomic: OpenMP and the CPU Adam's threads allocate too.
*/
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stddef.h>    // size_t
#include <stdio.h>     // snprintf
#include <stdlib.h>    // getenv
#include <string.h>    // memset, strlen
#include <errno.h>     // ENOMEM, EINVAL for posix_memalign
#include <fcntl.h>     // open: the report, without stdio's buffers (which allocate)
#include <unistd.h>    // write, close
#include <malloc.h>    // malloc_usable_size

// glibc's allocator under the public names
extern void* __libc_malloc(size_t n);
extern void* __libc_calloc(size_t n, size_t size);
extern void* __libc_realloc(void* p, size_t n);
extern void* __libc_memalign(size_t align, size_t n);
extern void __libc_free(void* p);

static size_t live, peak, largest;

static void count_alloc(void* p) {
    if (p == NULL) { return; }
    size_t n = malloc_usable_size(p);
    size_t now = __atomic_add_fetch(&live, n, __ATOMIC_RELAXED);
    size_t old = __atomic_load_n(&peak, __ATOMIC_RELAXED);
    while (now > old && !__atomic_compare_exchange_n(&peak, &old, now, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {}
    old = __atomic_load_n(&largest, __ATOMIC_RELAXED);
    while (n > old && !__atomic_compare_exchange_n(&largest, &old, n, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {}
}

static void count_free(void* p) {
    if (p != NULL) { __atomic_sub_fetch(&live, malloc_usable_size(p), __ATOMIC_RELAXED); }
}

void* malloc(size_t n) {
    void* p = __libc_malloc(n);
    count_alloc(p);
    return p;
}

void* calloc(size_t n, size_t size) {
    void* p = __libc_calloc(n, size);
    count_alloc(p);
    return p;
}

void* realloc(void* old, size_t n) {
    size_t before = old != NULL ? malloc_usable_size(old) : 0;
    void* p = __libc_realloc(old, n);
    if (p == NULL && n != 0) { return NULL; }  // the old block stands, still counted
    __atomic_sub_fetch(&live, before, __ATOMIC_RELAXED);
    count_alloc(p);
    return p;
}

void free(void* p) {
    count_free(p);
    __libc_free(p);
}

void* memalign(size_t align, size_t n) {
    void* p = __libc_memalign(align, n);
    count_alloc(p);
    return p;
}

void* aligned_alloc(size_t align, size_t n) { return memalign(align, n); }
void* valloc(size_t n) { return memalign((size_t)sysconf(_SC_PAGESIZE), n); }

int posix_memalign(void** out, size_t align, size_t n) {
    if (align < sizeof(void*) || (align & (align - 1)) != 0) { return EINVAL; }
    void* p = memalign(align, n);
    if (p == NULL) { return ENOMEM; }
    *out = p;
    return 0;
}

// For a program that compiles this file in (#include) instead of preloading it: the bytes
// live now, and a new peak from here on (what one phase of a program allocates)
static inline size_t alloc_peak_live(void) { return __atomic_load_n(&live, __ATOMIC_RELAXED); }
static inline size_t alloc_peak_peak(void) { return __atomic_load_n(&peak, __ATOMIC_RELAXED); }
static inline void alloc_peak_restart(void) { __atomic_store_n(&peak, alloc_peak_live(), __ATOMIC_RELAXED); }

// the report, at exit (after the program's own exit handlers: a destructor runs late)
__attribute__((destructor)) static void alloc_peak_report(void) {
    char line[160];
    int len = snprintf(line, sizeof(line), "peak_live_bytes %zu\nlargest_alloc_bytes %zu\n",
                       __atomic_load_n(&peak, __ATOMIC_RELAXED), __atomic_load_n(&largest, __ATOMIC_RELAXED));
    const char* dir = getenv("ALLOC_PEAK_DIR");
    if (dir == NULL) {
        if (write(2, line, (size_t)len) < 0) { return; }
        return;
    }
    const char* rank = getenv("OMPI_COMM_WORLD_RANK");
    char path[4096];
    snprintf(path, sizeof(path), "%s/rank_%s.txt", dir, rank != NULL ? rank : "0");
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) { return; }
    if (write(fd, line, (size_t)len) < 0) { len = 0; }
    close(fd);
}
