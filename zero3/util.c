// zero3/util.c: the error convention and the clock (the interface and its notes: zero3/util.h)
#include <stdio.h>        // vsnprintf
#include <stdarg.h>       // va_list
#include <time.h>         // clock_gettime
#include <string.h>       // memset
#include "zero3/util.h"   // this module's prototypes

static _Thread_local char zero_errbuf[ZERO_ERRMSG_BYTES];  // the last message, per thread

int zero_error(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(zero_errbuf, sizeof(zero_errbuf), fmt, ap);
    va_end(ap);
    return -1;
}

const char* zero_errmsg(void) { return zero_errbuf; }

double zero_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

void zero_clear(void* p, size_t bytes) {
    // 2 MiB pieces (a huge page each, where the kernel gives them), a contiguous run of them
    // a thread (schedule(static)); below 4 MiB the threads' start costs more than it saves
    const size_t piece = (size_t)2 << 20;
    size_t n = (bytes + piece - 1) / piece;
    #pragma omp parallel for schedule(static) if (n > 2)
    for (size_t i = 0; i < n; i++) {
        size_t at = i * piece;
        memset((char*)p + at, 0, bytes - at < piece ? bytes - at : piece);
    }
}
