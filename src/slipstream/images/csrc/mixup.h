/*
 * mixup: MixUp of a batch, out[i] = images[i - 1] * (1 - lam) + images[i] * lam
 * (sample 0 with the last), bit for bit as images/batchops.py's NumPy code:
 *
 *   float32: f32(f32(x[i-1] * a) + f32(x[i] * b)), a = f32(1 - lam), b = f32(lam)
 *            (each product and the sum rounded to float32, no fused multiply-add);
 *   float16: each product computed in float32 and rounded to float16, their sum
 *            computed in float32 and rounded to float16 (NumPy's conversions);
 *   uint8:   the float32 sum rounded half to even and clipped to [0, 255].
 *
 * Where both products are NaN the result is a NaN whose sign and payload are not
 * specified (NumPy's own SIMD and scalar loops pick different operands there).
 *
 * `count` samples of `per` values each, C-contiguous, `dtype` SS_U8, SS_F32 or
 * SS_F16 (resample.h; float16 as its bits); `out` must not overlap `images`.
 * lam in [0, 1] (the caller's check: the uint8 sums are then in [0, 255]).
 * No Python, no globals: safe to run without the GIL.
 */
#ifndef SLIPSTREAM_MIXUP_H
#define SLIPSTREAM_MIXUP_H

#include <stddef.h>

void ss_mixup(const void *images, void *out, size_t count, size_t per, int dtype, double lam);

#endif
