/*
 * pixel: the compiled executor of the pixel ops' step programs.
 *
 * ss_pixel_steps() applies `count` steps (rows of SS_PIXEL_WORDS doubles:
 * an opcode, then its parameters) in order to a uint8 (H, W, C) image, C 1
 * or 3, C-contiguous, in place, each step reading the previous one's uint8
 * output. The opcodes, their parameters and their exact IEEE float32
 * arithmetic are those of images/kernels/pixel_steps.py, the NumPy reference:
 * both give the same bits for every image and step (the file is compiled with
 * -ffp-contract=off and without fast math, and every rounding is spelled out).
 *
 * A step that cannot apply (a non-finite word, a blur kernel wider than the
 * image allows, an odd quarter turn of a non-square image, negative posterize
 * bits, an unknown opcode) stops the run with -1 and `msg` holding the text of
 * the reference's ValueError ("pixel step {i} ({NAME}): ..."); the image may
 * then be partly modified. -2: out of memory (`msg` says so).
 *
 * `scratch` is grown as needed and kept by the caller from one call to the
 * next (no allocation per pixel, none per call once it is large enough).
 * Steps that map each value through a table per channel (BRIGHTNESS,
 * CONTRAST, POSTERIZE, SOLARIZE, AUTOCONTRAST, EQUALIZE, INVERT) are
 * composed and applied in one pass per run of them (the same bits: a
 * statistic a table depends on is that of the image with the earlier tables
 * applied).
 *
 * ss_pixel_steps_table() runs the same steps but leaves the tables of the
 * program's trailing run of table steps to the caller: it returns 1 with
 * `table` (C x 256 bytes, C 3; rows past `channels` unused) set when the
 * program's output is table[c][image[..., c]] (the caller applies it while
 * it writes the pixels out), 0 when `image` is the output itself, and -1 or
 * -2 as ss_pixel_steps.
 *
 * No Python, no globals: safe to run in many threads without the GIL.
 */
#ifndef SLIPSTREAM_PIXEL_H
#define SLIPSTREAM_PIXEL_H

#include <stddef.h>
#include <stdint.h>

#include "resample.h"

enum { SS_PIXEL_WORDS = 12 };

int ss_pixel_steps(uint8_t *image, int height, int width, int channels, const double *steps, int count,
                   ss_scratch *scratch, char *msg, size_t msg_size);

int ss_pixel_steps_table(uint8_t *image, int height, int width, int channels, const double *steps, int count,
                         ss_scratch *scratch, char *msg, size_t msg_size, uint8_t table[3][256]);

#endif
