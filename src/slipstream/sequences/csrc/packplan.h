/*
 * packplan: bin-packing plans for token documents (best-fit decreasing, first-fit decreasing).
 */
#ifndef SLIPSTREAM_PACKPLAN_H
#define SLIPSTREAM_PACKPLAN_H

#include <stddef.h>
#include <stdint.h>

#define PACK_BEST_FIT 0
#define PACK_FIRST_FIT 1

/*
 * Pack items of sizes[0..n-1] (each 1..capacity) into bins of `capacity`.
 * Items are taken in decreasing size, equal sizes in a seeded shuffled
 * order (`keys`: the 4 round keys of a Feistel permutation of 0..n-1; NULL:
 * 0, 1, ...), a stable sort of the shuffled items; each goes into the fullest bin it fits (best fit: the
 * bin of least remaining capacity >= its size, the most recently filled
 * to that capacity among equals) or into the first bin it fits (first
 * fit: the lowest-numbered one), a new bin when none fits.
 *
 * Output, CSR: bin b holds ids[k] for the positions k listed in
 * bin_items[bin_offsets[b] .. bin_offsets[b+1]-1], in the order they were
 * placed; bins are numbered in the order they were opened. bin_offsets
 * must hold max_bins + 1 entries, bin_items n.
 *
 * Returns the number of bins, or -1 with `msg` set (a size out of range,
 * more than max_bins bins, capacity too large), -2 when out of memory.
 */
int64_t pack_plan(const int64_t *sizes, const int64_t *ids, const uint64_t *keys, int64_t n, int64_t capacity, int method,
                  int64_t max_bins, int64_t *bin_offsets, int64_t *bin_items, char *msg, size_t msg_len);

#endif
