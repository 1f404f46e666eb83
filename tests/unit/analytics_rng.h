/* analytics_rng: fixed-seed PRNG and distributions shared by the analytics unit tests. */
#ifndef ANALYTICS_RNG_H
#define ANALYTICS_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct test_rng {
    uint64_t s;
} test_rng;

static inline uint64_t rng_u64(test_rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in (0, 1). */
static inline double rng_unif(test_rng *r)
{
    return ((double)(rng_u64(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

static inline double rng_gauss(test_rng *r)
{
    double u = rng_unif(r), v = rng_unif(r);
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

#endif
