/*
 What every file of the ZeRO engine needs and nothing more, so that zero3/ includes
 nothing of llmc/ (the trainer's layer sits on top of this one, never below it):

 - the error convention: a function returns 0 on success, or -1 after recording one line
   that names the value or file and what is wrong with it, `return zero_error("...")`. The
   caller decides: library code passes the -1 up (cleaning up on the way), the trainer
   prints zero_errmsg() and stops. Failure paths can so be tested without a crash.
 - a monotonic clock in milliseconds, for the figures the engine reports;
 - zero_clear: new memory zeroed on every core (the engines' large host allocations).

 The message is kept per thread: the device engine's CPU Adam thread (--dpu) records its
 own errors without racing the main thread.
*/
#ifndef ZERO3_UTIL_H
#define ZERO3_UTIL_H

#include <stddef.h>  // size_t

#ifdef __cplusplus
extern "C" {
#endif

#define ZERO_ERRMSG_BYTES 1024  // a message's room, its terminating NUL included

// records a message (printf format) and returns -1, so: `return zero_error("...");`
__attribute__((format(printf, 1, 2)))
int zero_error(const char* fmt, ...);

// the last message zero_error recorded on this thread
const char* zero_errmsg(void);

// wall-clock milliseconds from an arbitrary origin (CLOCK_MONOTONIC: never steps back)
double zero_now_ms(void);

// Sets bytes of p to zero on every OpenMP thread, each a contiguous slice: new memory's
// pages are then faulted in on all cores at once, not one core (d48's 37 GB of pinned
// offload arrays, or its host shards). Where memory is NUMA, each page lands near the
// thread that will read that slice in the engines' parallel loops (the same static split).
void zero_clear(void* p, size_t bytes);

#ifdef __cplusplus
}
#endif

#endif // ZERO3_UTIL_H
