/*
 * The keyed Feistel permutation with cycle walking of
 * slipstream.sequences.permute (permute_reference): on b bits (2**b the
 * smallest power of two >= max(n, 4)), the high b - b/2 and low b/2 bits
 * updated alternately, FEISTEL_ROUNDS times, by a keyed mix64 of the other
 * half; values >= n go through again. Integer arithmetic modulo 2**64 only.
 */
#include "feistel.h"

int64_t
feistel_permute(uint64_t y, uint64_t n, uint64_t key)
{
    uint64_t v = (n < 4 ? 4 : n) - 1, rk[FEISTEL_ROUNDS];
    int bits = 0, lo_bits;
    uint64_t hi_mask, lo_mask;
    while (v) {
        bits++;
        v >>= 1;
    }
    lo_bits = bits / 2;
    hi_mask = ((uint64_t)1 << (bits - lo_bits)) - 1;
    lo_mask = ((uint64_t)1 << lo_bits) - 1;
    for (int r = 0; r < FEISTEL_ROUNDS; r++)
        rk[r] = mix64(key + (uint64_t)(r + 1) * FEISTEL_GOLDEN);
    do {
        uint64_t hi = y >> lo_bits, lo = y & lo_mask;
        for (int r = 0; r < FEISTEL_ROUNDS; r++) {
            if (r % 2 == 0)
                hi ^= mix64(lo ^ rk[r]) & hi_mask;
            else
                lo ^= mix64(hi ^ rk[r]) & lo_mask;
        }
        y = (hi << lo_bits) | lo;
    } while (y >= n);
    return (int64_t)y;
}
