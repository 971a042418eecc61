/*
 * place: the geometry ops' windows and where they lie in the decoded pixels,
 * for every sample of a task, in C: the same IEEE operations in the same
 * order as images/imageops.py's Geometry.place and images/placement.py (which the
 * per-sample path runs), so both give the same bits (tests/images/test_imagetasks.py).
 *
 * A program is a list of ops of SS_OP_WORDS doubles each: its kind, the
 * column of its first draw in the sample's uniforms `u`, then its parameters
 * (images/imagetasks.py's `_program` writes them):
 *   SS_RRC:    size_h, size_w, scale0, scale1 - scale0, log(ratio0),
 *              log(ratio1) - log(ratio0), halvings, ratio0, ratio1, 0.5**halvings
 *   SS_RESIZE: size (the shorter side; 0: resize to h x w), h, w
 *   SS_CENTER: h, w, resize (the shorter side first; 0: none)
 *   SS_FLIP:   p
 */
#ifndef SLIPSTREAM_PLACE_H
#define SLIPSTREAM_PLACE_H

#include <stddef.h>
#include <stdint.h>

enum { SS_RRC = 1, SS_RESIZE = 2, SS_CENTER = 3, SS_FLIP = 4 };
#define SS_OP_WORDS 12

/* Places sample i (stored height x width) through the program; writes its
   DCT factor, decode region (top, left, rows, cols), edges (top, bottom,
   left, right), flip and output size. Returns 1 when the window is valid,
   0 when the per-sample path must handle the sample (an op that cannot
   apply, a window the resampler would refuse). */
int ss_place(int height, int width, const double *u, const double *program, int nops, int jpeg, int exact,
             int32_t *factor, int64_t region[4], float edges[4], uint8_t *flip, int64_t out_hw[2]);

/* Sample `row`'s uniforms (csrc mirror of core/draws.py's Draws.block): column c is
   mix(mix(row * GOLDEN + keys[columns[c]]) + counters[c]) >> 11, times 2**-53. */
void ss_draws(uint64_t row, const uint64_t *keys, const int64_t *columns, const uint64_t *counters, int ncols, double *u);

#endif
