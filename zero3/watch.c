// zero3/watch.c: the implementation (the interface and its notes: zero3/watch.h)
#include "zero3/watch.h"  // this module's types and prototypes
#include <stdlib.h>      // getenv, atoi
#include <string.h>      // strstr, strchr, strcmp, strlen, memcpy
#include <signal.h>      // raise, SIGSTOP: the stop hook
#include <unistd.h>      // sleep: the stall hook
#include "zero3/util.h"  // zero_now_ms

ZeroWatch zero_watch;

void zero_watch_publish(void) {
    ZeroWatch* w = &zero_watch;
    int64_t* slot = w->slot;
    if (slot == NULL) { return; }
    int64_t doing = w->since != 0 ? ZERO_DOING_COLLECTIVE : w->io_depth > 0 ? ZERO_DOING_IO : ZERO_DOING_OTHER;
    __atomic_store_n(&slot[ZERO_SLOT_STATE], doing, __ATOMIC_RELEASE);
}

static int64_t zero_watch_now(void) {
    int64_t now = (int64_t)zero_now_ms();
    return now > 0 ? now : 1;  // 0 means "not waiting"
}

// the test hooks' settings, once (ZERO3_TEST_STOP=R:S:before|inside|after)
static void zero_watch_read_tests(void) {
    ZeroWatch* w = &zero_watch;
    if (w->test_read) { return; }
    w->test_read = 1;
    w->stall = getenv("ZERO3_TEST_STALL_IO");
    const char* stop = getenv("ZERO3_TEST_STOP");
    const char* where = stop != NULL ? strrchr(stop, ':') : NULL;
    if (where == NULL) { return; }
    w->stop_rank = atoi(stop);
    w->stop_step = strchr(stop, ':') < where ? atoi(strchr(stop, ':') + 1) : 0;
    w->stop_where = !strcmp(where + 1, "before") ? 1 : !strcmp(where + 1, "inside") ? 2 : !strcmp(where + 1, "after") ? 3 : 0;
}

// ZERO3_TEST_STOP: this rank stops here if the hook names this place of a unit's wait
static void zero_watch_test_stop(int where, int unit) {
    ZeroWatch* w = &zero_watch;
    zero_watch_read_tests();
    if (w->stop_where != where || w->stopped || unit < 0 || w->slot == NULL || w->rank != w->stop_rank ||
        w->step < w->stop_step) {
        return;
    }
    w->stopped = 1;
    raise(SIGSTOP);
}

void zero_watch_enter(const char* what, int unit) {
    ZeroWatch* w = &zero_watch;
    zero_watch_test_stop(1, unit);
    w->what = what;
    w->unit = unit;
    w->wait_step = w->step;
    __atomic_store_n(&w->since, zero_watch_now(), __ATOMIC_RELEASE);
    zero_watch_publish();
    zero_watch_test_stop(2, unit);
}

void zero_watch_leave(void) {
    ZeroWatch* w = &zero_watch;
    int unit = w->unit;
    __atomic_store_n(&w->since, (int64_t)0, __ATOMIC_RELEASE);
    zero_watch_publish();
    zero_watch_test_stop(3, unit);
}

void zero_watch_running(const char* what, int unit, int step, double since) {
    ZeroWatch* w = &zero_watch;
    int64_t at = since > 0 ? (int64_t)since : 1;
    if (w->since == at && w->what == what && w->unit == unit && w->wait_step == step) { return; }  // (as told before)
    w->what = what;
    w->unit = unit;
    w->wait_step = step;
    __atomic_store_n(&w->since, at, __ATOMIC_RELEASE);
    zero_watch_publish();
}

void zero_watch_step(int step) { zero_watch.step = step; }

void zero_watch_io_enter(const char* what, const char* path) {
    ZeroWatch* w = &zero_watch;
    if (w->io_depth == ZERO_WATCH_IO_DEPTH) { w->io_nested++; return; }
    ZeroWatchIo* e = &w->io[w->io_depth];
    __atomic_store_n(&e->since, (int64_t)0, __ATOMIC_RELEASE);
    e->what = what;
    size_t len = strlen(path), keep = len < sizeof(e->path) ? len : sizeof(e->path) - 1;  // the end names the file
    memcpy(e->path, path + len - keep, keep);
    e->path[keep] = '\0';
    __atomic_store_n(&e->since, zero_watch_now(), __ATOMIC_RELEASE);
    __atomic_store_n(&w->io_depth, w->io_depth + 1, __ATOMIC_RELEASE);
    zero_watch_publish();
    zero_watch_read_tests();
    if (w->stall != NULL && w->stall[0] != '\0' && strstr(path, w->stall) != NULL) {
        for (;;) { sleep(1); }  // ZERO3_TEST_STALL_IO: a disk that never answers (signals do not end it)
    }
}

void zero_watch_io_leave(void) {
    ZeroWatch* w = &zero_watch;
    if (w->io_nested > 0) { w->io_nested--; return; }
    if (w->io_depth == 0) { return; }
    __atomic_store_n(&w->io_depth, w->io_depth - 1, __ATOMIC_RELEASE);
    __atomic_store_n(&w->io[w->io_depth].since, (int64_t)0, __ATOMIC_RELEASE);
    zero_watch_publish();
}

void zero_watch_on_exit(void (*fn)(void)) {
    ZeroWatch* w = &zero_watch;
    for (int i = 0; i < ZERO_WATCH_HOOKS; i++) {
        if (w->hooks[i] == fn) { return; }
        if (w->hooks[i] == NULL) { __atomic_store_n(&w->hooks[i], fn, __ATOMIC_RELEASE); return; }
    }
}

void zero_watch_exit_hooks(void) {
    for (int i = 0; i < ZERO_WATCH_HOOKS; i++) {
        void (*fn)(void) = __atomic_load_n(&zero_watch.hooks[i], __ATOMIC_ACQUIRE);
        if (fn != NULL) { fn(); }
    }
}
