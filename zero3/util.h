/*
 What every file of the ZeRO engine needs and nothing more, so that zero3/ includes
 nothing of llmc/ (the trainer's layer sits on top of this one, never below it):

 - the error convention: a function returns 0 on success, or -1 after recording one line
   that names the value or file and what is wrong with it, `return zero_error("...")`. The
   caller decides: library code passes the -1 up (cleaning up on the way), the trainer
   prints zero_errmsg() and stops. Failure paths can so be tested without a crash.
 - a monotonic clock in milliseconds, for the figures the engine reports.

 The message is kept per thread: the device engine's CPU Adam thread (--dpu) records its
 own errors without racing the main thread.
*/
#ifndef ZERO3_UTIL_H
#define ZERO3_UTIL_H

#include <stdio.h>   // vsnprintf
#include <stdarg.h>  // va_list
#include <time.h>    // clock_gettime

#ifdef __cplusplus
static thread_local char zero_errbuf[1024];  // C++ spelling of _Thread_local (the GPU trainer is C++)
#else
static _Thread_local char zero_errbuf[1024];
#endif

// records a message (printf format) and returns -1, so: `return zero_error("...");`
__attribute__((format(printf, 1, 2)))
static inline int zero_error(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(zero_errbuf, sizeof(zero_errbuf), fmt, ap);
    va_end(ap);
    return -1;
}

// the last message zero_error recorded on this thread
static inline const char* zero_errmsg(void) { return zero_errbuf; }

// wall-clock milliseconds from an arbitrary origin (CLOCK_MONOTONIC: never steps back)
static inline double zero_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

#endif // ZERO3_UTIL_H
