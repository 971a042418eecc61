/* The keyed permutations of ss.mix (slipstream.sequences.permute's twin). */
#ifndef SLIPSTREAM_FEISTEL_H
#define SLIPSTREAM_FEISTEL_H

#include <stdint.h>

#define FEISTEL_GOLDEN 0x9E3779B97F4A7C15ULL
#define FEISTEL_ROUNDS 6

/* splitmix64's finalizer */
static inline uint64_t
mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* The image of y (< n) under the permutation of [0, n) keyed by key (n >= 1). */
int64_t feistel_permute(uint64_t y, uint64_t n, uint64_t key);

/* The key of a source's pass from its base key (permute.pass_keys). */
static inline uint64_t
feistel_pass_key(uint64_t base, uint64_t pass)
{
    return mix64(base ^ mix64((pass + 1) * FEISTEL_GOLDEN));
}

#endif
