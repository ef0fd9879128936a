/*
 A small deterministic RNG shared by model init, dataloader shuffling and sampling.
 splitmix64: 64 bits of state, a full period, identical on every rank and platform,
 so the same --seed gives the same model and the same batch order everywhere.

 Model init uses it counter-based (rng_normal_at): the sample of element i is a pure
 function of (seed, i), so any rank can make any range of the model alone, in any
 order, and get what one process making the whole model gets.
*/
#ifndef LLMC_RAND_H
#define LLMC_RAND_H

#include <stdint.h>  // uint64_t, uint32_t
#include <stddef.h>  // size_t
#include <math.h>    // sqrtf, logf, cosf for Box-Muller

typedef struct { uint64_t state; } Rng;

static inline void rng_init(Rng* rng, uint64_t seed) { rng->state = seed; }

static inline uint64_t rng_u64(Rng* rng) {
    uint64_t z = (rng->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// uniform in [0, 1) with 24 random bits, exactly representable in a float
static inline float rng_float(Rng* rng) { return (float)(rng_u64(rng) >> 40) / 16777216.0f; }

// uniform integer in [0, n), n > 0 (rejection sampling: no modulo bias)
static inline uint64_t rng_below(Rng* rng, uint64_t n) {
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do { x = rng_u64(rng); } while (x >= limit);
    return x % n;
}

// [Note: counter-based samples] The sample at `index` is the standard normal made by
// Box-Muller from the two splitmix64 outputs at counters 2*index+1 and 2*index+2 of a
// stream keyed by the seed (its start is the seed hashed, so nearby seeds give unrelated
// streams). Distinct indices use distinct counters, so the samples are independent; only
// the cosine half of each pair is used, so that no sample depends on a neighbour. The
// arithmetic has no multiply followed by an add, so no compiler can fuse one into an FMA:
// the CPU trainer (built -march=native) and the GPU trainer's host code (built without)
// make the same bits.
static inline float rng_normal_at(uint64_t seed, uint64_t index) {
    Rng key = {seed};
    Rng rng = {rng_u64(&key) + 2 * index * 0x9E3779B97F4A7C15ull};
    float u1 = 1.0f - rng_float(&rng);  // (0, 1]: log is finite
    float u2 = rng_float(&rng);
    float r = sqrtf(-2.0f * logf(u1));
    return r * cosf(6.2831853071795864f * u2);
}

// Fisher-Yates shuffle of idx[0..n)
static inline void rng_permute(Rng* rng, int* idx, size_t n) {
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)rng_below(rng, i);
        int tmp = idx[i - 1]; idx[i - 1] = idx[j]; idx[j] = tmp;
    }
}

#endif // LLMC_RAND_H
