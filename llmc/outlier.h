/*
 llm.c's outlier detector, for -sl and -sg: the z-score of each new value (the loss, the
 gradient norm) against a window of the last OUTLIER_WINDOW values, the new one included,
 as llm.c's llmc/outlier_detector.h computes it (sums in double; the window must be full:
 until then the z-score is NaN, and nothing is skipped).

 The gradient norm is known only inside the engine's step (zero3/zero.h's ZeroStep), which
 must decide there whether to update. So outlier_limit turns "the z-score would pass k" into
 the value the norm must not pass: the z-score of a value pushed into the window rises with
 the value (from the others' mean up) towards (n - 1) / sqrt(n), so the limit is where it
 equals k, found by bisection; no value reaches a k at or past the bound (no limit).
*/
#ifndef LLMC_OUTLIER_H
#define LLMC_OUTLIER_H

#include <math.h>    // sqrt, NAN, INFINITY, isfinite

#define OUTLIER_WINDOW 128

typedef struct {
    double buf[OUTLIER_WINDOW];
    int count;   // values seen, up to the window
    int index;   // the oldest value's slot once the window is full
    double sum, sum_sq;
} OutlierDetector;

static inline void outlier_init(OutlierDetector* d) {
    for (int i = 0; i < OUTLIER_WINDOW; i++) { d->buf[i] = 0.0; }
    d->count = d->index = 0;
    d->sum = d->sum_sq = 0.0;
}

// the z-score x would have, pushed into the full window in place of the oldest value
static inline double outlier_z_if(const OutlierDetector* d, double x) {
    double n = OUTLIER_WINDOW, old = d->buf[d->index];
    double sum = d->sum - old + x, sum_sq = d->sum_sq - old * old + x * x;
    double mean = sum / n, var = sum_sq / n - mean * mean;
    double sd = var > 0.0 ? sqrt(var) : 0.0;
    return sd == 0.0 ? 0.0 : (x - mean) / sd;
}

// Pushes x; returns its z-score against the window (x included), NaN while the window fills.
static inline double outlier_update(OutlierDetector* d, double x) {
    if (d->count < OUTLIER_WINDOW) {
        d->buf[d->count++] = x;
        d->sum += x;
        d->sum_sq += x * x;
        return NAN;
    }
    double z = outlier_z_if(d, x);
    double old = d->buf[d->index];
    d->sum += x - old;
    d->sum_sq += x * x - old * old;
    d->buf[d->index] = x;
    d->index = (d->index + 1) % OUTLIER_WINDOW;
    return z;
}

// The value above which the next one's z-score passes k (k > 0), or 0 when none can: the
// window not full yet, or k at or past the bound (n - 1) / sqrt(n).
static inline double outlier_limit(const OutlierDetector* d, double k) {
    if (d->count < OUTLIER_WINDOW || !(k > 0.0)) { return 0.0; }
    if (k >= (OUTLIER_WINDOW - 1) / sqrt((double)OUTLIER_WINDOW)) { return 0.0; }  // (z's bound, reached only at infinity)
    double lo = (d->sum - d->buf[d->index]) / (OUTLIER_WINDOW - 1);  // the others' mean: z <= 0 there
    double hi = fabs(lo) + 1.0;
    for (int i = 0; i < 200 && outlier_z_if(d, hi) <= k; i++) { hi = hi * 2.0 + 1.0; }
    if (!isfinite(hi) || outlier_z_if(d, hi) <= k) { return 0.0; }
    for (int i = 0; i < 100; i++) {  // z(lo) <= k < z(hi)
        double mid = 0.5 * (lo + hi);
        if (outlier_z_if(d, mid) <= k) { lo = mid; } else { hi = mid; }
    }
    return hi;
}

#endif // LLMC_OUTLIER_H
