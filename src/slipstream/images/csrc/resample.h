/*
 * resample: Pillow's antialiased resampling of uint8 images, in C, bit for bit
 * as slipstream's NumPy and numba kernels compute it (images/kernels).
 *
 * ss_resample() crops the box given by `edges` (float32 top, bottom, left,
 * right: Pillow's box as the C floats it receives) from an (H, W, C) uint8
 * image whose rows are `stride` bytes apart, resizes it to out_h x out_w with
 * Pillow's BILINEAR or BOX filter (double-precision coefficient windows,
 * 22-bit fixed-point weights, two 1-D passes each rounded and clipped to
 * uint8, Pillow 13's pass order), mirrors it left-right when `flip`, and
 * writes it as uint8 HWC into `res` (out_h * out_w * C bytes).
 *
 * ss_write() lays `res` out into a batch row: uint8 HWC or CHW, or float32 /
 * float16 (given as uint16 bits) through a per-channel table of the 256
 * normalized values (`lut`, C x 256 entries), HWC or CHW.
 *
 * No Python, no globals: safe to run in many threads without the GIL.
 */
#ifndef SLIPSTREAM_RESAMPLE_H
#define SLIPSTREAM_RESAMPLE_H

#include <stddef.h>
#include <stdint.h>

/* Scratch memory one thread reuses across calls (grown as needed). */
typedef struct {
    void *block;
    size_t size;
} ss_scratch;

void ss_scratch_free(ss_scratch *scratch);

/* 1 when the resampler's passes run their AVX2 copies (the CPU and OS have AVX2, SLIPSTREAM_NO_AVX2 unset), else 0. */
int ss_resample_avx2(void);

/* Returns 0, or -1 when memory runs out. The arguments must be valid: the box
   inside the image (checked by the caller, as checks.py does), sizes >= 1,
   channels 1 or 3. */
int ss_resample(const uint8_t *src, int height, int width, int channels, size_t stride,
                const float edges[4], int out_h, int out_w, int box_filter, int flip, int chw,
                uint8_t *res, ss_scratch *scratch);

enum { SS_U8 = 0, SS_F32 = 1, SS_F16 = 2 };

void ss_write(const uint8_t *res, size_t n, int channels, int chw, size_t plane, int dtype,
              const void *lut, void *out);

#endif
