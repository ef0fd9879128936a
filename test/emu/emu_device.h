/*
 The emulated GPU's memory, streams and race checker (test/emu/cuda_runtime.h's engine room).

 Memory. Device and pinned allocations come from one reserved arena (so an address is known
 to be "GPU-visible" by two compares), each on pages of its own with an unmapped page after
 it, 256-byte aligned, poisoned with 0xff bytes (NaN as floats); a freed one is unmapped, so
 a use after free faults. Anything outside the arena is pageable host memory.

 Streams. Every stream is a queue of operations: kernels, copies, memsets, cuBLAS and cub
 calls, NCCL collectives. Nothing runs at the call. A seeded scheduler (EMU_SEED; rank mixed
 in) runs ready heads of the queues in a random order: a few at every API call, and as many
 as needed at a synchronisation. An operation is ready when everything that happens before
 it is done: [Note: one vector clock per operation] component s of an operation's clock is
 the number of operations of stream s it comes after; it is the join of its stream's clock,
 the host's clock (what the host has synchronised with) and the clocks captured by
 cudaStreamWaitEvent (an event holds the clock of its most recent record; a wait captures
 it at the call, as CUDA does), plus the legacy default stream's implicit joins with the
 blocking streams. So readiness is "for every stream s, done[s] >= clock[s]", and the same
 clocks decide happens-before for the checker.

 The checker. Each operation's memory accesses are ranges: declared for copies, memsets,
 NCCL, cuBLAS and cub; for kernels (and host work run as a stream operation) recorded as
 they run, through the compiler's address-sanitizer callbacks (the emulated programs are
 built with -fsanitize=kernel-address and call-based instrumentation: every load and store
 in them calls __asan_{load,store}N_noabort below), one read and one written range per
 allocation and operation. Two accesses to overlapping ranges, one a write, with no
 happens-before edge between them stop the run naming both operations and where they were
 issued. The host's side: a copy from pinned memory checksums its source at the call and
 again when it runs (a host write in between is a race); a copy into pinned memory poisons
 its destination at the call (a host read before it completes sees NaN) and checks that the
 poison is intact when it runs. Host code dereferencing device memory stops the run too.

 Threads. [Note: one thread runs the GPU] the thread that first calls the runtime runs every
 operation, and only its accesses while one runs are an operation's. Other host threads
 (--dpu's CPU Adam, OpenMP workers) run beside the operations, as they do beside a real GPU:
 their accesses are host accesses, checked only for device memory, under emu_allocs_lock
 because the runtime's thread may be adding an allocation meanwhile.

 NCCL collectives are operations that start (non-blocking MPI) when they reach the head of
 their stream and complete when MPI says so, polled by the scheduler; the host's own
 blocking MPI calls (interposed in nccl.h) keep the emulated GPU running while they wait,
 as a real GPU would.
*/
#ifndef EMU_DEVICE_H
#define EMU_DEVICE_H

#include <stdint.h>     // uintptr_t, uint64_t
#include <stdio.h>      // fprintf
#include <stdlib.h>     // getenv, abort
#include <string.h>     // memset, memcmp
#include <sched.h>      // sched_yield while waiting on another rank
#include <time.h>       // clock_gettime: the watchdog
#include <sys/mman.h>   // the arena
#include <execinfo.h>   // backtrace: where an operation was issued
#include <functional>   // an operation's work
#include <vector>       // queues, histories
#include <deque>        // a stream's queue
#include <random>       // the scheduler's choices
#include <pthread.h>    // emu_allocs_lock: other host threads look up allocations

#define EMU_NO_TRACK __attribute__((no_sanitize_address))
#define EMU_MAX_STREAMS 32  // clock components: 0 the host, 1 the legacy default stream
#define EMU_ARENA_BYTES ((size_t)1 << 40)

struct EmuClock {
    unsigned c[EMU_MAX_STREAMS];
};
static inline void emu_join(EmuClock* a, const EmuClock* b) {
    for (int i = 0; i < EMU_MAX_STREAMS; i++) { a->c[i] = a->c[i] > b->c[i] ? a->c[i] : b->c[i]; }
}

enum { EMU_MEM_DEVICE = 1, EMU_MEM_PINNED = 2 };
struct EmuAlloc {
    uintptr_t lo, hi;            // [lo, hi) as the caller asked; the mapping is page-rounded
    size_t map_bytes;
    int kind, live;
    unsigned long long dev_write_serial;  // when an operation last wrote into it (exec_serial)
};

// where an operation was issued: kept for as long as the checker may name it
struct EmuSite {
    const char* what;
    const char* file;
    int line, stream;
    unsigned seq;
    void* trace[10];
    int ntrace;
};

struct EmuAccess { uintptr_t lo, hi; int write; };
struct EmuRecord {  // an access the checker remembers
    uintptr_t lo, hi;
    int write, stream;
    unsigned stamp;  // the operation's own clock component
    EmuSite* site;
};

struct EmuOp {
    int stream;
    unsigned seq;
    EmuClock clock;
    EmuSite* site;
    std::function<void(EmuOp*)> run;   // the work (a collective: its start)
    std::function<int(EmuOp*)> poll;   // collectives: 1 once complete; empty: done when run returns
    std::vector<EmuAccess> acc;        // declared accesses
    int track;                         // record accesses while it runs (kernels, host work)
    unsigned long long serial;         // how many operations had run when it was issued
    uintptr_t src_lo, src_hi;          // a pinned source, checksummed at the call
    uint64_t src_sum;
    uintptr_t dst_lo, dst_hi;          // a pinned destination, poisoned at the call
};

struct EmuQueue {
    int id, blocking;
    std::deque<EmuOp*> q;
    EmuOp* inflight;       // a collective started and not complete
    unsigned seq, done;    // issued, completed
    EmuClock clock;        // the clock of the last operation issued (and waits captured since)
};

struct EmuTouch { int alloc; uintptr_t rlo, rhi, wlo, whi; };

struct EmuDevice {
    int ready;
    char* arena;
    size_t arena_used;
    std::vector<EmuAlloc> allocs;   // by address (the arena only grows)
    int last_alloc;
    std::vector<std::vector<EmuRecord>> history;  // per allocation
    EmuQueue* streams[EMU_MAX_STREAMS];
    int num_streams;
    EmuClock host;
    std::mt19937_64 rng;
    unsigned long long seed;  // EMU_SEED (the blocks' lagging warp is drawn from it, apart from rng)
    unsigned long long exec_serial;   // operations run so far
    int max_per_call;
    // the operation running with access tracking
    int tracking;
    EmuTouch touch[64];
    int num_touch;
    EmuTouch* last_touch;
    EmuOp* running;
    size_t device_bytes;
    int queried;                      // the last API call was a query (cudaEventQuery, cudaStreamQuery)
};
inline EmuDevice emu_dev;
// [Note: one thread runs the GPU]: set on the thread that ran emu_init
inline thread_local int emu_gpu_thread;
// held by the runtime's thread while it changes emu_dev.allocs, and by other threads reading it
inline pthread_mutex_t emu_allocs_lock = PTHREAD_MUTEX_INITIALIZER;

static void emu_die(const char* fmt, const char* a = "", const char* b = "") {
    fprintf(stderr, "emulated CUDA: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n");
    fflush(stderr);
    abort();
}

static EMU_NO_TRACK void emu_init(void) {
    if (emu_dev.ready) { return; }
    emu_dev.ready = 1;
    emu_gpu_thread = 1;
    emu_dev.arena = (char*)mmap(NULL, EMU_ARENA_BYTES, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (emu_dev.arena == MAP_FAILED) { emu_die("cannot reserve the device arena"); }
    const char* s = getenv("EMU_SEED");
    const char* r = getenv("OMPI_COMM_WORLD_RANK");
    unsigned long long seed = s != NULL ? strtoull(s, NULL, 10) : 1;
    emu_dev.rng.seed(seed * 1000003ull + (r != NULL ? strtoull(r, NULL, 10) : 0));
    emu_dev.seed = seed;
    const char* m = getenv("EMU_MAX_PER_CALL");  // (see emu_tick)
    emu_dev.max_per_call = m != NULL ? atoi(m) : 3;
    emu_dev.last_alloc = -1;
    // stream 1: the legacy default stream (NULL), blocking by definition
    EmuQueue* q = new EmuQueue();
    q->id = 1; q->blocking = 1;
    emu_dev.streams[1] = q;
    emu_dev.num_streams = 2;
}

// ----------------------------------------------------------------------------
// memory

static inline EMU_NO_TRACK int emu_find(uintptr_t a) {
    const EmuAlloc* all = emu_dev.allocs.data();
    int i = emu_dev.last_alloc;
    if (i >= 0 && a >= all[i].lo && a < all[i].hi) { return i; }
    int lo = 0, hi = (int)emu_dev.allocs.size() - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        const EmuAlloc* e = &all[mid];
        if (a < e->lo) { hi = mid - 1; } else if (a >= e->hi) { lo = mid + 1; } else { emu_dev.last_alloc = mid; return mid; }
    }
    return -1;
}
// the allocation holding [p, p + n), or -1 (pageable memory); a range that starts in one and
// runs past its end stops the run
static EMU_NO_TRACK int emu_find_range(const void* p, size_t n, const char* what) {
    uintptr_t a = (uintptr_t)p;
    if (a - (uintptr_t)emu_dev.arena >= EMU_ARENA_BYTES) { return -1; }
    int i = emu_find(a);
    if (i < 0 || !emu_dev.allocs[i].live) { emu_die("%s: an address in no live allocation (freed, or never allocated)", what); }
    if (n > 0 && a + n > emu_dev.allocs[i].hi) { emu_die("%s: a range past the end of its allocation", what); }
    return i;
}

static EMU_NO_TRACK void* emu_alloc(size_t n, int kind) {
    emu_init();
    const size_t page = 4096;
    size_t pages = (n + page - 1) / page;
    if (pages == 0) { pages = 1; }
    size_t map = pages * page;
    if (emu_dev.arena_used + map + page > EMU_ARENA_BYTES) { return NULL; }
    char* base = emu_dev.arena + emu_dev.arena_used;
    if (mprotect(base, map, PROT_READ | PROT_WRITE) != 0) { return NULL; }
    emu_dev.arena_used += map + page;  // and a guard page
    // the end as close to the guard page as 256-byte alignment allows: an overrun faults
    char* p = base + ((map - n) & ~(size_t)255);
    memset(base, 0xff, map);
    EmuAlloc e = {(uintptr_t)p, (uintptr_t)p + (n > 0 ? n : 1), map, kind, 1, 0};
    pthread_mutex_lock(&emu_allocs_lock);
    emu_dev.allocs.push_back(e);
    pthread_mutex_unlock(&emu_allocs_lock);
    emu_dev.history.emplace_back();
    if (kind == EMU_MEM_DEVICE) { emu_dev.device_bytes += n; }
    return p;
}
static EMU_NO_TRACK int emu_free(void* p, int kind) {
    int i = emu_find_range(p, 0, "free");
    if (i < 0) { return -1; }
    EmuAlloc* e = &emu_dev.allocs[i];
    if (e->lo != (uintptr_t)p || e->kind != kind) { return -1; }
    char* base = (char*)(e->lo & ~(uintptr_t)4095);
    munmap(base, e->map_bytes);  // (the range stays reserved: it is never handed out again)
    mmap(base, e->map_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    pthread_mutex_lock(&emu_allocs_lock);
    e->live = 0;
    pthread_mutex_unlock(&emu_allocs_lock);
    emu_dev.history[i].clear();
    emu_dev.history[i].shrink_to_fit();
    if (kind == EMU_MEM_DEVICE) { emu_dev.device_bytes -= e->hi - e->lo; }
    return 0;
}
// where a pointer lives: EMU_MEM_DEVICE, EMU_MEM_PINNED or 0 (pageable)
static EMU_NO_TRACK int emu_where(const void* p) {
    uintptr_t a = (uintptr_t)p;
    if (!emu_dev.ready || a - (uintptr_t)emu_dev.arena >= EMU_ARENA_BYTES) { return 0; }
    int i = emu_find(a);
    return i >= 0 && emu_dev.allocs[i].live ? emu_dev.allocs[i].kind : -1;
}

static EMU_NO_TRACK uint64_t emu_checksum(uintptr_t lo, uintptr_t hi) {
    uint64_t h = 1469598103934665603ull;
    for (const unsigned char* p = (const unsigned char*)lo; p < (const unsigned char*)hi; p++) { h = (h ^ *p) * 1099511628211ull; }
    return h;
}

// ----------------------------------------------------------------------------
// the checker

static EMU_NO_TRACK void emu_print_site(const char* role, const EmuSite* s) {
    fprintf(stderr, "  %s: %s, issued at %s:%d on stream %d (its operation %u); the call's stack:\n", role, s->what, s->file,
            s->line, s->stream, s->seq);
    fflush(stderr);
    backtrace_symbols_fd((void* const*)s->trace, s->ntrace, 2);
}

static EMU_NO_TRACK void emu_race(const EmuRecord* old, const EmuSite* now, const EmuAccess* a, int alloc) {
    const EmuAlloc* e = &emu_dev.allocs[alloc];
    uintptr_t lo = a->lo > old->lo ? a->lo : old->lo, hi = a->hi < old->hi ? a->hi : old->hi;
    fprintf(stderr, "emulated CUDA: RACE on %s memory: bytes [%zu, %zu) of an allocation of %zu bytes, %s by one operation and "
                    "%s by another, with no event or synchronization ordering them\n",
            e->kind == EMU_MEM_DEVICE ? "device" : "pinned host", (size_t)(lo - e->lo), (size_t)(hi - e->lo),
            (size_t)(e->hi - e->lo), old->write ? "written" : "read", a->write ? "written" : "read");
    emu_print_site("earlier", old->site);
    emu_print_site("later", now);
    abort();
}

// a bound under which every stream and the host have synchronised with component c: records
// at or below it can race with nothing that is still to come
static EMU_NO_TRACK unsigned emu_floor(int c) {
    unsigned f = emu_dev.host.c[c];
    for (int s = 1; s < emu_dev.num_streams; s++) {
        EmuQueue* q = emu_dev.streams[s];
        if (q != NULL && q->clock.c[c] < f) { f = q->clock.c[c]; }
    }
    return f;
}

static EMU_NO_TRACK void emu_check(EmuOp* op, const EmuAccess* a) {
    int i = emu_find_range((const void*)a->lo, a->hi - a->lo, op->site->what);
    if (i < 0) { return; }
    std::vector<EmuRecord>& h = emu_dev.history[i];
    for (const EmuRecord& r : h) {
        if (r.hi <= a->lo || a->hi <= r.lo || (!r.write && !a->write)) { continue; }
        if (r.stamp <= op->clock.c[r.stream]) { continue; }  // r happens before op
        emu_race(&r, op->site, a, i);
    }
    if (a->write) {
        emu_dev.allocs[i].dev_write_serial = emu_dev.exec_serial;
        // a write ordered after older accesses it covers stands for them from now on: anything
        // racing with those also races with it
        size_t k = 0;
        for (size_t j = 0; j < h.size(); j++) {
            const EmuRecord& r = h[j];
            int covered = r.lo >= a->lo && r.hi <= a->hi && r.stamp <= op->clock.c[r.stream];
            if (!covered) { h[k++] = r; }
        }
        h.resize(k);
    }
    if (h.size() >= 256) {
        unsigned floor[EMU_MAX_STREAMS];
        for (int c = 0; c < emu_dev.num_streams; c++) { floor[c] = emu_floor(c); }
        size_t k = 0;
        for (size_t j = 0; j < h.size(); j++) {
            if (h[j].stamp > floor[h[j].stream]) { h[k++] = h[j]; }
        }
        h.resize(k);
    }
    // one record per operation and range: merge with the same operation's last one
    if (!h.empty() && h.back().site == op->site && h.back().write == a->write && h.back().hi >= a->lo && a->hi >= h.back().lo) {
        EmuRecord& b = h.back();
        b.lo = b.lo < a->lo ? b.lo : a->lo;
        b.hi = b.hi > a->hi ? b.hi : a->hi;
        return;
    }
    h.push_back(EmuRecord{a->lo, a->hi, a->write, op->stream, op->clock.c[op->stream], op->site});
}

// the compiler's callbacks (see the top): an access to the arena while an operation runs is
// recorded; one from the host outside any operation is refused if it is device memory
// another host thread's access to the arena (see [Note: one thread runs the GPU])
static EMU_NO_TRACK __attribute__((noinline)) void emu_touch_other_thread(uintptr_t a, int write) {
    pthread_mutex_lock(&emu_allocs_lock);
    int lo = 0, hi = (int)emu_dev.allocs.size() - 1, kind = 0;
    while (lo <= hi) {  // (emu_find without its cache, which is the runtime thread's)
        int mid = (lo + hi) / 2;
        const EmuAlloc* e = &emu_dev.allocs[mid];
        if (a < e->lo) { hi = mid - 1; } else if (a >= e->hi) { lo = mid + 1; } else { kind = e->live ? e->kind : 0; break; }
    }
    pthread_mutex_unlock(&emu_allocs_lock);
    if (kind == EMU_MEM_DEVICE) {
        emu_die("a host thread %s device memory (on a GPU that is an invalid address on the host)", write ? "wrote" : "read");
    }
}

static inline __attribute__((always_inline)) EMU_NO_TRACK void emu_touch(uintptr_t a, size_t n, int write) {
    if (a - (uintptr_t)emu_dev.arena >= EMU_ARENA_BYTES || n == 0) { return; }
    if (!emu_gpu_thread) {
        emu_touch_other_thread(a, write);
        return;
    }
    if (!emu_dev.tracking) {
        if (emu_dev.running == NULL) {
            int i = emu_find(a);
            if (i >= 0 && emu_dev.allocs[i].kind == EMU_MEM_DEVICE) {
                emu_die("host code %s device memory (on a GPU that is an invalid address on the host)", write ? "wrote" : "read");
            }
        }
        return;
    }
    int i = emu_find(a);
    if (i < 0 || !emu_dev.allocs[i].live) { emu_die("a kernel touched an address in no live allocation"); }
    EmuTouch* t = emu_dev.last_touch;  // (most accesses go where the last one went)
    if (t == NULL || t->alloc != i) {
        t = NULL;
        for (int k = emu_dev.num_touch - 1; k >= 0; k--) {
            if (emu_dev.touch[k].alloc == i) { t = &emu_dev.touch[k]; break; }
        }
    }
    if (t == NULL) {
        if (emu_dev.num_touch == 64) { emu_die("a kernel touched over 64 allocations"); }
        t = &emu_dev.touch[emu_dev.num_touch++];
        *t = EmuTouch{i, UINTPTR_MAX, 0, UINTPTR_MAX, 0};
    }
    emu_dev.last_touch = t;
    if (write) {
        if (a < t->wlo) { t->wlo = a; }
        if (a + n > t->whi) { t->whi = a + n; }
    } else {
        if (a < t->rlo) { t->rlo = a; }
        if (a + n > t->rhi) { t->rhi = a + n; }
    }
}

#define EMU_CALLBACKS(N)                                                                        \
    extern "C" EMU_NO_TRACK void __asan_load##N##_noabort(void* p) { emu_touch((uintptr_t)p, N, 0); } \
    extern "C" EMU_NO_TRACK void __asan_store##N##_noabort(void* p) { emu_touch((uintptr_t)p, N, 1); }
#ifdef EMU_DEFINE_GLOBALS
EMU_CALLBACKS(1)
EMU_CALLBACKS(2)
EMU_CALLBACKS(4)
EMU_CALLBACKS(8)
EMU_CALLBACKS(16)
extern "C" EMU_NO_TRACK void __asan_loadN_noabort(void* p, long n) { emu_touch((uintptr_t)p, (size_t)n, 0); }
extern "C" EMU_NO_TRACK void __asan_storeN_noabort(void* p, long n) { emu_touch((uintptr_t)p, (size_t)n, 1); }
extern "C" EMU_NO_TRACK void __asan_handle_no_return(void) {}
extern "C" EMU_NO_TRACK void __asan_before_dynamic_init(const char*) {}  // (initialisation order: not checked)
extern "C" EMU_NO_TRACK void __asan_after_dynamic_init(void) {}
#endif

// ----------------------------------------------------------------------------
// streams

static EMU_NO_TRACK EmuQueue* emu_queue(int id) {
    emu_init();
    return emu_dev.streams[id];
}

static EMU_NO_TRACK int emu_stream_new(int blocking) {
    emu_init();
    if (emu_dev.num_streams == EMU_MAX_STREAMS) { emu_die("over %s streams created", "30"); }
    EmuQueue* q = new EmuQueue();
    q->id = emu_dev.num_streams++;
    q->blocking = blocking;
    q->clock = emu_dev.host;
    emu_dev.streams[q->id] = q;
    return q->id;
}

static EMU_NO_TRACK int emu_op_ready(const EmuOp* op) {
    for (int c = 1; c < emu_dev.num_streams; c++) {
        if (c != op->stream && emu_dev.streams[c]->done < op->clock.c[c]) { return 0; }
    }
    return 1;
}

static EMU_NO_TRACK void emu_op_done(EmuQueue* q, EmuOp* op) {
    q->done = op->seq;
    q->q.pop_front();
    delete op;
}

// runs one operation (a collective: starts it)
static EMU_NO_TRACK void emu_exec(EmuQueue* q, EmuOp* op) {
    EmuDevice* d = &emu_dev;
    if (op->src_hi > op->src_lo) {  // a copy from pinned memory: the source as it was at the call
        int i = emu_find((uintptr_t)op->src_lo);
        if (d->allocs[i].dev_write_serial <= op->serial && emu_checksum(op->src_lo, op->src_hi) != op->src_sum) {
            fprintf(stderr, "emulated CUDA: RACE: the host changed pinned memory a queued copy reads, after the copy was "
                            "issued and before it ran\n");
            emu_print_site("the copy", op->site);
            abort();
        }
    }
    if (op->dst_hi > op->dst_lo) {  // a copy into pinned memory: nobody wrote over the poison
        int i = emu_find((uintptr_t)op->dst_lo);
        if (d->allocs[i].dev_write_serial <= op->serial) {
            for (const unsigned char* p = (const unsigned char*)op->dst_lo; p < (const unsigned char*)op->dst_hi; p++) {
                if (*p != 0xff) {
                    fprintf(stderr, "emulated CUDA: RACE: the host wrote into pinned memory a queued copy writes, before the "
                                    "copy ran\n");
                    emu_print_site("the copy", op->site);
                    abort();
                }
            }
        }
    }
    d->exec_serial++;
    for (const EmuAccess& a : op->acc) { emu_check(op, &a); }
    d->running = op;
    if (op->track) {
        d->num_touch = 0;
        d->last_touch = NULL;
        d->tracking = 1;
    }
    op->run(op);
    if (op->track) {
        d->tracking = 0;
        for (int k = 0; k < d->num_touch; k++) {
            const EmuTouch* t = &d->touch[k];
            if (t->rhi > t->rlo) { EmuAccess a = {t->rlo, t->rhi, 0}; emu_check(op, &a); }
            if (t->whi > t->wlo) { EmuAccess a = {t->wlo, t->whi, 1}; emu_check(op, &a); }
        }
    }
    d->running = NULL;
    if (op->poll) {
        q->inflight = op;
    } else {
        emu_op_done(q, op);
    }
}

// polls the collectives in flight; 1 if one completed
static EMU_NO_TRACK int emu_poll(void) {
    int progress = 0;
    for (int s = 1; s < emu_dev.num_streams; s++) {
        EmuQueue* q = emu_dev.streams[s];
        if (q->inflight == NULL) { continue; }
        emu_dev.running = q->inflight;
        int done = q->inflight->poll(q->inflight);
        emu_dev.running = NULL;
        if (done) {
            EmuOp* op = q->inflight;
            q->inflight = NULL;
            emu_op_done(q, op);
            progress = 1;
        }
    }
    return progress;
}

// one step of the GPU: a ready head, chosen at random, runs; 1 if anything happened
static EMU_NO_TRACK int emu_step(void) {
    int progress = emu_poll();
    int ready[EMU_MAX_STREAMS], n = 0;
    for (int s = 1; s < emu_dev.num_streams; s++) {
        EmuQueue* q = emu_dev.streams[s];
        if (q->inflight == NULL && !q->q.empty() && emu_op_ready(q->q.front())) { ready[n++] = s; }
    }
    if (n == 0) { return progress; }
    EmuQueue* q = emu_dev.streams[ready[emu_dev.rng() % (unsigned)n]];
    emu_exec(q, q->q.front());
    return 1;
}

static inline double emu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// runs the GPU until done() holds; stops the run if nothing can make it hold
template <typename F> static EMU_NO_TRACK void emu_run_until(F done, const char* what) {
    double idle_since = 0.0;
    while (!done()) {
        if (emu_step()) { idle_since = 0.0; continue; }
        int inflight = 0;
        for (int s = 1; s < emu_dev.num_streams; s++) { inflight |= emu_dev.streams[s]->inflight != NULL; }
        if (!inflight) { emu_die("%s can never return: nothing queued can run (a wait on work that is never issued)", what); }
        if (idle_since == 0.0) { idle_since = emu_seconds(); }
        if (emu_seconds() - idle_since > 300.0) { emu_die("%s: a collective made no progress for 300 s (another rank stopped?)", what); }
        sched_yield();  // another rank must move first
    }
}

// at every API call: the GPU moves on by 0 to EMU_MAX_PER_CALL operations (default 3); with
// 0 it runs everything ready, with -1 nothing (the GPU as far behind the host as it can be:
// work runs only when the host waits for it)
static EMU_NO_TRACK void emu_tick(void) {
    emu_init();
    emu_dev.queried = 0;
    if (emu_dev.max_per_call < 0) { return; }
    if (emu_dev.max_per_call <= 0) {
        while (emu_step()) {}
        return;
    }
    int n = (int)(emu_dev.rng() % (unsigned)(emu_dev.max_per_call + 1));
    for (int i = 0; i < n; i++) {
        if (!emu_step()) { break; }
    }
}

// A query (cudaEventQuery, cudaStreamQuery): 1 when the call before was one too. A host that
// queries again and again, with nothing else between, is waiting (a polling wait, as
// zero3/nccl_watch.cuh's): a real GPU moves on meanwhile, so such a query that finds its work
// not done runs a step of the GPU, as a wait does, whatever EMU_MAX_PER_CALL says (-1 too).
static EMU_NO_TRACK int emu_query_begin(void) {
    int again = emu_dev.queried;
    emu_tick();
    emu_dev.queried = 1;
    return again;
}

// the host waits for operation `seq` of stream s (and what came before it there), then knows
// everything that happened before it (`clock`, that operation's)
static EMU_NO_TRACK void emu_host_wait(int s, unsigned seq, EmuClock clock, const char* what) {
    EmuQueue* q = emu_queue(s);
    emu_run_until([&]() { return q->done >= seq; }, what);
    emu_join(&emu_dev.host, &clock);
}
static EMU_NO_TRACK void emu_stream_sync(int s, const char* what) {
    EmuQueue* q = emu_queue(s);
    emu_host_wait(s, q->seq, q->clock, what);
}
static EMU_NO_TRACK void emu_device_sync(const char* what) {
    for (int s = 1; s < emu_dev.num_streams; s++) { emu_stream_sync(s, what); }
}

// issues an operation on stream s: its clock and its place in the queue
static EMU_NO_TRACK EmuOp* emu_op_new(int s, const char* what, const char* file, int line) {
    EmuQueue* q = emu_queue(s);
    EmuOp* op = new EmuOp();
    op->stream = s;
    op->clock = q->clock;
    emu_join(&op->clock, &emu_dev.host);
    // the legacy default stream and the blocking streams wait for each other's earlier work
    if (s == 1) {
        for (int o = 2; o < emu_dev.num_streams; o++) {
            if (emu_dev.streams[o]->blocking) { emu_join(&op->clock, &emu_dev.streams[o]->clock); }
        }
    } else if (q->blocking) {
        emu_join(&op->clock, &emu_dev.streams[1]->clock);
    }
    op->seq = ++q->seq;
    op->clock.c[s] = op->seq;
    q->clock = op->clock;
    EmuSite* site = new EmuSite();  // (kept: the checker's records name it)
    site->what = what; site->file = file; site->line = line; site->stream = s; site->seq = op->seq;
    site->ntrace = backtrace(site->trace, 10);
    op->site = site;
    op->serial = emu_dev.exec_serial;
    return op;
}
static EMU_NO_TRACK void emu_op_push(EmuOp* op) {
    emu_dev.streams[op->stream]->q.push_back(op);
    emu_tick();
}

#endif // EMU_DEVICE_H
