/*
 * task: a chunk of a batch of images in one call, without the GIL.
 *
 * ss_run_task() runs samples start..stop-1 of `task`: for each, the encoded
 * bytes (a JPEG, decoded only around its window at a reduced DCT scale by
 * roi_decode) or stored pixels (raw), resampled into the window's output size
 * (ss_resample), mirrored, and written into the sample's row of the batch
 * (ss_write). With pixel steps (n_steps > 0: the pixel ops' programs, see
 * pixel.h) the sample is resampled into a per-thread uint8 HWC image, its
 * steps run on it, and it is then written into its row (laid out, and
 * normalized through `lut`); the tables of the program's trailing run of
 * table steps (ss_pixel_steps_table) are applied in that same write, composed
 * with `lut` for float outputs. Every window, scale, decode region and step is
 * computed by the caller (images/imagetasks.py), so this code only executes them.
 *
 * It stops at the first sample it does not handle, and returns its position
 * with `msg` saying why: a JPEG that fails to decode, a CMYK/YCCK or
 * progressive-with-scans-missing JPEG, a header that disagrees with the stored
 * shape, raw pixels of another channel count, a pixel step that cannot apply
 * (`msg` holds its ValueError's text). The caller runs that sample on
 * its own (which raises the error that names it, or decodes it whole), then
 * calls again from the next one.
 */
#ifndef SLIPSTREAM_TASK_H
#define SLIPSTREAM_TASK_H

#include <stddef.h>
#include <stdint.h>

enum { SS_RAW = 0, SS_JPEG = 1 };                   /* codecs (packed files' codes) */
enum { SS_UNCHECKED = 0, SS_REGION = 1, SS_WHOLE = 2 };  /* marks: ImageSource.checked */

typedef struct {
    /* per sample i: */
    const uint64_t *addrs;    /* where its bytes are (the caller keeps them alive) */
    const uint64_t *sizes;    /* how many */
    const uint8_t *codecs;    /* SS_RAW or SS_JPEG */
    const int32_t *shapes;    /* stored (H, W, C) */
    const int32_t *factors;   /* DCT scale 1/factor (1, 2, 4, 8) */
    const int64_t *regions;   /* (top, left, rows, cols) to decode, in the scaled image */
    const float *edges;       /* the window (top, bottom, left, right) in the scaled image */
    const uint8_t *flips;
    uint8_t *marks;           /* in/out: how its bytes decoded before (SS_REGION set on success) */
    const int64_t *rows;      /* the batch row it is written to */
    const double *steps;      /* n_steps pixel steps of SS_PIXEL_WORDS doubles at steps + i * n_steps * SS_PIXEL_WORDS */
    int n_steps;              /* 0: none (steps unused) */
    /* every sample: */
    int channels, out_h, out_w, chw, dtype, box_filter, fast;
    const void *lut;          /* float32 or float16 outputs: C x 256 normalized values */
    uint8_t *out;             /* sample i's output at out + rows[i] * row_bytes */
    size_t row_bytes;
    /* out: */
    double decode_s, resample_s;  /* seconds spent decoding, and resampling and writing */
    char msg[320];
} ss_task;

/* Returns the position of the first sample not done (`stop` when all are). */
int ss_run_task(ss_task *task, int start, int stop);

#endif
