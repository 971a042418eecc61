/*
 * roi: region-of-interest JPEG decoding with libjpeg-turbo's libjpeg API, in
 * plain C (no Python: it runs without the GIL, in any thread).
 *
 * roi_decode() decodes only the rows [top, top + height) and (at least) the
 * columns [left, left + width) of a JPEG:
 *   - jpeg_crop_scanline() restricts decoding to a column band aligned to the
 *     iMCU width (it can only widen the band, to the left);
 *   - jpeg_skip_scanlines() skips the rows above the window (no colour
 *     conversion/upsampling; for baseline images no IDCT either);
 *   - jpeg_read_scanlines() reads the window's rows; the rows below it are
 *     only entropy-decoded, for damage (see "Strictness" below).
 *
 * The column band is additionally widened by `margin` pixels on each side
 * (clamped to the image) before alignment, so that chroma "fancy" upsampling
 * at the band's edges sees the same neighbours as a full decode; with
 * margin >= 2 (the default) the window's pixels are identical to the same
 * window of a full decode by the same libjpeg.
 *
 * All coordinates are in output (i.e. DCT-scaled) pixels.  libjpeg errors
 * longjmp back: the call returns -1 with the message in job->msg.
 *
 * Strictness: every libjpeg warning (corrupt data, premature end of data,
 * extraneous bytes before a marker...) is an error, as in simplejpeg's
 * decode_jpeg(strict=True), TurboJPEG's TJFLAG_STOPONWARNING.  So that a
 * region decode accepts exactly the bytes a whole decode accepts, the rows
 * below the window are still entropy-decoded (jpeg_skip_scanlines: no IDCT,
 * no colour conversion, into nothing) and the file is read to its EOI marker
 * (jpeg_finish_decompress): damage anywhere in the file raises.
 */
#ifndef SLIPSTREAM_ROI_H
#define SLIPSTREAM_ROI_H

#include <stddef.h>
#include <stdio.h>

#include <jpeglib.h>

typedef struct {
    /* inputs */
    const unsigned char *data;
    unsigned long size;
    long top, left, height, width;
    int fast, gray, scale, margin, whole, check_rest;
    unsigned char *out;
    ptrdiff_t out_len;
    /* outputs */
    long row0, col0, rows, cols;
    ptrdiff_t needed;           /* set when `out` is too small */
    int incomplete;              /* set for a progressive image with scans missing */
    char msg[JMSG_LENGTH_MAX + 64];  /* set on failure */
} roi_job;

/* Decodes job's window. Returns 0, or -1 with job->msg set (job->incomplete
   for a progressive JPEG with scans missing: decode it whole instead). */
int roi_decode(roi_job *job);

typedef struct {
    unsigned long height, width;
    int components, colorspace;
    char msg[JMSG_LENGTH_MAX];
} roi_header;

/* Parses the header only.  Returns 0 on success, -1 with hdr->msg set. */
int roi_read_header(const unsigned char *data, unsigned long size, int scale, roi_header *hdr);

#endif
