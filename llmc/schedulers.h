/*
 Learning-rate schedules. step is 0-based; lr_min = lr * final_frac.
   warmup (every type): step < warmup  ->  lr * (step + 1) / warmup
   after warmup, with ratio = (step - warmup) / (total - warmup), clamped to [0, 1]:
     cosine:   lr_min + 0.5 * (1 + cos(pi * ratio)) * (lr - lr_min)
     linear:   lr - ratio * (lr - lr_min)
     constant: lr
     wsd:      lr until decay = floor(0.8 * total), then over the last 20% with
               r = (step - decay) / (total - decay), clamped to [0, 1]:
               lr_min + (1 - sqrt(r)) * (lr - lr_min)   (warm-up, stable, decay: llm.c's -k wsd)
 This is llm.c's convention: ratio reaches 1 (lr == lr_min) at step == total, one past the
 last step of a total-step run, so the last step (total - 1) trains at a learning rate
 just above lr_min. Steps >= total stay at lr_min. When total <= warmup there is nothing
 to decay over and every step after warmup gets lr_min (constant: lr).
*/
#ifndef LLMC_SCHEDULERS_H
#define LLMC_SCHEDULERS_H

#include <math.h>        // cosf, sqrtf
#include <string.h>      // strcmp
#include "llmc/utils.h"  // llmc_error

enum { LR_COSINE = 0, LR_LINEAR = 1, LR_CONSTANT = 2, LR_WSD = 3 };

typedef struct {
    int type;          // LR_COSINE, LR_LINEAR, LR_CONSTANT or LR_WSD
    float lr;          // peak learning rate, reached at the end of warmup
    int warmup;        // number of warmup steps (0: none)
    int total;         // total number of steps of the run
    float final_frac;  // lr_min = lr * final_frac
} LRScheduler;

// 0 on success; -1 with llmc_error on an unknown type or a negative warmup/total
static inline int lr_scheduler_init(LRScheduler* s, const char* type, float lr, int warmup, int total,
                                    float final_frac) {
    if (type == NULL) { return llmc_error("lr scheduler: no type given (accepted: cosine, linear, constant, wsd)"); }
    if (strcmp(type, "cosine") == 0) { s->type = LR_COSINE; }
    else if (strcmp(type, "linear") == 0) { s->type = LR_LINEAR; }
    else if (strcmp(type, "constant") == 0) { s->type = LR_CONSTANT; }
    else if (strcmp(type, "wsd") == 0) { s->type = LR_WSD; }
    else { return llmc_error("lr scheduler: unknown type '%s' (accepted: cosine, linear, constant, wsd)", type); }
    if (warmup < 0) { return llmc_error("lr scheduler: warmup must be >= 0, got %d", warmup); }
    if (total < 0) { return llmc_error("lr scheduler: total steps must be >= 0, got %d", total); }
    s->lr = lr;
    s->warmup = warmup;
    s->total = total;
    s->final_frac = final_frac;
    return 0;
}

// the learning rate for 0-based step `step`
static inline float lr_scheduler_get(const LRScheduler* s, int step) {
    if (step < s->warmup) {
        return s->lr * (float)(step + 1) / (float)s->warmup;
    }
    if (s->type == LR_CONSTANT) { return s->lr; }
    float lr_min = s->lr * s->final_frac;
    if (s->type == LR_WSD) {
        int decay = (int)(0.8f * (float)s->total);
        if (step < decay) { return s->lr; }
        float r = s->total > decay ? (float)(step - decay) / (float)(s->total - decay) : 1.0f;
        r = r > 1.0f ? 1.0f : r;
        return lr_min + (1.0f - sqrtf(r)) * (s->lr - lr_min);
    }
    int span = s->total - s->warmup;
    float ratio = span > 0 ? (float)(step - s->warmup) / (float)span : 1.0f;
    if (ratio > 1.0f) { ratio = 1.0f; }
    if (ratio < 0.0f) { ratio = 0.0f; }
    if (s->type == LR_COSINE) {
        float coeff = 0.5f * (1.0f + cosf(3.14159265358979f * ratio));  // 1 -> 0
        return lr_min + coeff * (s->lr - lr_min);
    }
    return s->lr - ratio * (s->lr - lr_min);  // LR_LINEAR
}

#endif // LLMC_SCHEDULERS_H
