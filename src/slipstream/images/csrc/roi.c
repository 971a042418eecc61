/* Region-of-interest JPEG decoding; see roi.h for the contract. */
#include "roi.h"

#include <setjmp.h>
#include <string.h>

/* ---------------------------------------------------------------- errors */

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jmp;
    char msg[JMSG_LENGTH_MAX];
} roi_error_mgr;

static void
roi_error_exit(j_common_ptr cinfo)
{
    roi_error_mgr *err = (roi_error_mgr *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, err->msg);
    longjmp(err->jmp, 1);
}

static void
roi_output_message(j_common_ptr cinfo)
{
    (void)cinfo;  /* nothing is printed: warnings become errors, trace messages are dropped */
}

static void
roi_emit_message(j_common_ptr cinfo, int msg_level)
{
    /* msg_level -1 is a warning: the data is corrupt (or not quite a JPEG).
       Like TurboJPEG with TJFLAG_STOPONWARNING (simplejpeg's strict=True), stop
       at the first one.  msg_level >= 0 are trace messages: ignored. */
    roi_error_mgr *err = (roi_error_mgr *)cinfo->err;
    if (msg_level >= 0)
        return;
    (*cinfo->err->format_message)(cinfo, err->msg);
    longjmp(err->jmp, 1);
}

/* Installs the error manager: errors and warnings longjmp to err->jmp. */
static struct jpeg_error_mgr *
roi_errors(roi_error_mgr *err)
{
    jpeg_std_error(&err->pub);
    err->pub.error_exit = roi_error_exit;
    err->pub.emit_message = roi_emit_message;
    err->pub.output_message = roi_output_message;
    err->msg[0] = '\0';
    return &err->pub;
}

/* Reads the rest of the image after the window's rows, for its warnings only.
   Most rows are entropy-decoded and discarded by jpeg_skip_scanlines(), in
   whole iMCU rows: skipping from the middle of one (an odd row, with the merged
   upsampler that fast=True selects for 2x2-subsampled images, which works on
   row pairs) makes libjpeg-turbo decode one iMCU row too many and warn of a
   premature end of data in a valid file. So the rows up to the next iMCU
   boundary are read into a one-row scratch buffer, whole iMCU rows skipped up
   to the last one, and that one read too (skipping to the very end would mark
   the input finished without reading it); then the input is read to its EOI
   marker. Returns 0, or -1 with `msg` set; libjpeg errors and warnings longjmp. */
static int
roi_read_rows(j_decompress_ptr cinfo, JSAMPARRAY row, JDIMENSION until, char *msg, size_t msg_len)
{
    while (cinfo->output_scanline < until) {
        if (jpeg_read_scanlines(cinfo, row, 1) == 0) {
            snprintf(msg, msg_len, "jpeg_read_scanlines stalled below the window");
            return -1;
        }
    }
    return 0;
}

static int
roi_drain(j_decompress_ptr cinfo, char *msg, size_t msg_len)
{
    JDIMENSION imcu = (JDIMENSION)(cinfo->max_v_samp_factor * cinfo->min_DCT_scaled_size);
    JDIMENSION height = cinfo->output_height, next, last;
    JSAMPARRAY row;

    if (cinfo->output_scanline >= height) {
        jpeg_finish_decompress(cinfo);
        return 0;
    }
    if (imcu < 1)
        imcu = 1;
    row = (*cinfo->mem->alloc_sarray)((j_common_ptr)cinfo, JPOOL_IMAGE,
                                      cinfo->output_width * (JDIMENSION)cinfo->output_components, 1);
    next = (cinfo->output_scanline + imcu - 1) / imcu * imcu;  /* the next iMCU boundary */
    last = (height - 1) / imcu * imcu;                          /* the start of the last iMCU row */
    if (next >= last) {  /* at most two iMCU rows left: read them */
        if (roi_read_rows(cinfo, row, height, msg, msg_len) != 0)
            return -1;
    } else {
        if (roi_read_rows(cinfo, row, next, msg, msg_len) != 0)
            return -1;
        if (jpeg_skip_scanlines(cinfo, last - next) != last - next) {
            snprintf(msg, msg_len, "jpeg_skip_scanlines fell short below the window");
            return -1;
        }
        if (roi_read_rows(cinfo, row, height, msg, msg_len) != 0)
            return -1;
    }
    jpeg_finish_decompress(cinfo);
    return 0;
}

/* Whether a progressive image lacks scans (or refinement bits): libjpeg then
   smooths blocks, and libjpeg-turbo versions smooth differently, so only a
   whole decode by the one libjpeg simplejpeg bundles gives the same pixels.
   Valid after jpeg_start_decompress(), which reads a progressive file whole. */
static int
roi_incomplete(j_decompress_ptr cinfo)
{
    int ci, k;
    if (!cinfo->progressive_mode || cinfo->coef_bits == NULL)
        return 0;
    for (ci = 0; ci < cinfo->num_components; ci++)
        for (k = 0; k < DCTSIZE2; k++)
            if (cinfo->coef_bits[ci][k] != 0)
                return 1;
    return 0;
}

/* ---------------------------------------------------------------- decode */



/* Runs without the GIL.  Returns 0 on success, -1 with job->msg set. */
int
roi_decode(roi_job *job)
{
    struct jpeg_decompress_struct cinfo;
    roi_error_mgr jerr;
    JDIMENSION xoff, band, row, full_width;
    long lo, hi;
    int channels;
    size_t stride, needed;
    unsigned char *base;

    cinfo.mem = NULL;  /* lets jpeg_destroy_decompress() run at any point */
    cinfo.err = roi_errors(&jerr);
    if (setjmp(jerr.jmp)) {
        snprintf(job->msg, sizeof(job->msg), "JPEG decode failed: %s",
                 jerr.msg);
        jpeg_destroy_decompress(&cinfo);
        return -1;
    }
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, job->data, job->size);
    jpeg_read_header(&cinfo, TRUE);

    switch (cinfo.jpeg_color_space) {
    case JCS_GRAYSCALE:
    case JCS_YCbCr:
    case JCS_RGB:
        break;
    default:
        snprintf(job->msg, sizeof(job->msg),
                 "unsupported JPEG colorspace %d (CMYK/YCCK/unknown)",
                 (int)cinfo.jpeg_color_space);
        goto fail;
    }
    cinfo.out_color_space = job->gray ? JCS_GRAYSCALE : JCS_RGB;
    cinfo.scale_num = 1;
    cinfo.scale_denom = (unsigned int)job->scale;
    cinfo.dct_method = job->fast ? JDCT_IFAST : JDCT_ISLOW;
    cinfo.do_fancy_upsampling = job->fast ? FALSE : TRUE;
    jpeg_calc_output_dimensions(&cinfo);

    if (job->top + job->height > (long)cinfo.output_height ||
        job->left + job->width > (long)cinfo.output_width) {
        snprintf(job->msg, sizeof(job->msg),
                 "window (top=%ld, left=%ld, height=%ld, width=%ld) exceeds "
                 "the %ux%u (HxW) output image",
                 job->top, job->left, job->height, job->width,
                 (unsigned)cinfo.output_height, (unsigned)cinfo.output_width);
        goto fail;
    }

    jpeg_start_decompress(&cinfo);
    if (roi_incomplete(&cinfo)) {
        job->incomplete = 1;
        snprintf(job->msg, sizeof(job->msg),
                 "a progressive JPEG with scans missing is decoded whole, "
                 "not by region (libjpeg versions smooth its blocks differently)");
        goto fail;
    }
    full_width = cinfo.output_width;  /* jpeg_crop_scanline() narrows output_width to the band */

    /* Column band: the window plus `margin` on each side, clamped. */
    lo = job->left - job->margin;
    hi = job->left + job->width + job->margin;
    if (lo < 0)
        lo = 0;
    if (hi > (long)cinfo.output_width)
        hi = (long)cinfo.output_width;
    xoff = (JDIMENSION)lo;
    band = (JDIMENSION)(hi - lo);
    if (band < cinfo.output_width)
        jpeg_crop_scanline(&cinfo, &xoff, &band);  /* aligns xoff down */

    channels = cinfo.output_components;
    if (job->whole) {  /* `out` is the whole output image: rows land in place */
        stride = (size_t)full_width * (size_t)channels;
        needed = stride * (size_t)cinfo.output_height;
        base = job->out + (size_t)job->top * stride + (size_t)xoff * (size_t)channels;
    } else {
        stride = (size_t)band * (size_t)channels;
        needed = stride * (size_t)job->height;
        base = job->out;
    }
    if ((size_t)job->out_len < needed) {
        job->needed = (ptrdiff_t)needed;
        snprintf(job->msg, sizeof(job->msg),
                 "out buffer too small: %zd bytes, need %zd", job->out_len,
                 job->needed);
        goto fail;
    }

    if (job->top > 0 &&
        jpeg_skip_scanlines(&cinfo, (JDIMENSION)job->top) !=
            (JDIMENSION)job->top) {
        snprintf(job->msg, sizeof(job->msg), "jpeg_skip_scanlines fell short");
        goto fail;
    }
    for (row = 0; row < (JDIMENSION)job->height;) {
        JSAMPROW ptr = base + (size_t)row * stride;
        JDIMENSION got = jpeg_read_scanlines(&cinfo, &ptr, 1);
        if (got == 0) {  /* only with suspending sources; not mem_src */
            snprintf(job->msg, sizeof(job->msg), "jpeg_read_scanlines stalled");
            goto fail;
        }
        row += got;
    }

    /* Below the window: entropy decoding only, for damage (see the top); not
       for bytes the caller has seen decode strictly before (check_rest=False). */
    if (job->check_rest && roi_drain(&cinfo, job->msg, sizeof(job->msg)) != 0)
        goto fail;
    jpeg_destroy_decompress(&cinfo);
    job->row0 = job->top;
    job->col0 = (long)xoff;
    job->rows = job->height;
    job->cols = (long)band;
    return 0;

fail:
    jpeg_destroy_decompress(&cinfo);
    return -1;
}



int
roi_read_header(const unsigned char *data, unsigned long size, int scale,
                roi_header *hdr)
{
    struct jpeg_decompress_struct cinfo;
    roi_error_mgr jerr;

    cinfo.mem = NULL;
    cinfo.err = roi_errors(&jerr);
    if (setjmp(jerr.jmp)) {
        memcpy(hdr->msg, jerr.msg, sizeof(hdr->msg));
        jpeg_destroy_decompress(&cinfo);
        return -1;
    }
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, data, size);
    jpeg_read_header(&cinfo, TRUE);
    cinfo.scale_num = 1;
    cinfo.scale_denom = (unsigned int)scale;
    jpeg_calc_output_dimensions(&cinfo);
    hdr->height = cinfo.output_height;
    hdr->width = cinfo.output_width;
    hdr->components = cinfo.num_components;
    hdr->colorspace = (int)cinfo.jpeg_color_space;
    jpeg_destroy_decompress(&cinfo);
    return 0;
}
